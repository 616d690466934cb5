"""CycloneDX SBOMs: ``sbom.cdx.json`` of the wheelhouse, and the one inside the built wheel.

Written with cyclonedx-python-lib, as CycloneDX 1.6 JSON:

* every wheel of the wheelhouse: name, version, purl (``pkg:pypi/NAME@VERSION``) and sha256,
  with its role (built, pin, closure) and file as properties;
* the built wheel's pedigree: its source (the upstream release as an ancestor, with the
  commit or the sdist's sha256), and the series, each patch one ``pedigree.patches`` entry
  of type ``unofficial``; CycloneDX gives a patch no hash, so each patch's sha256 and
  outcome are properties of the built component (``sparkbuild:patch:NAME:sha256``,
  ``...:status``) and lines of ``pedigree.notes``;
* the vendored sources (CUTLASS, flash-attention, ...) as sub-components of the built wheel,
  each with its commit (or archive hash) and ``sparkbuild:patched``: whether a patch of the
  series touched it (the series patches the source tree; a vendored source is unpacked
  from the cache as fetched, so it is ``false`` unless it lies inside the tree);
* the toolchain (nvcc/CUDA, torch, the compilers, cmake, ninja, Python) as
  ``metadata.tools``.

Both are reproducible: ``metadata.timestamp`` is the build's ``SOURCE_DATE_EPOCH``, every
``bom-ref`` is derived from what it names, and the serial number is a UUID derived from the
document's own content, so the same inputs give the same bytes.  The wheel's SBOM (PEP 770:
``<name>-<version>.dist-info/sboms/sbom.cdx.json``) cannot hold the wheel's own hash; the
wheelhouse's holds every file's.  ``verify`` reads the wheelhouse's back
(:func:`sbom_disagreements`): its wheels against the files present, and every component,
the pedigree, the patch properties, the purls and ``metadata.tools`` against what the
manifest says the SBOM must hold (it is written again from the manifest and compared part
by part), so a stripped pedigree or a renamed purl does not agree.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from cyclonedx.model import (
    ExternalReference,
    ExternalReferenceType,
    HashAlgorithm,
    HashType,
    Property,
    XsUri,
)
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import (
    Commit,
    Component,
    ComponentType,
    Diff,
    Patch,
    PatchClassification,
    Pedigree,
)
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from packaging.utils import canonicalize_name

from sparkbuild import __version__
from sparkbuild.records import one_of
from sparkbuild.store.user_files import parse_json
from sparkbuild.store.wheel_check import normal_version
from sparkbuild.wheelhouse.manifest import WHEEL_ROLES, WheelRole
from sparkbuild.wheelhouse.pylock import listing_disagreements

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

SBOM_NAME = "sbom.cdx.json"
WHEEL_SBOM = "sboms/sbom.cdx.json"
"""Where the built wheel carries its SBOM, under its ``.dist-info`` (PEP 770)."""
_PREFIX = "sparkbuild"
_SERIAL_NAMESPACE = uuid.UUID("6f9619ff-8b86-d011-b42d-00c04fc964ff")
CommitRole = Literal["pin", "used"]
"""A stand-in's commit: the one the tree pins, or the one built."""
_TOOL_NAMES = {"nvcc": "cuda-nvcc", "gcc": "gcc", "cmake": "cmake", "ninja": "ninja",
               "torch": "torch", "python": "cpython", "torch_cuda": "torch-cuda"}


@dataclass(frozen=True)
class SbomWheel:
    """A wheel of the wheelhouse (``sha256``/``file`` None: the wheel's own SBOM)."""

    name: str
    version: str
    role: WheelRole | None
    """None: a manifest's wheel without a role it knows (the SBOM then names none)."""
    file: str | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class BuildFacts:
    """What the built wheel was made from: the same for its SBOM and the wheelhouse's."""

    package: str
    recipe: str
    epoch: int
    source: Mapping[str, Any] = field(default_factory=dict)
    patches: Sequence[Mapping[str, Any]] = ()
    vendored: Sequence[Mapping[str, Any]] = ()
    """Each: name, kind (git/url), url, ref, commit, sha256 (archive), patched."""
    toolchain: Mapping[str, str | None] = field(default_factory=dict)
    cuda_archs: Sequence[str] = ()
    label: str = ""
    sparkbuild: str = __version__
    """The sparkbuild that wrote the SBOM (one of ``metadata.tools``)."""

    @classmethod
    def of_manifest(cls, manifest: Mapping[str, Any]) -> BuildFacts:
        """What a wheelhouse's manifest says the build was made from (the vendored sources
        aside: the manifest does not list them)."""
        recipe, target = manifest.get("recipe") or {}, manifest.get("target") or {}
        generator = str(manifest.get("generator", "")).removeprefix("sparkbuild ")
        return cls(str(recipe.get("package", "")), str(recipe.get("name", "")),
                   int(manifest.get("source_date_epoch") or 0),
                   source=manifest.get("source") or {}, patches=manifest.get("patches") or (),
                   toolchain=manifest.get("toolchain") or {},
                   cuda_archs=tuple(target.get("cuda_archs") or ()),
                   label=str(manifest.get("local_label", "")), sparkbuild=generator)


def _sha256(digest: str | None) -> list[HashType]:
    return [HashType(alg=HashAlgorithm.SHA_256, content=digest)] if digest else []


def _props(pairs: Sequence[tuple[str, object]]) -> list[Property]:
    return [Property(name=f"{_PREFIX}:{key}", value=str(value)) for key, value in pairs
            if value is not None and value != ""]


def wheel_purl(name: str, version: str, file: str | None = None) -> PackageURL:
    qualifiers = {"file_name": file} if file else None
    return PackageURL(type="pypi", name=str(canonicalize_name(name)), version=version,
                      qualifiers=qualifiers)


# -- the parts ----------------------------------------------------------------------------


def _ancestor(facts: BuildFacts, version: str) -> Component:
    """The upstream the built wheel was patched from: the commit or the sdist's hash."""
    source = facts.source
    upstream = version.split("+", 1)[0]
    refs = []
    if source.get("url"):
        kind = (ExternalReferenceType.VCS if source.get("kind") == "git"
                else ExternalReferenceType.DISTRIBUTION)
        refs.append(ExternalReference(type=kind, url=XsUri(str(source["url"]))))
    return Component(
        name=facts.package, version=upstream, bom_ref=f"source:{facts.package}@{upstream}",
        purl=wheel_purl(facts.package, upstream), hashes=_sha256(source.get("sha256")),
        external_references=refs,
        properties=_props([("source:kind", source.get("kind")),
                           ("source:ref", source.get("ref")),
                           ("source:commit", source.get("commit"))]))


def _pedigree(facts: BuildFacts, version: str) -> Pedigree:
    patches = [Patch(type=PatchClassification.UNOFFICIAL,
                     diff=Diff(url=XsUri(f"{_PREFIX}:series:{p['name']}")))
               for p in facts.patches]
    commit = facts.source.get("commit")
    notes = [f"series {facts.label}: " if facts.label else "series: "]
    notes += [f"{p['name']} sha256:{p['sha256']} {p.get('status')}" for p in facts.patches]
    return Pedigree(ancestors=[_ancestor(facts, version)], patches=patches,
                    commits=[Commit(uid=str(commit))] if commit else None,
                    notes=notes[0] + "; ".join(notes[1:]))


def _vendored(source: Mapping[str, Any], within: str | None) -> Component:
    """A vendored source of a built wheel; ``within``: that wheel's file in the wheelhouse's
    SBOM, where every built wheel lists the same sources and each bom-ref must be unique
    (a repeated one is replaced by a random one: the document would differ run to run)."""
    name = str(source["name"])
    suffix = f"#{within}" if within else ""
    commit = source.get("commit")
    version = str(commit or source.get("ref") or source.get("sha256") or "unknown")
    qualifiers: dict[str, str] = {}
    if source.get("kind") == "git":
        qualifiers["vcs_url"] = f"git+{source['url']}" + (f"@{commit}" if commit else "")
    elif source.get("url"):
        qualifiers["download_url"] = str(source["url"])
    refs = [ExternalReference(
        type=ExternalReferenceType.VCS if source.get("kind") == "git"
        else ExternalReferenceType.DISTRIBUTION, url=XsUri(str(source["url"])))
    ] if source.get("url") else []
    stand_in = source.get("stand_in") if isinstance(source.get("stand_in"), Mapping) else None
    pairs: list[tuple[str, object]] = [
        ("vendored:kind", source.get("kind")), ("vendored:ref", source.get("ref")),
        ("vendored:commit", commit), ("patched", "true" if source.get("patched") else "false")]
    if stand_in is not None:
        pairs += [("vendored:stand_in_for", stand_in.get("pinned")),
                  ("vendored:stand_in_reason", stand_in.get("reason"))]
    return Component(
        name=name, version=version, bom_ref=f"vendored:{name}@{version}{suffix}",
        purl=PackageURL(type="generic", name=name, version=version,
                        qualifiers=qualifiers or None),
        hashes=_sha256(source.get("sha256")), external_references=refs,
        properties=_props(pairs),
        pedigree=_stand_in_pedigree(name, source, stand_in, suffix) if stand_in else None)


def _commit_component(name: str, url: str, commit: str, role: CommitRole,
                      suffix: str = "") -> Component:
    return Component(name=name, version=commit,
                     bom_ref=f"vendored:{name}@{commit}#{role}{suffix}",
                     purl=PackageURL(type="generic", name=name, version=commit,
                                     qualifiers={"vcs_url": f"git+{url}@{commit}"}))


def _stand_in_pedigree(name: str, source: Mapping[str, Any],
                       stand_in: Mapping[str, Any], suffix: str = "") -> Pedigree:
    """A stand-in's pedigree: the tree's pin as the ancestor, the commit built as the variant."""
    url = str(source.get("url", ""))
    pinned, used = str(stand_in.get("pinned", "")), str(stand_in.get("used", ""))
    return Pedigree(ancestors=[_commit_component(name, url, pinned, "pin", suffix)],
                    variants=[_commit_component(name, url, used, "used", suffix)],
                    notes=f"stand-in: built from {used}, not the pin {pinned}: "
                    f"{stand_in.get('reason', '')}")


def _built(facts: BuildFacts, wheel: SbomWheel) -> Component:
    pairs: list[tuple[str, object]] = [("role", wheel.role), ("file", wheel.file),
                                       ("local-label", facts.label),
                                       ("cuda-archs", ",".join(facts.cuda_archs))]
    for patch in facts.patches:
        pairs += [(f"patch:{patch['name']}:sha256", patch.get("sha256")),
                  (f"patch:{patch['name']}:status", patch.get("status"))]
    return Component(
        name=wheel.name, version=wheel.version, bom_ref=_ref(wheel),
        purl=wheel_purl(wheel.name, wheel.version, wheel.file), hashes=_sha256(wheel.sha256),
        properties=_props(pairs), pedigree=_pedigree(facts, wheel.version),
        components=[_vendored(s, wheel.file) for s in facts.vendored])


def _plain(wheel: SbomWheel) -> Component:
    return Component(
        name=wheel.name, version=wheel.version, bom_ref=_ref(wheel),
        purl=wheel_purl(wheel.name, wheel.version, wheel.file), hashes=_sha256(wheel.sha256),
        properties=_props([("role", wheel.role), ("file", wheel.file)]))


def _ref(wheel: SbomWheel) -> str:
    return f"wheel:{wheel.file}" if wheel.file else (
        f"wheel:{canonicalize_name(wheel.name)}=={wheel.version}")


def _tools(facts: BuildFacts) -> ToolRepository:
    versions = {"sparkbuild": facts.sparkbuild, **{k: v for k, v in facts.toolchain.items()
                                                   if k in _TOOL_NAMES}}
    components = []
    for key, version in sorted(versions.items()):
        if not version:
            continue
        name = _TOOL_NAMES.get(key, key)
        kind = ComponentType.FRAMEWORK if key == "torch" else ComponentType.APPLICATION
        components.append(Component(type=kind, name=name, version=str(version),
                                    bom_ref=f"tool:{name}@{version}"))
    return ToolRepository(components=components)


def _render(bom: Bom) -> str:
    """The JSON with a serial number derived from the rest of the document."""
    bom.serial_number = _SERIAL_NAMESPACE
    draft = JsonV1Dot6(bom).output_as_string(indent=2)
    bom.serial_number = uuid.uuid5(_SERIAL_NAMESPACE, hashlib.sha256(draft.encode()).hexdigest())
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def _metadata(facts: BuildFacts, component: Component) -> BomMetaData:
    return BomMetaData(
        tools=_tools(facts), component=component,
        timestamp=datetime.fromtimestamp(facts.epoch, tz=UTC),
        properties=_props([("recipe", facts.recipe)]))


# -- the documents -----------------------------------------------------------------------


def wheel_sbom(facts: BuildFacts, name: str, version: str) -> bytes:
    """The built wheel's own SBOM (its pedigree, sources and toolchain; no hash of itself)."""
    built = _built(facts, SbomWheel(name, version, "built"))
    bom = Bom(metadata=_metadata(facts, built))
    return _render(bom).encode("utf-8")


def wheelhouse_sbom(facts: BuildFacts, wheels: Sequence[SbomWheel]) -> str:
    """``sbom.cdx.json``: every wheel of the wheelhouse with its hash; the built ones with
    their pedigree and vendored sources."""
    root = Component(type=ComponentType.APPLICATION, name=f"{facts.recipe} wheelhouse",
                     version=facts.label or None, bom_ref=f"wheelhouse:{facts.recipe}")
    components = [_built(facts, w) if w.role == "built" else _plain(w) for w in wheels]
    bom = Bom(metadata=_metadata(facts, root), components=components)
    bom.register_dependency(root, components)
    return _render(bom)


def write_wheelhouse_sbom(directory: Path, facts: BuildFacts,
                          wheels: Sequence[SbomWheel]) -> Path:
    from sparkbuild.store.files import write_text_atomic

    path = directory / SBOM_NAME
    write_text_atomic(path, wheelhouse_sbom(facts, wheels))
    return path


# -- reading it back (verify) ------------------------------------------------------------


def _well_formed(data: object) -> bool:
    """A CycloneDX BOM whose components, their properties and hashes are objects (what
    :func:`sbom_files` and :func:`manifest_disagreements` read)."""
    if not isinstance(data, dict) or data.get("bomFormat") != "CycloneDX":
        return False
    components = data.get("components")
    return isinstance(components, list) and all(
        isinstance(c, dict) and all(isinstance(c.get(key, []), list) and all(
            isinstance(item, dict) for item in c.get(key, [])) for key in ("properties", "hashes"))
        for c in components) and isinstance(data.get("metadata", {}), dict)


def _property(component: Mapping[str, Any], name: str) -> str | None:
    for item in component.get("properties", []):
        if item.get("name") == f"{_PREFIX}:{name}":
            return str(item.get("value"))
    return None


def sbom_files(data: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    """The wheels the SBOM names: file -> (canonical name, version, sha256)."""
    found = {}
    for component in data.get("components", []):
        file = _property(component, "file")
        if file is None:
            continue
        sha256 = next((h.get("content", "") for h in component.get("hashes", [])
                       if h.get("alg") == "SHA-256"), "")
        found[file] = (str(canonicalize_name(str(component.get("name", "")))),
                       normal_version(str(component.get("version", ""))), str(sha256))
    return found


def sbom_disagreements(directory: Path, wheels: Mapping[str, tuple[str, str, str]],
                       manifest: Mapping[str, Any] | None = None) -> list[tuple[str, str]]:
    """(file, problem) for each way ``sbom.cdx.json`` and the wheels present disagree, and
    (with ``manifest``) each part of it that is not what the manifest says."""
    path = directory / SBOM_NAME
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
        if not _well_formed(data):
            raise ValueError("not a CycloneDX BOM with components")
    except (OSError, ValueError) as exc:
        return [(SBOM_NAME, f"cannot be read: {exc}")]
    problems = listing_disagreements(SBOM_NAME, sbom_files(data), wheels, hash_verb="lists",
                                     list_verb="lists")
    return problems + (manifest_disagreements(data, manifest) if manifest is not None else [])


COMPARED = ("name", "version", "purl", "properties", "pedigree")
"""The parts of each component compared with the SBOM the manifest gives."""


def manifest_disagreements(data: Mapping[str, Any], manifest: Mapping[str, Any]
                           ) -> list[tuple[str, str]]:
    """Each component's name, version, purl, properties (the role, the file, each patch's
    sha256 and status) and pedigree (the ancestor, the commit, one entry per patch of the
    series) and the document's ``metadata.tools`` and timestamp, against the SBOM written
    again from the manifest."""
    try:
        wheels = [SbomWheel(str(w["name"]), str(w["version"]), one_of(w.get("role"), WHEEL_ROLES),
                            str(w["file"]), str(w["sha256"])) for w in manifest["wheels"]]
        expected = json.loads(wheelhouse_sbom(BuildFacts.of_manifest(manifest), wheels))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return [(SBOM_NAME, f"the manifest does not say what it must hold: {exc}")]
    actual = {str(c.get("bom-ref")): c for c in data["components"] if isinstance(c, dict)}
    problems = []
    for component in expected["components"]:
        found = actual.get(component["bom-ref"])
        if found is None:
            continue  # listing_disagreements names the wheel it lacks
        file = _property(component, "file") or SBOM_NAME
        problems += [(file, f"its {key} in {SBOM_NAME} is not what the manifest says")
                     for key in COMPARED if found.get(key) != component.get(key)]
    metadata = data.get("metadata") or {}
    problems += [(SBOM_NAME, f"its metadata.{key} is not what the manifest says")
                 for key in ("tools", "timestamp")
                 if metadata.get(key) != expected["metadata"].get(key)]
    return problems
