"""Operations over lists of version strings."""

from semverkit.ranges import satisfies
from semverkit.version import parse


def sort_versions(versions, reverse=False):
    """Sort version strings by precedence; the input strings are returned unchanged."""
    return sorted(versions, key=parse, reverse=reverse)


def unique_versions(versions):
    """Drop versions of equal precedence (differing only in build metadata), keeping the first."""
    seen = {}
    for text in versions:
        seen.setdefault(parse(text), text)
    return list(seen.values())


def max_satisfying(versions, range_text, include_prerelease=False):
    matches = [v for v in versions if satisfies(v, range_text, include_prerelease=include_prerelease)]
    return max(matches, key=parse) if matches else None


def min_satisfying(versions, range_text, include_prerelease=False):
    matches = [v for v in versions if satisfies(v, range_text, include_prerelease=include_prerelease)]
    return min(matches, key=parse) if matches else None
