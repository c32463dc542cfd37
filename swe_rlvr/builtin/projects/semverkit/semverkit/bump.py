"""Compute the next version for a release of a given kind."""

from semverkit.version import Version, parse

PARTS = ("major", "minor", "patch", "prerelease")


def bump(version, part, tag="rc"):
    """The next version; bumping a pre-release releases it where npm does."""
    v = parse(version)
    if part == "major":
        if v.prerelease and v.minor == 0 and v.patch == 0:
            return Version(v.major, 0, 0)
        return Version(v.major + 1, 0, 0)
    if part == "minor":
        if v.prerelease and v.patch == 0:
            return Version(v.major, v.minor, 0)
        return Version(v.major, v.minor + 1, 0)
    if part == "patch":
        if v.prerelease:
            return Version(v.major, v.minor, v.patch)
        return Version(v.major, v.minor, v.patch + 1)
    if part == "prerelease":
        return _next_prerelease(v, tag)
    raise ValueError(f"unknown part {part!r}; choose one of: {', '.join(PARTS)}")


def _next_prerelease(v, tag):
    if not v.prerelease:
        return Version(v.major, v.minor, v.patch + 1, (tag, "0"))
    pre = list(v.prerelease)
    if pre[-1].isdigit():
        pre[-1] = str(int(pre[-1]) + 1)
    else:
        pre.append("0")
    return Version(v.major, v.minor, v.patch, tuple(pre))
