"""bench/first-start/first_start.py on CPU: a tiny random model, its greedy reference twice
(the same tokens), and the record's comparison, which must also catch a changed token.

vLLM itself runs on a GPU machine (bench/first-start/fs.sh); here its JSON is stood in
for by a second reference run, so only transformers (and torch) are needed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.script_loader import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "first-start" / "first_start.py"


def _script() -> ModuleType:
    return load_script(SCRIPT)


def test_tiny_model_reference_and_record(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    fs = _script()
    model = tmp_path / "model"
    assert fs.main(["write-model", str(model), "--layers", "2", "--vocab", "512",
                    "--dtype", "float32", "--out", str(tmp_path / "model.json")]) == 0
    assert (model / "config.json").is_file() and (model / "model.safetensors").is_file()
    config = json.loads((model / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["vocab_size"] == 512

    for name in ("ref", "again"):
        assert fs.main(["reference", str(model), "--out", str(tmp_path / f"{name}.json"),
                        "--device", "cpu", "--max-new", "8"]) == 0
    ref = json.loads((tmp_path / "ref.json").read_text())
    assert len(ref["tokens"]) == 8 and all(0 <= t < 512 for t in ref["tokens"])
    assert len(ref["margins"]) == 8
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["tokens"] == ref["tokens"]  # greedy and seeded: the same tokens

    # stand-in for vLLM's JSON: the same tokens, then one changed token
    vllm = {"tokens": ref["tokens"], "seconds": {"time_to_first_token": 1.5}}
    (tmp_path / "vllm.json").write_text(json.dumps(vllm))
    evidence = {"flashinfer_jit_files": [], "nvcc_calls": 0, "outbound_connections": []}
    (tmp_path / "evidence.json").write_text(json.dumps(evidence))
    args = ["record", "--reference", str(tmp_path / "ref.json"), "--vllm",
            str(tmp_path / "vllm.json"), "--evidence", str(tmp_path / "evidence.json"),
            "--model", str(tmp_path / "model.json"), "--out", str(tmp_path / "result.json")]
    assert fs.main(args) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["equal"] is True and result["first_difference"] is None
    assert result["reference_tokens"] == result["tokens"] == ref["tokens"]
    assert result["time_to_first_token_s"] == 1.5
    assert result["nothing_compiled_or_downloaded"] is True
    assert result["model"]["layers"] == 2

    changed = list(ref["tokens"])
    changed[3] = (changed[3] + 1) % 512
    (tmp_path / "vllm.json").write_text(json.dumps({**vllm, "tokens": changed}))
    evidence["nvcc_calls"] = 1
    (tmp_path / "evidence.json").write_text(json.dumps(evidence))
    assert fs.main(args) == 1
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["equal"] is False and result["first_difference"] == 3
    assert result["reference_margin_there"] == ref["margins"][3]
    assert result["nothing_compiled_or_downloaded"] is False


def test_the_record_tells_flashinfer_generated_sources_from_a_compile(tmp_path: Path) -> None:
    """flashinfer writes a module's generated sources and its log into the workspace before it
    loads the prebuilt library (bench/first-start/2026-12-04-first-token): not a compile.  A
    library or ninja's file there is one; so are an nvcc call and driver-JIT-compiled PTX."""
    fs = _script()
    (tmp_path / "ref.json").write_text(json.dumps({"tokens": [5, 6, 7], "margins": [1, 1, 1]}))
    (tmp_path / "vllm.json").write_text(json.dumps(
        {"tokens": [5, 6, 7], "seconds": {"time_to_first_token": 2.0}}))
    gen = "/ws/.cache/flashinfer/0.6.8.post1/90a/generated/batch_prefill_x"
    written = [f"{gen}/batch_prefill.cu", f"{gen}/batch_prefill_config.inc",
               "/ws/.cache/flashinfer/0.6.8.post1/90a/flashinfer_jit.log"]
    built = "/ws/.cache/flashinfer/0.6.8.post1/90a/cached_ops/batch_prefill_x"
    args = ["record", "--reference", str(tmp_path / "ref.json"), "--vllm",
            str(tmp_path / "vllm.json"), "--evidence", str(tmp_path / "evidence.json"),
            "--out", str(tmp_path / "result.json")]

    def judged(files: list[str], nvcc_calls: int = 0, driver_jit: int = 0) -> dict[str, Any]:
        (tmp_path / "evidence.json").write_text(json.dumps(
            {"flashinfer_jit_files": files, "nvcc_calls": nvcc_calls,
             "outbound_connections": [], "driver_jit_cache_files": driver_jit}))
        assert fs.main(args) == 0  # the tokens are equal in every case
        result: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
        return result

    clean = judged(written)
    assert clean["nothing_compiled_or_downloaded"] is True
    assert clean["flashinfer_workspace_files"]["generated_sources"] == written[:2]
    assert clean["flashinfer_workspace_files"]["other"] == written[2:]
    for product in (f"{built}/batch_prefill_x.so", f"{built}/build.ninja", f"{built}/x.cuda.o"):
        result = judged([*written, product])
        assert result["nothing_compiled_or_downloaded"] is False
        assert result["flashinfer_workspace_files"]["build_products"] == [product]
    assert judged(written, nvcc_calls=1)["nothing_compiled_or_downloaded"] is False
    assert judged(written, driver_jit=3)["nothing_compiled_or_downloaded"] is False


def test_the_network_guard_refuses_outbound_tcp_and_logs_it(tmp_path: Path) -> None:
    """guard/sitecustomize.py: a TCP connect to a routable address fails at once and is
    logged; loopback works; a UDP connect (vLLM's get_ip) is logged as a route probe."""
    import subprocess
    import sys

    log = tmp_path / "sockets.jsonl"
    probe = (
        "import socket, errno\n"
        "server = socket.socket(); server.bind(('127.0.0.1', 0)); server.listen()\n"
        "socket.create_connection(server.getsockname(), timeout=5).close()\n"
        "udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.connect(('8.8.8.8', 80))\n"
        "try:\n    socket.create_connection(('192.0.2.1', 443), timeout=5)\n"
        "except OSError as exc:\n    print('refused', exc.errno == errno.ENETUNREACH)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60,
                         env={"PYTHONPATH": str(SCRIPT.parent / "guard"),
                              "FIRST_START_SOCKET_LOG": str(log), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "refused True"
    kinds = [json.loads(line)["kind"] for line in log.read_text().splitlines()]
    assert kinds == ["udp_connect", "tcp_connect"]


def test_the_gpu_machine_scripts_parse_and_name_only_files_that_exist() -> None:
    """prep_here.sh copies ``$HERE/NAME`` into .devrun/ and fs.sh runs ``$D/NAME``: each
    must be a file of bench/first-start (or the one prep_here copies from bench/real-build)."""
    import re
    import subprocess

    here = SCRIPT.parent
    copied = set()
    for script in ("prep_here.sh", "fs.sh"):
        subprocess.run(["bash", "-n", str(here / script)], check=True, timeout=60)
        text = (here / script).read_text()
        named = set(re.findall(r"\$(?:HERE|D)/([A-Za-z_][\w.-]*)", text))
        if script == "prep_here.sh":
            copied = set(re.findall(r"\$HERE/([A-Za-z_][\w.-]*)", text))
        made = {"parts", "whl", "runtime", "bundle.tar.xz", "runtime-all.tar",
                "node_set.json", "image-view.txt", "runtime-parts.txt", "cudaroot.sh",
                "build.tar", "targets.txt", "model-args.txt", "sources.json", "NO-BUNDLE.txt",
                "sparkbuild-"}  # sparkbuild-*.whl, which device_wheels writes
        missing = {n for n in named - made
                   if not (here / n).exists()}
        assert missing == set(), f"{script} names {sorted(missing)}"
    ran = set(re.findall(r"\$D/([A-Za-z_][\w.-]*\.(?:py|sh))", (here / "fs.sh").read_text()))
    assert ran - {"cudaroot.sh"} <= copied  # what fs.sh runs on the GPU machine was carried there


def _bench_script(name: str) -> ModuleType:
    sys.path.insert(0, str(SCRIPT.parent))  # the scripts import each other, as on the GPU machine
    try:
        return load_script(SCRIPT.parent / f"{name}.py")
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_the_node_set_takes_the_image_s_own_version_or_carries_it() -> None:
    # an image that holds numpy 2.5.2 where vLLM 0.20.0's closure needs < 2.4, and
    # numba 0.68.0 where vLLM pins 0.65.0: carried by name alone, both would be missed
    mw = _bench_script("missing_wheels")
    image = mw.freeze_versions("# a comment\nnumpy==2.5.2\ntorch==2.11.0\nNumba==0.68.0\n")
    assert image == {"numpy": "2.5.2", "torch": "2.11.0", "numba": "0.68.0"}
    pins = [("torch", "2.11.0"), ("numpy", "2.3.5"), ("numba", "0.65.0"), ("fastapi", "1.0")]
    from_image, to_carry, left_out = mw.split(pins, image)
    assert from_image == [{"name": "torch", "version": "2.11.0"}]
    assert to_carry == [("numpy", "2.3.5"), ("fastapi", "1.0")]
    assert [(o["name"], o["image_has"]) for o in left_out] == [("numba", "0.68.0")]


def test_llguidance_is_left_out_only_where_vllm_imports_it_lazily() -> None:
    # vLLM 0.20.0 reads llguidance.LLMatcher as the engine imports
    # (bench/flashinfer-gpu/2026-12-05-tiny-moe-vllm)
    mw = _bench_script("missing_wheels")
    pins = [("llguidance", "1.3.0")]
    old = mw.sdist_version(Path("vllm-0.20.0.tar.gz"))
    assert str(old) == "0.20.0" and mw.split(pins, {}, old)[1] == pins
    new = mw.sdist_version(Path("vllm-0.29.0.tar.gz"))
    assert [o["name"] for o in mw.split(pins, {}, new)[2]] == ["llguidance"]
    assert mw.sdist_version(Path("not-a-version.tar.gz")) is None


def test_the_image_view_links_the_wanted_versions_only(tmp_path: Path) -> None:
    site, view = tmp_path / "site", tmp_path / "view"
    (site / "foo").mkdir(parents=True)
    (site / "foo" / "__init__.py").write_text("")
    info = site / "foo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Foo\nVersion: 1.0\n")
    (info / "RECORD").write_text("foo/__init__.py,,\nfoo-1.0.dist-info/METADATA,,\n"
                                 "../../../bin/foo,,\n")
    iv = _bench_script("image_view")
    result = iv.link({"foo": "1.0", "bar": "2.0"}, view, path=[str(site)])
    assert result["linked"] == ["foo==1.0"]
    assert result["problems"] == ["bar==2.0: the image has nothing"]
    assert sorted(p.name for p in view.iterdir()) == ["foo", "foo-1.0.dist-info"]
    assert (view / "foo").resolve() == (site / "foo").resolve()
    again = iv.link({"foo": "1.1"}, tmp_path / "view2", path=[str(site)])
    assert again["problems"] == ["foo==1.1: the image has 1.0"] and again["linked"] == []


def _fs(tmp_path: Path, devrun: Path, *args: str) -> str:
    import os
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("needs bash")
    env = {**os.environ, "DRY": "1", "FS_ROOT": str(tmp_path / "root"),
           "OUT": str(tmp_path / "out"), "FS_D": str(devrun)}
    done = subprocess.run([bash, str(devrun / "fs.sh"), *args], env=env, text=True,
                          capture_output=True, timeout=120, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _build_tar(tmp_path: Path, **files: str) -> Path:
    """.devrun as prep_here.sh leaves it: the scripts, and build.tar in parts/."""
    import shutil
    import tarfile

    devrun = tmp_path / "devrun"
    (devrun / "parts").mkdir(parents=True)
    for name in ("fs.sh", "first_start.py"):
        shutil.copy(SCRIPT.parent / name, devrun / name)
    inside = tmp_path / "inside"
    (inside / "whl").mkdir(parents=True)
    (inside / "whl" / "sparkbuild-0.1.0-py3-none-any.whl").write_bytes(b"w")
    (inside / "runtime-parts.txt").write_text("runtime.tar.00 10\n")
    for name, text in files.items():
        (inside / name.replace("_", "-").replace("-txt", ".txt")).write_text(text)
    with tarfile.open(devrun / "parts" / "build.tar", "w") as tar:
        for path in sorted(inside.iterdir()):
            tar.add(path, arcname=path.name)
    return devrun


def test_the_first_start_of_0_29_0_builds_its_own_targets_and_writes_the_moe_model(
        tmp_path: Path) -> None:
    """fs.sh with DRY=1: the chain in order, with build.tar's stack (vLLM 0.29.0
    has no _C; the tiny model is a Qwen3-MoE), JIT disabled at the start."""
    devrun = _build_tar(tmp_path, targets_txt="_C_stable_libtorch,_moe_C_stable_libtorch,"
                        "_vllm_fa2_C\n", model_args_txt="--arch qwen3_moe\n")
    out = _fs(tmp_path, devrun, "receive") + _fs(tmp_path, devrun, "build", "5")
    root = tmp_path / "root"
    assert "received build.tar" in out
    (wheel,) = [line for line in out.splitlines() if "wheel started:" in line]
    assert f"--bundle {root}/bundle.tar.xz --use-existing-torch --targets " \
           "_C_stable_libtorch,_moe_C_stable_libtorch,_vllm_fa2_C --no-closure" in wheel
    assert f"write-model {root}/model --arch qwen3_moe" in out
    assert "would wait for the runtime parts" in out  # runtime.tar.00 was never carried
    prove = next(line for line in out.splitlines() if line.startswith("would prove"))
    assert "--attention-backend FLASHINFER" in prove and "FLASHINFER_DISABLE_JIT=1" in prove
    order = [out.index(key) for key in ("would stage", "wheel started", "would prove")]
    assert order == sorted(order)


def test_the_stack_of_0_20_0_is_the_default(tmp_path: Path) -> None:
    out = _fs(tmp_path, _build_tar(tmp_path), "receive") + _fs(
        tmp_path, tmp_path / "devrun", "build", "5")
    assert "--targets _C,_C_stable_libtorch,_vllm_fa2_C " in out
    assert f"write-model {tmp_path}/root/model  and" in out  # no model arguments: the Llama


def test_a_build_tar_in_pieces_waits_for_the_last(tmp_path: Path) -> None:
    devrun = _build_tar(tmp_path, targets_txt="_C_stable_libtorch\n")
    whole = (devrun / "parts" / "build.tar").read_bytes()
    (devrun / "parts" / "build.tar").unlink()
    half = len(whole) // 2
    (devrun / "parts" / "build.tar.00").write_bytes(whole[:half])
    (devrun / "parts" / "build-parts.txt").write_text(
        f"build.tar.00 {half}\nbuild.tar.01 {len(whole) - half}\n")
    first = _fs(tmp_path, devrun, "receive") + _fs(tmp_path, devrun, "build", "5")
    assert "build.tar is not whole yet" in first and "wheel started" not in first
    (devrun / "parts" / "build.tar.00").unlink()
    (devrun / "parts" / "build.tar.01").write_bytes(whole[half:])
    second = _fs(tmp_path, devrun, "receive") + _fs(tmp_path, devrun, "build", "5")
    assert "--targets _C_stable_libtorch " in second


def test_the_node_set_of_0_29_0_holds_the_image_s_torch(tmp_path: Path) -> None:
    """--existing-torch removes the torch pins as `wheel --use-existing-torch` does, and
    --drop a requirement the index cannot give, with the index line that names it."""
    import tarfile

    mw = _bench_script("missing_wheels")
    top = tmp_path / "src" / "vllm-0.29.0" / "requirements"
    top.mkdir(parents=True)
    (top / "common.txt").write_text("numpy\ntransformers >= 5.10.4\n")
    (top / "cuda.txt").write_text(
        "-r common.txt\ntorch==2.13.0\ntorchaudio==2.11.0\ntorchvision==0.28.0 # why\n"
        "--extra-index-url https://flashinfer.ai/whl/\nflashinfer-python==0.6.18\n"
        "flashinfer-cubin==0.6.18\nnumba == 0.65.0\n")
    sdist = tmp_path / "vllm-0.29.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tmp_path / "src" / "vllm-0.29.0", arcname="vllm-0.29.0")
    cuda = mw.requirements(sdist, tmp_path / "x", existing_torch=True, drop=("flashinfer-cubin",))
    assert cuda.read_text().splitlines() == [
        "-r common.txt", "flashinfer-python==0.6.18", "numba == 0.65.0"]
    assert (cuda.parent / "common.txt").read_text() == "numpy\ntransformers >= 5.10.4\n"
    kept = mw.requirements(sdist, tmp_path / "y")
    assert "torch==2.13.0" in kept.read_text()  # without the switches, as shipped


def test_a_start_that_misses_a_flashinfer_module_is_recorded_with_its_name(
        tmp_path: Path) -> None:
    fs = _script()

    class MissingJITCacheError(RuntimeError):  # flashinfer's, by name (flashinfer/jit/core.py)
        def __init__(self, message: str, spec: Any) -> None:
            self.spec = spec
            super().__init__(message)

    class Spec:
        name = "sampling"

    try:
        try:
            raise MissingJITCacheError("JIT compilation is disabled", Spec())
        except MissingJITCacheError as inner:
            raise RuntimeError("Engine core initialization failed") from inner
    except RuntimeError as error:
        failed = fs.failed_start(error)
    assert failed["missing_jit_module"] == "sampling" and failed["tokens"] == []
    assert failed["error"].startswith("RuntimeError: Engine core initialization failed")
    (tmp_path / "vllm.json").write_text(json.dumps(failed))
    (tmp_path / "ref.json").write_text(json.dumps({"tokens": [5, 6], "margins": [1, 1]}))
    assert fs.main(["record", "--reference", str(tmp_path / "ref.json"), "--vllm",
                    str(tmp_path / "vllm.json"), "--out", str(tmp_path / "r.json")]) == 1
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["equal"] is False and result["missing_jit_module"] == "sampling"
    assert result["time_to_first_token_s"] is None


def test_the_tiny_moe_model_routes_with_wide_gaps(tmp_path: Path) -> None:
    """write-model --arch qwen3_moe (no download) at its chosen seed: its reference is
    greedy and repeatable, and no token's router sits on a near tie between two experts."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    fs = _script()
    model = tmp_path / "moe"
    assert fs.main(["write-model", str(model), "--arch", "qwen3_moe", "--dtype", "bfloat16",
                    "--out", str(tmp_path / "model.json")]) == 0
    made = json.loads((tmp_path / "model.json").read_text())
    assert (made["experts"], made["top_k"], made["seed"]) == (8, 2, fs.SEEDS["qwen3_moe"][0])
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["Qwen3MoeForCausalLM"]
    assert config["num_experts_per_tok"] == 2
    assert config["hidden_size"] // config["num_attention_heads"] == 64  # FA2/FA3 head_dim 64
    assert fs.main(["reference", str(model), "--out", str(tmp_path / "ref.json"),
                    "--device", "cpu"]) == 0
    ref = json.loads((tmp_path / "ref.json").read_text())
    assert len(ref["tokens"]) == 16 and min(ref["margins"]) >= 0.25
    gap = fs.router_gap(model, fs.PROMPT + ref["tokens"])
    assert gap is not None and gap > 0.1
    llama = tmp_path / "llama"
    fs.write_model(llama, layers=1)
    assert fs.router_gap(llama, fs.PROMPT) is None
