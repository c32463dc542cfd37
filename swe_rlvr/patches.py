"""Unified diffs, read in one place: the files and hunks of a patch, its paths, its reverse.

Every stage that reads a patch calls this module: the scripted and exploring experts (they replay
a gold patch as editor commands), rule-based guidance (it locates and measures the gold patch),
`Instance.fix_files` / `test_files`, the grader (which files a model patch touched) and the
SWE-smith loader (its bug patch reversed is the fix).

`unidiff.PatchSet` does the parsing: file sections (`diff --git`, `---`/`+++`), new and deleted
files, renames and mode changes, hunk bodies read by their line counts (so a removed SQL comment
`-- x` is not taken for a `---` header), blank context lines written without their space, and
"\\ No newline at end of file" markers. What this module adds, and why:

- `FilePatch` and `Hunk` are frozen views whose line texts lack their newline, with the old-side
  arithmetic that the experts and guidance share (`Hunk.span`, `Hunk.changed_at`). The "\\ No
  newline" markers are dropped: every consumer writes files that end with a newline.
- Paths are the `b/` side, or a deleted file's `a/` side, with git's C-style quoting undone
  (`"b/caf\\303\\251.py"` is `café.py`). unidiff's `PatchedFile.path` prefers the `a/` side, keeps
  the quotes, and strips any of eight one-letter prefixes (`c/`, `i/`, `w/`, `1/`, ...) that real
  directories may also be called.
- unidiff's parse error becomes a ValueError that says what is wrong.
- `reverse_patch` rewrites the text and asks unidiff only where each hunk lies: unidiff's `str()`
  is not byte-exact (it writes `@@ -14 +16 @@` as `@@ -14,1 +16,1 @@` and rebuilds the `---`/`+++`
  lines of a git section from its `diff --git` line), and a reversed patch must reverse back to
  the same bytes.
- `header_paths` scans lines by look and never parses. It guards against writes into `.git`, so it
  must see every path that *any* applier might read: `Index:` lines and context diffs (which
  unidiff does not read) and the headers of a patch that no parser accepts. `patch_files` falls
  back to it for a patch unidiff rejects, since the grader asks it about model patches that
  `patch --fuzz` may still apply; more files is the safe error there.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from unidiff import PatchSet
from unidiff.constants import DEV_NULL
from unidiff.errors import UnidiffParseError


@dataclass(frozen=True)
class Hunk:
    """One hunk of one file: where it sits in the old file, and its body."""

    path: str
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    header: str = ""
    """The section heading after `@@ ... @@` (git writes the enclosing `def` line), or ""."""
    lines: tuple[tuple[str, str], ...] = ()
    """(tag, text) per body line: " " context, "-" removed, "+" added; text without its newline."""

    @property
    def old(self) -> list[str]:
        """The old side, in order: context and removed lines."""
        return [text for tag, text in self.lines if tag != "+"]

    @property
    def new(self) -> list[str]:
        """The new side, in order: context and added lines."""
        return [text for tag, text in self.lines if tag != "-"]

    @property
    def removed(self) -> list[str]:
        return [text for tag, text in self.lines if tag == "-"]

    @property
    def added(self) -> list[str]:
        return [text for tag, text in self.lines if tag == "+"]

    def span(self) -> tuple[int, int]:
        """The old-side lines START..END that this hunk replaces (END = START-1: an insertion)."""
        if self.old_len == 0:
            return self.old_start + 1, self.old_start
        return self.old_start, self.old_start + self.old_len - 1

    @property
    def changed_at(self) -> list[int]:
        """Old-file lines the hunk changes: each non-blank removed line, and for an insertion the
        line it follows (or 1 at the top of the file)."""
        rows, row = [], self.old_start
        for tag, text in self.lines:
            if tag == "-" and text.strip():
                rows.append(row)
            elif tag == "+" and text.strip() and (not rows or rows[-1] < row - 1):
                rows.append(max(row - 1, 1))
            row += tag != "+"
        return rows


@dataclass(frozen=True)
class FilePatch:
    """One file's section of a patch."""

    path: str
    new_file: bool = False
    deleted: bool = False
    hunks: tuple[Hunk, ...] = ()


def parse_patch(patch: str) -> list[FilePatch]:
    """A unified diff (git's or plain) -> its file sections, in order; text that holds no diff
    gives []. A hunk whose body does not match its line counts: ValueError."""
    return [_file_patch(section) for section in _patch_set(patch)]


def parse_hunks(patch: str) -> list[Hunk]:
    """Every hunk of every file, in order."""
    return [hunk for section in parse_patch(patch) for hunk in section.hunks]


def patch_files(patch: str) -> tuple[str, ...]:
    """Paths a patch touches, in order of first appearance (see `FilePatch.path`); for a patch
    unidiff rejects, every path its headers name (`header_paths`, see the module docstring)."""
    try:
        return tuple(dict.fromkeys(section.path for section in parse_patch(patch)))
    except ValueError:
        return tuple(header_paths(patch))


def _patch_set(patch: str) -> PatchSet:
    try:
        return PatchSet(patch)
    except UnidiffParseError as exc:
        reason = str(exc)
        if reason.startswith(("Hunk is shorter", "Hunk diff line expected")):
            reason = f"a hunk ends early ({reason}): its @@ header counts more lines than follow"
        raise ValueError(f"Malformed unified diff: {reason}. Regenerate it with `git diff`; "
                         f"a hand-edited hunk must keep its @@ line counts right.") from exc


def _file_patch(section) -> FilePatch:
    new_file, deleted = section.source_file == DEV_NULL, section.target_file == DEV_NULL
    path = _strip(section.source_file, "a/") if deleted else _strip(section.target_file, "b/")
    hunks = tuple(Hunk(path, h.source_start, h.source_length, h.target_start, h.target_length,
                       h.section_header, tuple((line.line_type, line.value.removesuffix("\n"))
                                               for line in h if line.line_type in " -+"))
                  for h in section)
    return FilePatch(path, new_file, deleted, hunks)


def _strip(name: str, prefix: str) -> str:
    return unquote(name).removeprefix(prefix)


_C_ESCAPE = re.compile(rb'\\([0-7]{3}|.)', re.DOTALL)
_C_CHARS = {b"a": 7, b"b": 8, b"t": 9, b"n": 10, b"v": 11, b"f": 12, b"r": 13}


def unquote(name: str) -> str:
    """A path as git quotes it ("a/t\\303\\251st.py", with C escapes) -> the path; others as is."""
    if len(name) < 2 or name[0] != '"' or name[-1] != '"':
        return name
    raw = _C_ESCAPE.sub(lambda m: bytes([int(m[1], 8) if len(m[1]) == 3
                                         else _C_CHARS.get(m[1], m[1][0])]),
                        name[1:-1].encode())
    return raw.decode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------- headers by look

HEADER_PATH = re.compile(r"^(?:diff --git |--- |\+\+\+ |rename (?:from|to) |copy (?:from|to) "
                         r"|Index: |\*\*\* )(.+)$", re.M)


def header_paths(patch: str) -> list[str]:
    """Every path a header of `patch` names (git's and `patch`'s formats: `diff --git`, ---/+++,
    renames, copies, `Index:`, context diffs), normalised, without a/ b/ prefixes. A quoted
    name counts both as written and with git's C quoting undone (`"a/.gi\\164"` is `.git`)."""
    out = []
    for header in HEADER_PATH.findall(patch):
        for part in header.split("\t")[0].split(" "):
            bare = part.strip('"')
            for name in dict.fromkeys([bare, unquote(f'"{bare}"') if '"' in part else bare]):
                path = posixpath.normpath(name)
                out.append(path.split("/", 1)[1] if path[:2] in ("a/", "b/") else path)
    return [p for p in dict.fromkeys(out) if p and p != "/dev/null"]


# --------------------------------------------------------------------------- reversal

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
    hunk_ends = dict(_hunk_extents(diff, lines))
    while i < len(lines):
        if i in hunk_ends:
            header = _HUNK.match(lines[i])
            assert header is not None  # `_hunk_extents` keys hunk header lines
            old, new, rest = header.groups()
            out += [f"@@ -{new} +{old} @@{rest}", *_reverse_body(lines[i + 1:hunk_ends[i]])]
            i = hunk_ends[i]
            continue
        pair = _reverse_pair(lines[i], lines[i + 1] if i + 1 < len(lines) else "")
        if pair:
            out += pair
            i += 2
            continue
        out.append(_reverse_header(lines[i]))
        i += 1
    return "\n".join(out)


def _hunk_extents(diff: str, lines: list[str]) -> list[tuple[int, int]]:
    """(index of the @@ line, index past the body) of each hunk in `lines` (diff split on "\\n"),
    the body taking any "\\ No newline" marker that follows its last line."""
    extents = []
    for section in _patch_set(diff):
        for hunk in section:
            numbered = [line.diff_line_no for line in hunk if line.diff_line_no]
            end = numbered[-1]                      # 1-based number of the last body line
            while end < len(lines) and lines[end].startswith("\\"):
                end += 1
            extents.append((numbered[0] - 2, end))
    return extents


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
