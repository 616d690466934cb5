"""Which of a vLLM tree's modules serve a model and an attention backend, read from its code.

vLLM maps an architecture name (``config.json``'s ``architectures``) to the module that
implements it in a dict literal of its model registry, ``"Qwen3NextForCausalLM":
("qwen3_next", "Qwen3NextForCausalLM")`` (a name relative to the registry's package, or a
whole dotted name such as ``vllm.models.qwen4_exp``), and each attention backend to its
class in an enum whose values are dotted class paths (``FLASHINFER =
"vllm.v1.attention.backends.flashinfer.FlashInferBackend"``).  Both are read with ``ast``
from the tree itself, so a new release's entries are what the next build reads.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

MODEL_REGISTRY = "model_executor/models/registry.py"
"""The model registry, relative to the package."""
BACKEND_REGISTRY = "v1/attention/backends/registry.py"
"""The attention backends' enum, relative to the package."""
_DRAFT_MARK = "MTP"
"""Registry names of a model's multi-token-prediction draft (``Qwen3NextMTP``)."""


@dataclass(frozen=True)
class RegistryEntry:
    name: str
    """The architecture or backend name."""
    module: str
    """The dotted module that implements it."""
    where: str
    """``FILE:LINE`` of the entry, tree-relative."""


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _strings(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Tuple) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [str(e.value) for e in node.elts if isinstance(e, ast.Constant)]
    return None


def model_entries(tree: Path, package: str) -> list[RegistryEntry]:
    """Every ``"Architecture": ("module", "Class")`` entry of the model registry."""
    relative = f"{package}/{MODEL_REGISTRY}"
    parsed = _parse(tree / relative)
    if parsed is None:
        return []
    base = ".".join([package, *Path(MODEL_REGISTRY).parent.parts])
    found = []
    for node in ast.walk(parsed):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            pair = _strings(value) if value is not None else None
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)
                    and pair and len(pair) == 2):
                continue
            module = pair[0] if pair[0].startswith(f"{package}.") else f"{base}.{pair[0]}"
            found.append(RegistryEntry(key.value, module, f"{relative}:{key.lineno}"))
    return found


def _stem(architecture: str) -> str:
    for suffix in ("ForCausalLM", "ForConditionalGeneration", "Model"):
        if architecture.endswith(suffix) and len(architecture) > len(suffix):
            return architecture[:-len(suffix)]
    return architecture


def model_modules(tree: Path, package: str, architecture: str, *,
                  draft: bool) -> list[RegistryEntry]:
    """The registry's entries for ``architecture``, and with ``draft`` those of its
    multi-token-prediction draft: the architecture's stem followed by ``MTP``
    (``Qwen3NextMTP`` beside ``Qwen3NextForCausalLM``, ``Glm4MoeMTPModel`` beside
    ``Glm4MoeForCausalLM``; not ``Glm4MoeLiteMTPModel``, another model's draft)."""
    draft_name = _stem(architecture) + _DRAFT_MARK
    return [entry for entry in model_entries(tree, package)
            if entry.name == architecture or (draft and entry.name.startswith(draft_name))]


def backend_module(tree: Path, package: str, backend: str) -> RegistryEntry | None:
    """The module of attention backend ``backend`` (``FLASHINFER``), if the enum has it."""
    relative = f"{package}/{BACKEND_REGISTRY}"
    parsed = _parse(tree / relative)
    if parsed is None:
        return None
    for node in ast.walk(parsed):
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
                continue
            target, value = statement.targets[0], statement.value
            if (isinstance(target, ast.Name) and target.id == backend
                    and isinstance(value, ast.Constant) and isinstance(value.value, str)
                    and "." in value.value):
                return RegistryEntry(backend, value.value.rpartition(".")[0],
                                     f"{relative}:{statement.lineno}")
    return None
