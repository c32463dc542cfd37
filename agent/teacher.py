"""The `teacher` guidance source: an OpenAI-compatible chat model writes Agent-RLVR's hint.

The teacher sees the issue, the gold patch and the failed attempt (its patch, termination, failing
tests and the end of the test log), and answers in three sections, PLAN / FEEDBACK / LOCATION.
Answers are cached per (instance, failure) under `cache_dir`, so a resumed iteration asks again for
nothing. A timeout, a refused connection or an answer without the three sections falls back to the
`rules` source with a warning: guidance is a help, never a reason for an iteration to fail.

Simplifications: the paper's teacher prompt is not published; this one is written for this project.
The request is a plain `/chat/completions` POST at temperature 0 with no streaming.
"""

from __future__ import annotations

import json
import logging
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from agent.guidance_sources import PARTS, Failure, Guidance, ReadBase, RulesSource, with_leakage
from swe_rlvr.config import GuidanceConfig
from swe_rlvr.instances import Instance

log = logging.getLogger(__name__)


TEACHER_PROMPT = """You are a senior engineer mentoring a junior developer who tried to fix a \
GitHub issue and failed. Write guidance for their next attempt in exactly three sections, each \
starting on its own line with its heading:

PLAN: the steps to take and the crux of the problem.
FEEDBACK: what went wrong in their previous attempt, from the trace below.
LOCATION: the files, functions and line ranges to edit.

{verbatim_rule}

# Issue
{issue}

# Reference fix (for you only)
{gold}

# Their previous attempt
Termination: {termination}; format errors: {format_errors}
Their patch:
{patch}
Failing tests: {failing}
Test log (end):
{log}
"""

_SECTION = re.compile(r"^(PLAN|FEEDBACK|LOCATION):\s*", re.MULTILINE)


def parse_teacher(answer: str) -> dict[str, str]:
    """Split a teacher answer into its three sections; raises ValueError if one is missing."""
    pieces = _SECTION.split(answer)
    sections = {pieces[i].lower(): pieces[i + 1].strip() for i in range(1, len(pieces) - 1, 2)}
    missing = [p for p in PARTS if not sections.get(p)]
    if missing:
        raise ValueError(f"teacher answer lacks section(s) {', '.join(missing).upper()}")
    return sections


@dataclass
class TeacherSource:
    read_base: ReadBase
    cfg: GuidanceConfig
    cache_dir: Path | None = None

    def make(self, instance: Instance, failure: Failure) -> Guidance:
        try:
            sections = self._sections(instance, failure)
        except (OSError, ValueError, KeyError) as exc:
            log.warning("teacher guidance failed for %s (%s); falling back to rules",
                        instance.instance_id, exc)
            return RulesSource(self.read_base, self.cfg).make(instance, failure)
        g = Guidance(instance.instance_id, failure.episode_id, sections["plan"],
                     sections["feedback"], sections["location"], "teacher",
                     parts=tuple(self.cfg.parts))
        return with_leakage(g, instance)

    def _sections(self, instance: Instance, failure: Failure) -> dict[str, str]:
        cached = self._cache_path(instance, failure)
        if cached and cached.exists():
            return json.loads(cached.read_text())
        sections = parse_teacher(self._ask(self._prompt(instance, failure)))
        if cached:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(sections))
        return sections

    def _cache_path(self, instance: Instance, failure: Failure) -> Path | None:
        if self.cache_dir is None:
            return None
        return Path(self.cache_dir) / instance.instance_id / f"{failure.key()}.json"

    def _prompt(self, instance: Instance, failure: Failure) -> str:
        rule = ("You may quote the reference fix." if self.cfg.allow_verbatim else
                "Never quote code from the reference fix: describe intent and location only.")
        failing = ", ".join(failure.f2p_failed + failure.p2p_failed) or "none recorded"
        return TEACHER_PROMPT.format(
            verbatim_rule=rule, issue=instance.problem_statement[:6000], gold=instance.patch[:6000],
            termination=failure.termination or "unknown", format_errors=failure.format_errors,
            patch=failure.patch[:4000] or "(empty)", failing=failing, log=failure.log_excerpt[-3000:])

    def _ask(self, prompt: str) -> str:
        """The teacher's answer; TimeoutError when the whole exchange outlasts
        `teacher_timeout_s` (urllib's own timeout bounds each socket wait, not the request: a
        server that trickles its answer would never time out)."""
        base = self.cfg.teacher_base_url
        if not base:  # `make` falls back to the rules source, with this reason
            raise ValueError("guidance.teacher_base_url is not set")
        url = base.rstrip("/") + "/chat/completions"
        body = {"model": self.cfg.teacher_model, "temperature": 0.0, "max_tokens": 800,
                "messages": [{"role": "user", "content": prompt}]}
        request = urllib.request.Request(url, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        limit = self.cfg.teacher_timeout_s
        deadline = time.monotonic() + limit
        chunks = []
        with urllib.request.urlopen(request, timeout=limit) as response:
            while chunk := response.read1(1 << 16):
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the teacher's answer took over {limit:g} s (timed out)")
        return json.loads(b"".join(chunks))["choices"][0]["message"]["content"]
