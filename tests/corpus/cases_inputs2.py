"""Hostile cases of what sparkbuild reads whole and trusts: files, a model's config, the
recipe's ``[model]``, the cache's unit table, the schedule simulator's table.

Each group answers one root cause (named above it); each case failed against the code
before the fix, and each group holds variants of the same attack spelled another way.
:data:`CASES` joins the corpus in :func:`corpus.cases._all_cases`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corpus import builders as b
from corpus.cases import Case, Invocation, _installed, _wheel_args
from corpus.cases_inputs import buildable_sdist
from sparkbuild.errors import RecipeError, UsageError, VerifyError

if TYPE_CHECKING:
    from collections.abc import Callable

LISTING = ("sparkbuild.flashinfer.module_set",)
PATCHING = ("sparkbuild.patches.engine",)
WHEEL = ("sparkbuild.pipeline",)
VERIFY = ("sparkbuild.node.installed_check",)
SIM = [sys.executable, str(Path(__file__).resolve().parents[2] / "bench" / "schedule_sim.py")]
FIFO = "a named pipe (FIFO), not a regular file"
DEVICE = "a character device, not a regular file"


def _fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def _sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk (a hole): read whole, it is ``size``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        out.truncate(size)
    return path


# -- 14. a file read whole: no type or size check ------------------------------------------


def _listing(recipe: Path) -> Invocation:
    return Invocation(["flashinfer-aot", "--list", "--recipe", str(recipe)])


def _recipe_is(make: Callable[[Path], Path]) -> Callable[[Path], Invocation]:
    """``flashinfer-aot --list --recipe R``, R what ``make(work)`` returns."""

    def build(work: Path) -> Invocation:
        return _listing(make(work))

    return build


def _link_to_fifo(work: Path) -> Path:
    link = work / "corpus.toml"
    link.symlink_to(_fifo(work / "pipe"))
    return link


def _series_fifo(work: Path) -> Invocation:
    tree = b.write_tree(work / "tree", b.source_files())
    _fifo(work / "recipe" / "patches" / "series")
    recipe = b.write_recipe(work / "recipe", b.recipe_text("unused", "patches/series"))
    return Invocation(["patch", "status", str(tree), "--recipe", str(recipe)])


def _patch_file_device(work: Path) -> Invocation:
    tree = b.write_tree(work / "tree", b.source_files())
    recipe = b.good_recipe(work / "recipe")
    patch = work / "recipe" / "patches" / "0001-arch.diff"
    patch.unlink()
    patch.symlink_to("/dev/zero")
    return Invocation(["patch", "status", str(tree), "--recipe", str(recipe)])


def _model_recipe(work: Path, model: str, config: dict[str, Any] | None = None,
                  config_file: Callable[[Path], object] | None = None) -> Path:
    """A recipe whose ``[model]`` is ``model`` (TOML lines); ``config``: a config.json
    beside it (``config = "config.json"`` is then the table's first line), or a file that
    ``config_file`` makes at that path."""
    directory = work / "recipe"
    directory.mkdir(parents=True, exist_ok=True)
    lines = "[model]\n"
    if config is not None or config_file is not None:
        lines += 'config = "config.json"\n'
        if config_file is not None:
            config_file(directory / "config.json")
        else:
            (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return b.write_recipe(directory, b.recipe_text("unused", "patches/series")
                          + "\n" + lines + model)


def _config_file(make: Callable[[Path], object]) -> Callable[[Path], Invocation]:
    return lambda work: _listing(_model_recipe(work, "", config_file=make))


def _dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def _dist_token(make: Callable[[Path], Path]) -> Callable[[Path], Invocation]:
    """``wheel --dist`` (a scheduler nobody serves) with ``--dist-token-file`` ``make``'s."""

    def build(work: Path) -> Invocation:
        args = _wheel_args(work, "--dist", "http://127.0.0.1:9",
                           "--dist-token-file", str(make(work)))
        return Invocation(args)

    return build


def _venv_file(name: str, make: Callable[[Path], object], *,
               command: str = "verify") -> Callable[[Path], Invocation]:
    """An installed venv whose ``name`` is replaced by what ``make(path)`` puts there."""

    def build(work: Path) -> Invocation:
        wheelhouse, venv = _installed(work)
        path = venv / name
        path.unlink()
        make(path)
        if command == "doctor":
            return Invocation(["doctor", "--node", "--venv", str(venv)])
        return Invocation(["verify", "--installed", str(venv), str(wheelhouse)])

    return build


def _wheel_with_units(content: Callable[[Path], object]) -> Callable[[Path], Invocation]:
    """``wheel`` over a cache whose unit table (``CACHE/units/memory.json``) ``content``
    writes: the build goes on, the table named and set aside."""

    def build(work: Path) -> Invocation:
        work.mkdir(parents=True, exist_ok=True)
        args = _wheel_args(work, source=buildable_sdist(work))
        table = work / "cache" / "units" / "memory.json"
        table.parent.mkdir(parents=True)
        content(table)

        def after() -> None:
            assert (work / "wheelhouse" / "manifest.json").is_file(), "no wheelhouse"
            data = json.loads(table.read_text(encoding="utf-8"))
            assert isinstance(data, dict), "the unit table was not written again"

        return Invocation(args, env={"SOURCE_DATE_EPOCH": "1700000000"}, after=after)

    return build


def _table_text(text: str) -> Callable[[Path], object]:
    return lambda path: path.write_text(text, encoding="utf-8")


FILE_CASES = [
    Case("inputs2-recipe-fifo", "files", RecipeError, f"recipe is {FIFO}",
         _recipe_is(lambda w: _fifo(w / "corpus.toml")), LISTING),
    Case("inputs2-recipe-link-to-fifo", "files", RecipeError, f"recipe is {FIFO}",
         _recipe_is(_link_to_fifo), LISTING),
    Case("inputs2-recipe-dev-zero", "files", RecipeError, f"recipe is {DEVICE}",
         _recipe_is(lambda w: Path("/dev/zero")), LISTING),
    Case("inputs2-recipe-sparse-8gib", "files", RecipeError, "recipe is over 4 MiB: not read",
         _recipe_is(lambda w: _sparse(w / "corpus.toml", 8 << 30)), LISTING),
    Case("inputs2-series-fifo", "files", RecipeError, f"the series file is {FIFO}",
         _series_fifo, PATCHING),
    Case("inputs2-patch-file-dev-zero", "files", RecipeError,
         f"patch file 0001-arch.diff is {DEVICE}", _patch_file_device, PATCHING),
    Case("inputs2-model-config-fifo", "files", RecipeError, f"the model's config is {FIFO}",
         _config_file(_fifo), LISTING),
    Case("inputs2-model-config-dev-zero", "files", RecipeError,
         f"the model's config is {DEVICE}", _config_file(_dev_zero), LISTING),
    Case("inputs2-model-config-sparse-8gib", "files", RecipeError,
         "the model's config is over 4 MiB: not read",
         _config_file(lambda p: _sparse(p, 8 << 30)), LISTING),
    Case("inputs2-dist-token-fifo", "files", UsageError, f"the dist token file is {FIFO}",
         _dist_token(lambda w: _fifo(w / "token")), WHEEL),
    Case("inputs2-dist-token-dev-zero", "files", UsageError,
         f"the dist token file is {DEVICE}", _dist_token(lambda w: Path("/dev/zero")), WHEEL),
    Case("inputs2-install-record-fifo", "files", VerifyError,
         f"sparkbuild-wheelhouse.json is {FIFO}",
         _venv_file("sparkbuild-wheelhouse.json", _fifo), VERIFY),
    Case("inputs2-install-record-dev-zero", "files", VerifyError,
         f"sparkbuild-wheelhouse.json is {DEVICE}",
         _venv_file("sparkbuild-wheelhouse.json", _dev_zero), VERIFY),
    Case("inputs2-profile-fifo", "files", VerifyError,
         "a named pipe (FIFO), not the profile the install wrote",
         _venv_file("sparkbuild/node.env", _fifo), VERIFY),
    Case("inputs2-units-table-fifo", "files", None, f"is {FIFO}: set aside",
         _wheel_with_units(_fifo), WHEEL),
]


# -- 15. a model's config.json: values through bare int(), float() and [0] -----------------

GOOD_CONFIG: dict[str, Any] = {"architectures": ["LlamaForCausalLM"], "head_dim": 128,
                               "num_attention_heads": 8, "num_key_value_heads": 8}


def _config(**fields: Any) -> Callable[[Path], Invocation]:
    """``flashinfer-aot --list`` of a recipe whose config.json is GOOD_CONFIG with ``fields``
    (a None value removes the key)."""
    config = {k: v for k, v in {**GOOD_CONFIG, **fields}.items() if v is not None}
    return lambda work: _listing(_model_recipe(work, "", config))


def _config_case(name: str, says: str, **fields: Any) -> Case:
    return Case(f"inputs2-config-{name}", "config", RecipeError, f"config.json: {says}",
                _config(**fields), LISTING)


ARCHITECTURES = "architectures must be a list of model class names"
HIDDEN = "hidden_size must be an integer from 1 to 1048576"
SOFTCAP = "final_logit_softcapping must be a finite number from 0 to 1000000"
CONFIG_CASES = [
    _config_case("architectures-a-string", ARCHITECTURES, architectures="LlamaForCausalLM"),
    _config_case("architectures-a-number", ARCHITECTURES, architectures=5),
    _config_case("architectures-an-object", ARCHITECTURES, architectures={"a": 1}),
    _config_case("architectures-true", ARCHITECTURES, architectures=True),
    _config_case("architectures-of-numbers", ARCHITECTURES, architectures=[7]),
    _config_case("hidden-size-text", HIDDEN, head_dim=None, hidden_size="big"),
    _config_case("hidden-size-a-list", HIDDEN, head_dim=None, hidden_size=[4096]),
    _config_case("heads-text-zero", "num_attention_heads must be an integer from 1 to 1024",
                 head_dim=None, hidden_size=4096, num_attention_heads="0"),
    _config_case("heads-a-float", "num_attention_heads must be an integer from 1 to 1024",
                 num_attention_heads=8.0),
    _config_case("layer-types-a-number", "layer_types must be a list", layer_types=7),
    _config_case("softcap-text", SOFTCAP, final_logit_softcapping="x"),
    _config_case("softcap-a-list", SOFTCAP, final_logit_softcapping=[30]),
    _config_case("softcap-infinite", SOFTCAP, final_logit_softcapping=float("inf")),
    _config_case("quantization-config-a-string", "quantization_config must be an object",
                 quantization_config="nvfp4"),
    _config_case("quantization-ignore-a-string",
                 "quantization_config.ignore must be a list of module name patterns",
                 quantization_config={"quant_algo": "NVFP4", "ignore": "lm_head"}),
    _config_case("quant-algo-a-list", "quantization_config.quant_algo must be a string",
                 quantization_config={"quant_algo": ["NVFP4"]}),
    _config_case("use-sliding-window-text", "use_sliding_window must be true or false",
                 sliding_window=4096, use_sliding_window="no"),
]


# -- 16. the recipe's [model]: no bounds, no consistency, three keys refused ---------------

FIELDS = "head_dim = 128\nnum_attention_heads = 8\nnum_key_value_heads = 8\n"


def _model(lines: str) -> Callable[[Path], Invocation]:
    """``flashinfer-aot --list`` of a ``[model]`` of FIELDS (a field ``lines`` gives again
    replaced) and ``lines``."""
    given = {line.split("=")[0].strip() for line in lines.splitlines()}
    kept = "".join(line + "\n" for line in FIELDS.splitlines()
                   if line.split("=")[0].strip() not in given)
    return lambda work: _listing(_model_recipe(work, kept + lines))


def _model_case(name: str, error: type[RecipeError] | None, says: str, lines: str) -> Case:
    return Case(f"inputs2-model-{name}", "model", error, says, _model(lines), LISTING)


PAGES = "model.kv_page_sizes must be a list of 16, 32, 64, each once"
SPECULATIVE = "model.speculative_tokens must be an integer from 0 to 16"
MOE = 'quantization = "nvfp4"\nexperts = 8\nexperts_per_token = 2\n'
MODEL_CASES = [
    _model_case("kv-page-sizes-true", RecipeError, PAGES, "kv_page_sizes = [true]\n"),
    _model_case("kv-page-sizes-repeated", RecipeError, PAGES, "kv_page_sizes = [16, 16]\n"),
    _model_case("kv-page-size-seven", RecipeError, PAGES, "kv_page_sizes = [7]\n"),
    _model_case("speculative-tokens-thirty-million", RecipeError, SPECULATIVE,
                "speculative_tokens = 30000000\n"),
    _model_case("speculative-tokens-a-thousand", RecipeError, SPECULATIVE,
                "speculative_tokens = 1000\n"),
    _model_case("tensor-parallel-not-dividing-heads", RecipeError,
                "num_attention_heads 8 does not divide over tensor_parallel_size 3",
                "tensor_parallel_size = 3\n"),
    _model_case("heads-not-a-multiple-of-kv-heads", RecipeError,
                "num_attention_heads 8 is not a multiple of num_key_value_heads 3",
                "num_key_value_heads = 3\n"),
    _model_case("experts-per-token-over-experts", RecipeError,
                "experts_per_token 10 is more than the model's 8 experts",
                "experts = 8\nexperts_per_token = 10\n"),
    _model_case("soft-cap-nan", RecipeError,
                "model.logits_soft_cap must be a finite number from 0 to 1000000",
                "logits_soft_cap = nan\n"),
    _model_case("quantization-ignore-numbers", RecipeError,
                "model.quantization_ignore must be a list of strings",
                "quantization_ignore = [1, 2]\n"),
    _model_case("hybrid-a-number", RecipeError, "model.hybrid must be bool", "hybrid = 1\n"),
    _model_case("hybrid-accepted", None, "GDN linear attention", "hybrid = true\n"),
    _model_case("shared-experts-accepted", None, "mlp.shared_expert.gate_up_proj",
                MOE + 'shared_experts = true\nquantization_ignore = ["lm_head"]\n'),
    _model_case("mtp-layers-accepted", None, "the MTP layers' bf16 experts",
                MOE + 'mtp_layers = 1\nquantization_ignore = ["mtp.*"]\n'),
]


# -- 21. a corrupted unit table in the cache crashes every later wheel ---------------------

UNIT = "csrc/kernel.cu||12.1a"
UNITS_CASES = [
    Case("inputs2-units-entry-a-list", "cache", None, "is list, not an object",
         _wheel_with_units(_table_text(json.dumps({UNIT: []}))), WHEEL),
    Case("inputs2-units-peak-text", "cache", None, "has peak_rss_bytes 'lots'",
         _wheel_with_units(_table_text(json.dumps(
             {UNIT: {"seconds": 4, "peak_rss_bytes": "lots"}}))), WHEEL),
    Case("inputs2-units-start-text", "cache", None, "has start 'soon'",
         _wheel_with_units(_table_text(json.dumps({UNIT: {"seconds": 4, "start": "soon"}}))),
         WHEEL),
    Case("inputs2-units-peak-infinite", "cache", None, "has peak_rss_bytes 'inf'",
         _wheel_with_units(_table_text(
             '{"' + UNIT + '": {"seconds": 4, "peak_rss_bytes": 1e999}}')), WHEEL),
    Case("inputs2-units-not-json", "cache", None, "memory.json is not JSON",
         _wheel_with_units(_table_text('{"csrc/kernel.cu||12.1a": ')), WHEEL),
]


# -- 22. bench/schedule_sim.py trusts its table --------------------------------------------


def _sim(table: str, *args: str) -> Callable[[Path], Invocation]:
    """``bench/schedule_sim.py TABLE ARGS`` of the table text ``table``."""

    def build(work: Path) -> Invocation:
        path = work / "units.json"
        path.write_text(table, encoding="utf-8")
        share = work / "share.json"
        share.write_text(json.dumps({"units": [
            {"unit": "vllm a.cu", "failed_steps": [], "cpu_s": 2.0, "local_share": 0.1,
             "up_bytes": 1000, "down_bytes": 1000}]}), encoding="utf-8")
        rest = [str(share) if arg == "SHARE" else arg for arg in args]
        return Invocation([str(path), *rest], program=SIM)

    return build


ONE_UNIT = json.dumps({"units": [{"path": "csrc/a.cu", "seconds": 3.0}]})
SIM_CASES = [
    Case("inputs2-sim-unit-without-seconds", "bench", UsageError,
         "unit 1 (csrc/a.cu) has no seconds", _sim('{"units": [{"path": "csrc/a.cu"}]}'), ()),
    Case("inputs2-sim-units-an-object", "bench", UsageError,
         "units must be a list of units, not dict", _sim('{"units": {"csrc/a.cu": 3}}'), ()),
    Case("inputs2-sim-units-null", "bench", UsageError,
         "units must be a list of units, not absent", _sim('{"units": null}'), ()),
    Case("inputs2-sim-empty-list", "bench", UsageError, "holds no unit", _sim("[]"), ()),
    Case("inputs2-sim-seconds-text", "bench", UsageError,
         "has seconds 'ten', not a number of 0 or more",
         _sim('[{"path": "csrc/a.cu", "seconds": "ten"}]'), ()),
    Case("inputs2-sim-not-json", "bench", UsageError, "units.json is not JSON", _sim("{"), ()),
    Case("inputs2-sim-sparks-not-counts", "bench", UsageError,
         "--sparks '1,x' is not a list of positive counts",
         _sim(ONE_UNIT, "--team", "SHARE", "--sparks", "1,x"), ()),
]

CASES: list[Case] = [*FILE_CASES, *CONFIG_CASES, *MODEL_CASES, *UNITS_CASES, *SIM_CASES]
