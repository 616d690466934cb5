# Sourced by the device preps (bench/first-start, bench/full-build): a copy of the Spark's
# series for a device run, bundled so the device needs no series of its own.
#   derived_series DIR RECIPE DROP [ADD...]
# writes DIR/patches/ (the series' patch files and a series less the entries named DROP,
# ending with the patch files ADD in order, each pinned by its sha256; DROP may be "", an
# ADD of "" is skipped), DIR/csrc (which
# the E2M1 patch injects, as ../csrc), and DIR/patches/recipe.toml (RECIPE, its series path
# pointing at that copy).  REPO is the repository root.
derived_series() {
  local dir=$1 recipe=$2 drop=$3 add series=$1/patches; shift 3
  rm -rf "$dir"; mkdir -p "$series"; cp -r "$REPO/csrc" "$dir/"
  grep -v '^#' "$REPO/patches/series" | grep . |
    if [ -n "$drop" ]; then grep -v "^$drop"; else cat; fi > "$series/series"
  cut -d' ' -f1 "$series/series" | while read -r f; do cp "$REPO/patches/$f" "$series/"; done
  for add in "$@"; do
    [ -n "$add" ] || continue
    cp "$add" "$series/"
    echo "$(basename "$add") sha256=$(sha256sum "$add" | cut -d' ' -f1)" >> "$series/series"
  done
  sed 's|^path = .*series"$|path = "series"|' "$recipe" > "$series/recipe.toml"
  grep -q '^path = "series"$' "$series/recipe.toml" ||
    { echo "the recipe's series path was not rewritten: $recipe" >&2; exit 1; }
}
