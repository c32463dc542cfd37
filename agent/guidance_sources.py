"""Guidance sources (Agent-RLVR, arXiv 2506.11425): hint text for an instance the policy failed.

Agent-RLVR gives a failed instance three kinds of guidance and lets the agent try again:
- *plan*: the steps and the crux of the fix;
- *environment feedback*: what went wrong in the previous attempt (errors, failing tests);
- *environment interaction*: where to edit (file, function, lines). Here it is called `location`.

Two sources produce them, picked by name (`agent.recovery.make_source`):
- `rules` (the default, no model): the location comes from the gold patch's hunks and the enclosing
  functions or classes of the base file (through the AST); the feedback from the failed episode's
  validation (failing tests, assertion messages, the last traceback frames, format errors, an empty
  or unappliable patch); the plan from the problem statement and the shape of the fix.
- `teacher`: an OpenAI-compatible chat model sees the issue, the gold patch and the failure trace
  and writes the three sections. Answers are cached per (instance, failure); a timeout or an
  answer without the three sections falls back to `rules` with a warning.

Simplifications: the paper's teacher is a frontier model with a prompt we do not have; ours is
written for this project. `allow_verbatim=False` (the default) keeps code from the gold patch out
of rule-based hints; a teacher is asked not to quote it, and `leakage` measures whether it did.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from swe_rlvr.config import GuidanceConfig
from swe_rlvr.instances import Instance
from swe_rlvr.patches import Hunk, parse_hunks

PARTS = ("plan", "feedback", "location")
ReadBase = Callable[[Instance, str], str]
"""(instance, path) -> the file's text at the base commit ("" if it does not exist there)."""


@dataclass(frozen=True)
class Failure:
    """What the failed episode left behind, from its rollout and validation rows."""

    episode_id: str = ""
    patch: str = ""
    termination: str = ""
    format_errors: int = 0
    patch_applied: bool = True
    f2p_failed: tuple[str, ...] = ()
    p2p_failed: tuple[str, ...] = ()
    log_excerpt: str = ""

    def key(self) -> str:
        """Stable identity of the failure, for caching a teacher's answer."""
        body = json.dumps([self.patch, self.termination, self.f2p_failed, self.p2p_failed,
                           self.log_excerpt[-2000:]], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Guidance:
    instance_id: str
    failed_episode_id: str
    plan: str
    feedback: str
    location: str
    source: str
    leakage: float = 0.0
    parts: tuple[str, ...] = PARTS

    def text(self) -> str:
        """The block injected after the issue: the chosen parts, each under its heading."""
        titles = {"plan": "Plan", "feedback": "Feedback on your previous attempt",
                  "location": "Location"}
        sections = [f"{titles[p]}:\n{getattr(self, p).strip()}" for p in self.parts
                    if getattr(self, p).strip()]
        return "\n\n".join(sections)

    def to_row(self) -> dict:
        return {"instance_id": self.instance_id, "failed_episode_id": self.failed_episode_id,
                "plan": self.plan, "feedback": self.feedback, "location": self.location,
                "text": self.text(), "source": self.source, "leakage": self.leakage}


class GuidanceSource(Protocol):
    def make(self, instance: Instance, failure: Failure) -> Guidance: ...


# --------------------------------------------------------------------------- where the fix edits


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_KINDS = {ast.FunctionDef: "function", ast.AsyncFunctionDef: "function", ast.ClassDef: "class"}


def enclosing_symbol(source: str, line: int) -> tuple[str, str]:
    """(qualified name, kind) of the innermost definition around `line`.

    The kind is `function` or `class`, or `name` for a module- or class-level assignment such as
    `TRUE_WORDS = {...}`; ("", "") when the line is in none of them or the source does not parse.
    """
    try:
        node: ast.AST = ast.parse(source)
    except SyntaxError:
        return "", ""
    names: list[str] = []
    kind = ""
    while True:
        child = next((c for c in ast.iter_child_nodes(node) if _spans(c, line)), None)
        if isinstance(child, _SCOPES):
            names.append(child.name)
            node, kind = child, _KINDS[type(child)]
        elif kind != "function" and isinstance(child, (ast.Assign, ast.AnnAssign)):
            target = child.targets[0] if isinstance(child, ast.Assign) else child.target
            if isinstance(target, ast.Name):
                return ".".join(names + [target.id]), "name"
            return ".".join(names), kind
        else:
            return ".".join(names), kind


def _spans(node: ast.AST, line: int) -> bool:
    if not hasattr(node, "lineno"):
        return False
    start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
    return start <= line <= (node.end_lineno or node.lineno)


@dataclass(frozen=True)
class Location:
    path: str
    symbol: str
    start: int
    end: int
    kind: str = "function"

    def describe(self) -> str:
        where = {"function": f"function `{self.symbol}`", "class": f"class `{self.symbol}`",
                 "name": f"definition of `{self.symbol}`"}.get(self.kind, "module level")
        if not self.symbol:
            where = "module level"
        lines = f"line {self.start}" if self.start == self.end else f"lines {self.start}-{self.end}"
        return f"- File `{self.path}`, {where} ({lines})"


def locate(instance: Instance, read_base: ReadBase) -> list[Location]:
    """Where the gold patch edits: one entry per (file, enclosing definition), with its line span."""
    merged: dict[tuple[str, str, str], list[int]] = {}
    for hunk in parse_hunks(instance.patch):
        source = read_base(instance, hunk.path) if hunk.path.endswith(".py") else ""
        for row in hunk.changed_at:
            symbol, kind = enclosing_symbol(source, row) if source else ("", "")
            span = merged.setdefault((hunk.path, symbol, kind), [row, row])
            span[0], span[1] = min(span[0], row), max(span[1], row)
    return [Location(p, s, a, b, k) for (p, s, k), (a, b) in merged.items()]


# --------------------------------------------------------------------------- the three parts


def location_text(locations: list[Location]) -> str:
    return "\n".join(loc.describe() for loc in locations)


_ASSERT = re.compile(r"^E\s+(.*\S)")
_FRAME = re.compile(r"^(\S+\.py):(\d+): (?:in (\S+)|(\w*Error.*))")


def feedback_text(failure: Failure, max_items: int = 5) -> str:
    """What went wrong last time, from the validation and the episode's end."""
    notes = _episode_notes(failure)
    failing = list(failure.f2p_failed) + list(failure.p2p_failed)
    if failing:
        shown = ", ".join(f"`{t}`" for t in failing[:max_items])
        more = f" and {len(failing) - max_items} more" if len(failing) > max_items else ""
        notes.append(f"These tests failed with your patch: {shown}{more}.")
    asserts = [m[1] for line in failure.log_excerpt.splitlines() if (m := _ASSERT.match(line))]
    if asserts:
        notes.append("Assertion output:\n" + "\n".join(f"    {a}" for a in asserts[:max_items]))
    frames = [line for line in failure.log_excerpt.splitlines() if _FRAME.match(line)]
    if frames:
        notes.append("Last traceback frames:\n" + "\n".join(f"    {f}" for f in frames[-3:]))
    return "\n".join(notes)


def _episode_notes(failure: Failure) -> list[str]:
    notes = []
    if not failure.patch.strip():
        notes.append("Your previous attempt submitted no change at all.")
    elif not failure.patch_applied:
        notes.append("Your previous patch did not apply to the repository.")
    if failure.format_errors:
        notes.append(f"{failure.format_errors} of your replies had no single valid command block; "
                     "answer with exactly one fenced command block per turn.")
    if failure.termination in ("max_turns", "context_overflow", "timeout"):
        notes.append(f"The attempt ran out of budget ({failure.termination.replace('_', ' ')}) "
                     "before submitting; work in fewer, more decisive steps.")
    return notes


def plan_text(instance: Instance, locations: list[Location], allow_verbatim: bool) -> str:
    """Steps and the crux, from the issue's first sentence and the shape of the fix."""
    files = sorted({loc.path for loc in locations})
    hunks = parse_hunks(instance.patch)
    tests = ", ".join(f"`{t}`" for t in instance.fail_to_pass[:3])
    steps = [f"1. Reproduce the problem described in the issue: {_first_sentence(instance)}",
             f"2. Read the code involved in {_plural(len(files), 'file')}: "
             + ", ".join(f"`{f}`" for f in files) + ".",
             f"3. The fix is small: {_plural(len(hunks), 'edit')} "
             f"({_shape(hunks)}). Change the behaviour, not the tests.",
             f"4. Check the behaviour the tests expect ({tests}) and make sure the existing "
             "tests still pass, then submit."]
    if allow_verbatim:
        steps.append("5. The fixed lines read:\n" + "\n".join(
            f"    {line}" for h in hunks for line in h.added if line.strip()))
    return "\n".join(steps)


def _first_sentence(instance: Instance) -> str:
    text = " ".join(instance.problem_statement.split())
    match = re.search(r"(.{20,300}?[.!?])(\s|$)", text)
    return (match[1] if match else text[:200]).strip()


def _shape(hunks: list[Hunk]) -> str:
    removed = sum(len(h.removed) for h in hunks)
    added = sum(len(h.added) for h in hunks)
    return f"about {removed} line(s) changed or removed, {added} added"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def leakage(text: str, gold_patch: str, min_chars: int = 8) -> float:
    """Fraction of the gold patch's added code lines that appear verbatim in `text`.

    Lines shorter than `min_chars` once stripped (`return x`, `}`) are ignored: they carry too
    little of the fix to count as a leak and would match by chance.
    """
    added = {line.strip() for h in parse_hunks(gold_patch) for line in h.added}
    added = {line for line in added if len(line) >= min_chars}
    if not added:
        return 0.0
    return sum(1 for line in added if line in text) / len(added)


# --------------------------------------------------------------------------- sources


@dataclass
class RulesSource:
    read_base: ReadBase
    cfg: GuidanceConfig = field(default_factory=GuidanceConfig)

    def make(self, instance: Instance, failure: Failure) -> Guidance:
        locations = locate(instance, self.read_base)
        guidance = Guidance(instance.instance_id, failure.episode_id,
                            plan=plan_text(instance, locations, self.cfg.allow_verbatim),
                            feedback=feedback_text(failure), location=location_text(locations),
                            source="rules", parts=tuple(self.cfg.parts))
        return with_leakage(guidance, instance)


def with_leakage(g: Guidance, instance: Instance) -> Guidance:
    return Guidance(g.instance_id, g.failed_episode_id, g.plan, g.feedback, g.location, g.source,
                    leakage(g.text(), instance.patch), g.parts)
