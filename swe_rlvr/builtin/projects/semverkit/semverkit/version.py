"""The Version value and its precedence rules (semver.org, section 11)."""

import functools
import re
from dataclasses import dataclass

_VERSION = re.compile(
    r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$")


class InvalidVersion(ValueError):
    pass


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Version:
    major: int
    minor: int
    patch: int
    prerelease: tuple = ()
    build: tuple = ()

    @property
    def release(self):
        return (self.major, self.minor, self.patch)

    def sort_key(self):
        return (*self.release, _prerelease_key(self.prerelease))

    def __eq__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self.sort_key() == other.sort_key()

    def __lt__(self, other):
        if not isinstance(other, Version):
            return NotImplemented
        return self.sort_key() < other.sort_key()

    def __hash__(self):
        return hash(self.sort_key())

    def __str__(self):
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text


def _prerelease_key(prerelease):
    """Releases sort after pre-releases; numeric identifiers sort numerically, before words."""
    if not prerelease:
        return (1,)
    return (0, tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in prerelease))


def parse(text):
    if isinstance(text, Version):
        return text
    match = _VERSION.match(text.strip())
    if not match:
        raise InvalidVersion(f"{text!r} is not a semantic version (expected MAJOR.MINOR.PATCH)")
    major, minor, patch, pre, build = match.groups()
    for ident in (pre or "").split("."):
        if len(ident) > 1 and ident.isdigit() and ident.startswith("0"):
            raise InvalidVersion(f"{text!r}: numeric pre-release identifiers must not have leading zeros")
    return Version(int(major), int(minor), int(patch),
                   tuple(pre.split(".")) if pre else (), tuple(build.split(".")) if build else ())
