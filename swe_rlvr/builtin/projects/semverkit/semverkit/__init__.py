"""semverkit: Semantic Versioning 2.0.0 versions and npm-style ranges."""

from semverkit.bump import bump
from semverkit.collection import max_satisfying, min_satisfying, sort_versions, unique_versions
from semverkit.ranges import Range, satisfies
from semverkit.version import InvalidVersion, Version, parse

__all__ = ["bump", "max_satisfying", "min_satisfying", "sort_versions", "unique_versions",
           "Range", "satisfies", "InvalidVersion", "Version", "parse"]
