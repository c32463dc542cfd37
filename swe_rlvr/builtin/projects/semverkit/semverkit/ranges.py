"""npm-style ranges: '||' separates alternatives, whitespace separates comparators."""

import operator
import re
from dataclasses import dataclass

from semverkit import sugar
from semverkit.version import parse

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq}
_TOKEN = re.compile(r"(\^|~|<=|>=|<|>|=)?\s*([^\s<>=^~]+)")


@dataclass(frozen=True)
class Range:
    alternatives: tuple  # tuple of tuples of (op, Version)

    @classmethod
    def parse(cls, text):
        alternatives = tuple(_comparators(part) for part in text.split("||"))
        return cls(alternatives)

    def test(self, version, include_prerelease=False):
        v = parse(version)
        return any(_test_set(comparators, v, include_prerelease) for comparators in self.alternatives)


def satisfies(version, range_text, include_prerelease=False):
    return Range.parse(range_text).test(version, include_prerelease=include_prerelease)


def _comparators(text):
    text = text.strip()
    if text in ("", "*", "x", "X"):
        return ((">=", parse("0.0.0")),)
    hyphen = re.fullmatch(r"(\S+)\s+-\s+(\S+)", text)
    if hyphen:
        return tuple(sugar.primitive(">=", hyphen.group(1)) + sugar.primitive("<=", hyphen.group(2)))
    out = []
    for op, version in _TOKEN.findall(text):
        if op == "^":
            out += sugar.caret(version)
        elif op == "~":
            out += sugar.tilde(version)
        else:
            out += sugar.primitive(op, version)
    return tuple(out)


def _test_set(comparators, version, include_prerelease):
    if not all(_OPS[op](version, bound) for op, bound in comparators):
        return False
    if not version.prerelease or include_prerelease:
        return True
    return any(bound.prerelease and bound.release == version.release and bound.prerelease != ("0",)
               for _, bound in comparators)
