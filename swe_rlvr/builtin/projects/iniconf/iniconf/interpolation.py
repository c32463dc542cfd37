"""Expansion of ${key} and ${section:key} references; $$ is a literal dollar."""

import re

from iniconf.errors import InterpolationError

MAX_DEPTH = 10
_REFERENCE = re.compile(r"\$(\$|\{([^}]*)\})")


def interpolate(value, config, section, depth=0):
    if depth > MAX_DEPTH:
        raise InterpolationError(f"references nest deeper than {MAX_DEPTH} in {value!r} "
                                 f"(is there a cycle?)")

    def expand(match):
        if match.group(1) == "$":
            return "$"
        target, _, key = match.group(2).rpartition(":")
        target = target or section
        if not config.has_option(target, key):
            raise InterpolationError(f"${{{match.group(2)}}} refers to a missing option")
        raw = config.get(target, key, raw=True)
        return interpolate(raw, config, target, depth + 1)

    return _REFERENCE.sub(expand, value)
