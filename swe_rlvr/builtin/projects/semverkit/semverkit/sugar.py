"""Desugar range shorthands (^, ~, x-ranges, partial versions) into primitive comparators."""

import re

from semverkit.version import Version, parse

_PARTIAL = re.compile(r"^v?(\d+|[xX*])(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?(?:-([0-9A-Za-z.-]+))?$")


def partial(text):
    """'1.2' -> (1, 2, None, ()); wildcards and missing parts become None."""
    match = _PARTIAL.match(text)
    if not match:
        raise ValueError(f"invalid version in range: {text!r}")
    nums = [None if g is None or g in "xX*" else int(g) for g in match.groups()[:3]]
    for i in (1, 2):
        if nums[i - 1] is None:
            nums[i] = None
    pre = tuple(match.group(4).split(".")) if match.group(4) else ()
    return (*nums, pre)


def floor(major, minor, patch, pre=()):
    return Version(major or 0, minor or 0, patch or 0, pre)


def ceiling(major, minor, patch):
    """The lowest version above every version in the partial: '<' that, with '-0'."""
    return Version(major, minor, patch, ("0",))


def caret(text):
    major, minor, patch, pre = partial(text)
    if major is None:
        return [(">=", Version(0, 0, 0))]
    if major > 0 or minor is None:
        high = ceiling(major + 1, 0, 0)
    elif minor > 0 or patch is None:
        high = ceiling(0, minor + 1, 0)
    else:
        high = ceiling(0, 0, patch + 1)
    return [(">=", floor(major, minor, patch, pre)), ("<", high)]


def tilde(text):
    major, minor, patch, pre = partial(text)
    if major is None:
        return [(">=", Version(0, 0, 0))]
    high = ceiling(major + 1, 0, 0) if minor is None else ceiling(major, minor + 1, 0)
    return [(">=", floor(major, minor, patch, pre)), ("<", high)]


def primitive(op, text):
    """An operator with a possibly partial version, e.g. ('<=', '1.2') -> [('<', 1.3.0-0)]."""
    major, minor, patch, pre = partial(text)
    if major is None:
        return [("<", Version(0, 0, 0, ("0",)))] if op in ("<", ">") else [(">=", Version(0, 0, 0))]
    if patch is not None:
        return [(op or "=", parse(text.lstrip("vV")))]
    high = ceiling(major + 1, 0, 0) if minor is None else ceiling(major, minor + 1, 0)
    low = floor(major, minor, patch)
    if op in ("", "="):
        return [(">=", low), ("<", high)]
    if op == ">":
        return [(">=", Version(*high.release))]
    if op == "<=":
        return [("<", high)]
    return [(op, low)]
