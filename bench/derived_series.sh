# Sourced by the device preps (bench/first-start, bench/full-build): a copy of the Spark's
# series for a device run, bundled so the device needs no series of its own.
#   derived_series DIR RECIPE DROP ADD
# writes DIR/patches/ (the series' patch files and a series less the entries named DROP,
# ending with the patch file ADD pinned by its sha256; either may be ""), DIR/csrc (which
# the E2M1 patch injects, as ../csrc), and DIR/patches/recipe.toml (RECIPE, its series path
# pointing at that copy).  REPO is the repository root.
derived_series() {
  local dir=$1 recipe=$2 drop=$3 add=$4 series=$1/patches
  rm -rf "$dir"; mkdir -p "$series"; cp -r "$REPO/csrc" "$dir/"
  grep -v '^#' "$REPO/patches/series" | grep . |
    if [ -n "$drop" ]; then grep -v "^$drop"; else cat; fi > "$series/series"
  cut -d' ' -f1 "$series/series" | while read -r f; do cp "$REPO/patches/$f" "$series/"; done
  if [ -n "$add" ]; then
    cp "$add" "$series/"
    echo "$(basename "$add") sha256=$(sha256sum "$add" | cut -d' ' -f1)" >> "$series/series"
  fi
  sed 's|^path = .*series"$|path = "series"|' "$recipe" > "$series/recipe.toml"
  grep -q '^path = "series"$' "$series/recipe.toml" ||
    { echo "the recipe's series path was not rewritten: $recipe" >&2; exit 1; }
}
