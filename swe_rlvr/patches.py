"""Unified-diff surgery: reversing a patch.

SWE-smith records carry the patch that *introduces* a bug; the gold fix is its reverse. Reversal
swaps the sides of every header and hunk (`---`/`+++`, modes, renames, new/deleted files, index
hashes) and turns each removed line into an added one and vice versa, keeping context intact.
Binary patches and copies are refused with a ValueError.
"""

from __future__ import annotations

import re

_HUNK = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")
_INDEX = re.compile(r"^index ([0-9a-fA-F]+)\.\.([0-9a-fA-F]+)(.*)$")
_DIFF_GIT = re.compile(r"^diff --git a/(.+) b/(.+)$")
_PAIRS = (("--- ", "+++ "), ("old mode ", "new mode "), ("rename from ", "rename to "))


def reverse_patch(diff: str) -> str:
    """The unified diff that undoes `diff` (what `git apply -R` would apply).

    Hunk headers swap their old and new ranges, `+`/`-` lines swap (removals first in each
    changed run), file headers swap sides, and new-file/deleted-file, mode, rename and index
    lines are inverted. Binary patches and copies cannot be reversed as text: ValueError.
    """
    lines, out, i = diff.split("\n"), [], 0
    while i < len(lines):
        line = lines[i]
        hunk = _HUNK.match(line)
        if hunk:
            old, new, rest = hunk.groups()
            body, i = _hunk_body(lines, i + 1, _count(old), _count(new))
            out += [f"@@ -{new} +{old} @@{rest}", *_reverse_body(body)]
            continue
        pair = _reverse_pair(line, lines[i + 1] if i + 1 < len(lines) else "")
        if pair:
            out += pair
            i += 2
            continue
        out.append(_reverse_header(line))
        i += 1
    return "\n".join(out)


def _count(span: str) -> int:
    return int(span.split(",")[1]) if "," in span else 1


def _hunk_body(lines: list[str], i: int, old: int, new: int) -> tuple[list[str], int]:
    """The hunk's lines from index i, by its old/new line counts; returns (body, next index)."""
    body = []
    while old > 0 or new > 0:
        line = lines[i] if i < len(lines) else None
        tag = None if line is None else (line[:1] or " ")  # "" is an empty context line
        if tag not in (" ", "-", "+", "\\"):
            raise ValueError(f"hunk ends early at line {i + 1}: expected {old} old and {new} "
                             f"new lines more")
        old -= tag in (" ", "-")
        new -= tag in (" ", "+")
        body.append(line)
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):
        body.append(lines[i])
        i += 1
    return body, i


def _reverse_body(body: list[str]) -> list[str]:
    units: list[list[str]] = []
    for line in body:
        if line.startswith("\\") and units:
            units[-1].append(line)  # "\ No newline at end of file" stays with its line
        else:
            units.append([line])
    out: list[list[str]] = []
    removed: list[list[str]] = []
    added: list[list[str]] = []
    for unit in units:
        head = unit[0]
        if head.startswith("+"):
            removed.append(["-" + head[1:], *unit[1:]])
        elif head.startswith("-"):
            added.append(["+" + head[1:], *unit[1:]])
        else:
            out += removed + added + [unit]
            removed, added = [], []
    out += removed + added
    return [line for unit in out for line in unit]


def _reverse_pair(line: str, following: str) -> list[str] | None:
    """Swap a two-line header pair (---/+++, old/new mode, rename from/to), or None."""
    for first, second in _PAIRS:
        if line.startswith(first) and following.startswith(second):
            old, new = line[len(first):], following[len(second):]
            if first == "--- ":
                old, new = _side(old, "b/"), _side(new, "a/")
            return [first + new, second + old]
    return None


def _side(path: str, prefix: str) -> str:
    """Move a `---`/`+++` path to the other side: a/x <-> b/x; /dev/null stays."""
    return prefix + path[2:] if path[:2] in ("a/", "b/") else path


def _reverse_header(line: str) -> str:
    if line.startswith(("GIT binary patch", "Binary files ", "copy from ", "copy to ")):
        raise ValueError(f"cannot reverse {line.split(' ')[0:2]!r} sections as text; "
                         f"regenerate the patch with `git diff --no-binary` and without copies")
    git = _DIFF_GIT.match(line)
    if git:
        return f"diff --git a/{git.group(2)} b/{git.group(1)}"
    index = _INDEX.match(line)
    if index:
        return f"index {index.group(2)}..{index.group(1)}{index.group(3)}"
    if line.startswith("new file mode "):
        return "deleted file mode " + line[len("new file mode "):]
    if line.startswith("deleted file mode "):
        return "new file mode " + line[len("deleted file mode "):]
    return line
