"""URL rewrites for vendoring from local mirrors, the way git's ``url.<base>.insteadOf`` works.

A rule ``https://github.com/=file:///srv/git/`` sends every URL that starts with
``https://github.com/`` to ``file:///srv/git/`` + the rest.  When several rules match,
the longest base wins (as in git).  Rules only change where bytes are fetched from:
the cache keys, the recorded URLs and the pins stay the upstream ones, so a cache
filled from mirrors serves a build exactly as one filled from upstream would.

Submodules are fetched by git itself from the URLs in ``.gitmodules``; the same rules
reach them as ``-c url.<replacement>.insteadOf=<base>`` options, which git hands down to
the clones it starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkbuild.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True)
class MirrorRule:
    base: str
    """The upstream prefix (``https://github.com/``)."""
    replacement: str
    """What the prefix becomes (``file:///srv/git/``)."""

    def __str__(self) -> str:
        return f"{self.base}={self.replacement}"


def parse_mirror(text: str, *, where: str = "--mirror") -> MirrorRule:
    """``BASE=REPLACEMENT``; both sides non-empty."""
    base, sep, replacement = text.partition("=")
    if not sep or not base.strip() or not replacement.strip():
        raise UsageError(
            f"a mirror rule must read BASE=REPLACEMENT, not {text!r}",
            where=where,
            hint="for example --mirror https://github.com/=file:///srv/git/",
        )
    return MirrorRule(base.strip(), replacement.strip())


@dataclass(frozen=True)
class Mirrors:
    """An ordered set of rules; :meth:`rewrite` applies the longest matching base."""

    rules: tuple[MirrorRule, ...] = ()

    @classmethod
    def parse(cls, texts: Iterable[str], *, where: str = "--mirror") -> Mirrors:
        return cls(tuple(parse_mirror(text, where=where) for text in texts))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def rule_for(self, url: str) -> MirrorRule | None:
        matching = [rule for rule in self.rules if url.startswith(rule.base)]
        return max(matching, key=lambda rule: len(rule.base), default=None)

    def rewrite(self, url: str) -> str:
        """Where to fetch ``url`` from: the mirror when a rule matches, else ``url``."""
        rule = self.rule_for(url)
        return rule.replacement + url[len(rule.base):] if rule else url

    def git_config_args(self) -> list[str]:
        """``-c url.R.insteadOf=B`` for each rule: git applies them to submodules too.

        A rule that points at a local path (``file://`` or ``/``) also allows git's file
        transport for submodules, which git refuses by default since 2.38.1: the user named
        that mirror, so its repositories are the ones meant.
        """
        args: list[str] = []
        for rule in self.rules:
            args += ["-c", f"url.{rule.replacement}.insteadOf={rule.base}"]
        if any(rule.replacement.startswith(("file://", "/")) for rule in self.rules):
            args += ["-c", "protocol.file.allow=always"]
        return args

    def to_list(self) -> list[str]:
        return [str(rule) for rule in self.rules]

    def merged(self, other: Mirrors) -> Mirrors:
        """These rules, then ``other``'s that have a base not already here."""
        bases = {rule.base for rule in self.rules}
        return Mirrors(self.rules + tuple(r for r in other.rules if r.base not in bases))


NO_MIRRORS = Mirrors()
"""No rewrites: every URL is fetched from where it points."""
