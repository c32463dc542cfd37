"""The exploring experts (bash scaffold): search, read, edit what was read, test, submit.

The splice expert (`agent.scripted`, variant gold) writes the gold fix as line-number splices
without ever looking at the code, so a policy trained on it learns the form of an episode but not
where an edit comes from. This expert's every command depends on something visible earlier in
the episode:

1. `grep -rn NAME --include=*.py .` for a name the issue writes as code (called, in backticks,
   snake_case or CamelCase), preferring one that the fix's lines or hunk headers mention;
2. per edited file, `sed -n 'A,Bp' FILE` around the hunks (two lines of margin);
3. per edited file, one `python - <<'EOF'` program of `str.replace` edits whose old text is the
   smallest changed block of lines just printed (with one line of context for insertions);
4. `python -m pytest -q -x 2>&1 | tail -3` (one-file fixes only, to stay within 6 turns);
5. `submit`.
Each reply starts with one sentence of reasoning naming what it does and why.

The `sed` style is the shortest such episode, for one-line fixes (the easy tier; any other fix
falls back to the explore script above, whose five turns do not fit the 4-turn budget that the
ladder and quickstart configs give the sed expert):
1. `grep -n -A 25 "def NAME" FILE`: the function, with line numbers (NAME from the instance's
   `meta.function`, else the hunk's or its header's last `def` above the line); a line outside
   any function greps its top-level definition instead: `"class NAME"`, or `"^NAME ="` for an
   assignment such as `TRUE_WORDS = {...}` or the pattern lines of `_VERSION = re.compile(...)`;
2. `sed -i 'Ns/OLD/NEW/' FILE && python -m pytest -q TESTS 2>&1 | tail -3`: substitute on the
   line just read, then run the instance's test files; its reasoning names the line and the
   token change first, so the decision is written out before the command that applies it;
3. `submit`.
OLD is the smallest run of whole tokens that differs, widened by neighbouring tokens until it
occurs once in the line.

Simplifications: the script is fixed per instance (it does not read its observations), so an edit
whose old text is not unique in the file, or a fix needing more turns than the limit, ends
unresolved and the expert drops it. New and deleted files are written with `cat >` / `rm`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from agent.scripted import ScriptedPolicy, _heredoc
from swe_rlvr.instances import Instance
from swe_rlvr.patches import FilePatch, Hunk, parse_patch

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
COMMON = {"self", "None", "True", "False", "return", "def", "class", "import", "from", "with",
          "this", "that", "when", "should", "expected", "value", "values", "raise", "raises",
          "python", "print", "error", "Error", "instead", "line", "lines", "text", "none"}


def changed_block(old: list[str], new: list[str]) -> tuple[str, str, int]:
    """(old text, new text, offset of the old text in the hunk): the hunk without its common
    leading and trailing lines; an insertion keeps the line above it (or below) as its anchor."""
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while (tail < min(len(old), len(new)) - head
           and old[len(old) - 1 - tail] == new[len(new) - 1 - tail]):
        tail += 1
    start, end_old, end_new = head, len(old) - tail, len(new) - tail
    if start == end_old:                       # a pure insertion: anchor on a neighbouring line
        if start > 0:
            start -= 1
        else:
            end_old, end_new = end_old + 1, end_new + 1
    text = lambda lines: "".join(x + "\n" for x in lines)  # noqa: E731
    return text(old[start:end_old]), text(new[start:end_new]), start


def code_names(text: str) -> list[str]:
    """Names the issue writes as code, in order: called (`name(`), in backticks, dotted
    (`obj.name`), or shaped like code (snake_case, CamelCase, UPPER_CASE)."""
    spans = " ".join(re.findall(r"`([^`\n]+)`", text))
    out = []
    for name in _NAME.findall(text):
        coded = (re.search(rf"\b{name}\(|\.{name}\b", text) or re.search(rf"\b{name}\b", spans)
                 or "_" in name.strip("_") or re.search(r"[a-z][A-Z]|^[A-Z][a-z]+[A-Z]", name))
        if coded and name not in COMMON and name not in out:
            out.append(name)
    return out


def search_term(instance: Instance, files: list[FilePatch]) -> str:
    """The first name the issue writes as code that the fix's lines or hunk headers mention;
    else the first name it writes as code; else the function of the first hunk (or the file)."""
    touched = " ".join(" ".join([h.header, *h.old, *h.new]) for f in files for h in f.hunks)
    names = code_names(instance.problem_statement)
    for name in names:
        if re.search(rf"\b{re.escape(name)}\b", touched):
            return name
    if names:
        return names[0]
    first = files[0]
    defined = re.search(r"(?:def|class)\s+(\w+)", first.hunks[0].header) if first.hunks else None
    return defined.group(1) if defined else first.path.rsplit("/", 1)[-1].removesuffix(".py")


def _edit_program(f: FilePatch) -> str:
    lines = [f"path = {f.path!r}", "text = open(path).read()"]
    for hunk in f.hunks:
        old, new, _ = changed_block(hunk.old, hunk.new)
        lines.append(f"text = text.replace({old!r}, {new!r}, 1)")
    lines.append("open(path, 'w').write(text)")
    return _heredoc("python -", "\n".join(lines))


def _read_range(f: FilePatch) -> tuple[int, int]:
    first, last = f.hunks[0], f.hunks[-1]
    return max(1, first.old_start - 2), last.old_start + len(last.old) + 1


def explore_script(instance: Instance) -> list[tuple[str, str]]:
    """(reasoning, command) per turn, `submit` last."""
    files = parse_patch(instance.patch)
    term = search_term(instance, files)
    steps = [(f"The issue is about `{term}`. Let me find where it is defined and used.",
              f"grep -rn {term!r} --include=*.py . | grep -v /tests/ | head -10")]
    for f in files:
        if f.deleted:
            steps.append((f"`{f.path}` is not needed any more; remove it.", f"rm {f.path}"))
        elif f.new_file:
            body = "\n".join(f.hunks[0].new) if f.hunks else ""
            folder = f.path.rsplit("/", 1)[0] if "/" in f.path else "."
            steps.append((f"The fix needs a new file, `{f.path}`.",
                          _heredoc(f"mkdir -p {folder} && cat > {f.path}", body)))
        else:
            start, end = _read_range(f)
            steps.append((f"Let me read `{f.path}` around line {f.hunks[0].old_start}.",
                          f"sed -n '{start},{end}p' {f.path}"))
            steps.append((f"This is the bug. Replace the faulty code in `{f.path}` with the "
                          f"corrected version.", _edit_program(f)))
    if len(files) == 1:
        steps.append(("Run the tests to check that nothing else broke.",
                      "python -m pytest -q -x 2>&1 | tail -3"))
    steps.append(("The fix is in place, so I submit it.", "submit"))
    return steps


_TOKEN = re.compile(r"\w+|\s+|[^\w\s]+")
READ_LINES = 25
"""Lines after the definition line that the sed style prints (grep -A)."""


def substitution(old: str, new: str) -> tuple[str, str]:
    """(pattern, replacement) of whole tokens that turn line `old` into `new`, the pattern
    occurring exactly once in `old`: the differing tokens, widened by one word or operator at a
    time (to the left first, then to the right) until they do."""
    a, b = _TOKEN.findall(old), _TOKEN.findall(new)
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    lo, hi = head, tail                                    # a[lo:len(a)-hi] <-> b[lo:len(b)-hi]
    span = lambda tokens: "".join(tokens[lo:len(tokens) - hi])  # noqa: E731
    left = True
    while (not span(a).strip() or old.count(span(a)) != 1) and (lo > 0 or hi > 0):
        if left and lo > 0:
            lo = _widen(a, lo, -1)
        elif hi > 0:
            hi = len(a) - _widen(a, len(a) - hi, +1)
        else:
            lo = _widen(a, lo, -1)
        left = not left
    return span(a), span(b)


def _widen(tokens: list[str], edge: int, step: int) -> int:
    """Move a span edge past whitespace and one more token (step -1: left edge, +1: right)."""
    if step < 0:
        edge -= 1
        while edge > 0 and not tokens[edge].strip():
            edge -= 1
        return edge
    while edge < len(tokens) and not tokens[edge].strip():
        edge += 1
    return min(len(tokens), edge + 1)


def sed_escape(text: str, replacement: bool = False) -> str:
    """`text` as a literal in a sed `s|...|...|` pattern (BRE) or replacement."""
    special = "\\&|" if replacement else "\\.*[]^$|"
    return "".join("\\" + c if c in special else c for c in text)


class OneLineFix(NamedTuple):
    """A gold patch that changes one line, and the definition the sed style reads around it."""

    path: str
    line: int
    old: str
    new: str
    symbol: str
    """The function, class or module-level name that holds the line."""
    anchor: str
    """The grep pattern of its definition line: `def NAME`, `class NAME` or `^NAME =`."""


_TOP_LEVEL = re.compile(r"class\s+(\w+)|([A-Za-z_]\w*)(\s*(?::|=(?!=)))")


def one_line_fix(instance: Instance) -> OneLineFix | None:
    """The fix of a gold patch that changes one line of one file, inside a function (the
    instance's `meta.function`, else the last `def` above the line in the hunk or its header),
    or else inside a top-level class or assignment (`TRUE_WORDS = {...}`, a continuation line
    of `_VERSION = re.compile(...)`); None for any other patch."""
    files = parse_patch(instance.patch)
    if len(files) != 1 or len(files[0].hunks) != 1 or files[0].new_file or files[0].deleted:
        return None
    hunk = files[0].hunks[0]
    removed = [i for i, line in enumerate(hunk.old) if i >= len(hunk.new) or hunk.new[i] != line]
    if len(hunk.old) != len(hunk.new) or len(removed) != 1:
        return None
    row = removed[0]
    symbol, anchor = _enclosing(instance, hunk, row)
    if not symbol:
        return None
    return OneLineFix(files[0].path, hunk.old_start + row, hunk.old[row], hunk.new[row], symbol,
                      anchor)


def _enclosing(instance: Instance, hunk: Hunk, row: int) -> tuple[str, str]:
    """(symbol, anchor) of the definition that holds old line `row` of `hunk`, or ("", "")."""
    defs = [re.match(r"\s*def\s+(\w+)", line) for line in [hunk.header, *hunk.old[:row]]]
    found = [d.group(1) for d in defs if d]
    function = instance.meta().get("function") or (found[-1] if found else "")
    if function:
        return function, f"def {function}"
    top = next((line for line in reversed(hunk.old[:row + 1])
                if line[:1].strip() and not line.startswith("#")), "")
    match = _TOP_LEVEL.match(top)             # the statement at column 0 that the line is part of
    if match and match[1]:
        return match[1], f"class {match[1]}"
    if match:
        return match[2], "^" + match[2] + match[3]
    return "", ""


def sed_script(instance: Instance) -> list[tuple[str, str]]:
    """(reasoning, command) per turn for a one-line fix; `explore_script` for anything else."""
    fix = one_line_fix(instance)
    if fix is None:
        return explore_script(instance)
    pattern, replacement = substitution(fix.old, fix.new)
    tests = " ".join(instance.test_files()) or "tests"
    edit = f"{fix.line}s|{sed_escape(pattern)}|{sed_escape(replacement, True)}|"
    return [
        (f"The failing tests exercise `{fix.symbol}` in {fix.path}. Let me read it.",
         f'grep -n -A {READ_LINES} "{fix.anchor}" {fix.path}'),
        (f"Line {fix.line} is wrong: `{pattern.strip()}` should be `{replacement.strip()}`.",
         f"sed -i {_single_quoted(edit)} {fix.path} && "
         f"python -m pytest -q {tests} 2>&1 | tail -3"),
        ("The tests pass now, so I submit the fix.", "submit")]


def _single_quoted(text: str) -> str:
    """`text` as one shell word in single quotes (a quote inside becomes '\\'')."""
    return "'" + text.replace("'", "'\\''") + "'"


SCRIPTS = {"explore": explore_script, "sed": sed_script}


class ExploringExpert(ScriptedPolicy):
    """A `ScriptedPolicy` whose replies follow an exploring script (reasoning, then the command):
    `style` explore or sed."""

    def __init__(self, tokenizer, instances: list[Instance], policy_version: int = 0,
                 style: str = "explore"):
        super().__init__(tokenizer, instances, variant="gold", scaffold="bash",
                         policy_version=policy_version)
        self.script_of = SCRIPTS[style]

    def reply(self, prompt: str, seed: int | None = None) -> str:
        steps = self.script_of(self._instance(prompt))
        thought, command = steps[min(self.turn(prompt), len(steps) - 1)]
        return f"{thought}\n```bash\n{command}\n```"
