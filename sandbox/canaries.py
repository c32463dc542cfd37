"""The canaries: two tests planted in each graded test file, with random ordinary names and
bodies, one that must pass and one that must fail (`sandbox.grading`'s docstring says what they
catch, and what they cannot). `sandbox.tamper.plant_checks` plants them; `canary_verdict` reads
them back."""

from __future__ import annotations

import hashlib
import random
import secrets
import shlex
from typing import TYPE_CHECKING

from sandbox import reference
from sandbox.base import SandboxError
from sandbox.logparse import FAILED, OK, PASSED, SKIPPED, JunitIndex, junit_key

if TYPE_CHECKING:
    from sandbox.base import Sandbox
    from sandbox.suite_run import SuiteRun
    from swe_rlvr.config import SandboxConfig
    from swe_rlvr.instances import Instance


STOPPING = ("-x", "--exitfirst", "--maxfail", "-k", "-m", "--lf", "--last-failed", "--sw", "--stepwise",
            "--stepwise-skip", "--deselect")
"""pytest options with which a failing canary could cut the run short, or canaries be deselected."""
SHORT_WITH_VALUE = "kmprcoWn"
CANARY_WORDS = (
    ("parse", "merge", "split", "render", "load", "format", "resolve", "count", "sort", "strip", "group"),
    ("keeps", "drops", "handles", "returns", "accepts", "preserves", "skips", "collects", "orders"),
    ("empty", "nested", "unicode", "trailing", "duplicate", "default", "mixed", "single", "quoted"),
    ("values", "items", "keys", "lines", "names", "entries", "fields", "parts", "tokens", "rows"))
SYSTEM_RNG = random.SystemRandom()


def canaries_blocked(instance: Instance, cfg: SandboxConfig) -> tuple[bool, str]:
    """(no canaries for this run, the note that says why where it is not the configuration's choice)."""
    if not (cfg.canaries and reference.is_pytest(instance)):
        return True, ""
    if instance.env.eval_script and cfg.backend == "docker":
        return True, "no canary tests: the eval script resets the test files itself"
    option = stopping_option(instance.env.test_cmd)
    if option:
        return True, f"no canary tests: the test command stops or selects tests ({option})"
    return False, ""


def stopping_option(test_cmd: str) -> str:
    """The first option of `STOPPING` among pytest's arguments in `test_cmd` ("" if none)."""
    words = shlex.split(test_cmd)
    start = next((i + 1 for i, w in enumerate(words) if w.rsplit("/", 1)[-1] in ("pytest", "py.test")), len(words))
    for word in words[start:]:
        if word.split("=", 1)[0] in STOPPING:
            return word
        if word.startswith("-") and not word.startswith("--"):
            for char in word[1:]:
                if char in "xkm":
                    return word
                if char in SHORT_WITH_VALUE:
                    break
    return ""


def canary_rng(instance: Instance, episode_id: str) -> random.Random:
    """The canaries' random source for grading one episode: seeded by the instance's gold and test
    patches (the answer the policy is looking for, so nothing it sees predicts the draw) and the
    episode id. The same episode graded again gets the same canaries, so a rerun or a resumed run
    writes the same logs; another episode gets others."""
    seed = "\0".join(("swe-rlvr canaries", instance.patch, instance.test_patch, episode_id))
    return random.Random(int.from_bytes(hashlib.sha256(seed.encode()).digest(), "big"))


def plant_canaries(sb: Sandbox, files: list[str], texts: dict[str, str], rng: random.Random) -> dict[str, str]:
    """Append a passing and a failing canary to each of `files`; {test id: expected status}."""
    canaries, script = {}, ["set -e"]
    for f in files:
        code = "\n"
        for expected in rng.sample([PASSED, FAILED], 2):
            name = canary_name(texts[f] + code, rng)
            code += canary_source(name, expected == PASSED, rng)
            canaries[f"{f}::{name}"] = expected
        end = f"EOF_{secrets.token_hex(8)}"
        script.append(f"cat >> {shlex.quote(f)} <<'{end}'\n{code}{end}")
    if canaries and sb.execute("\n".join(script), timeout=120).exit_code != 0:
        raise SandboxError(f"Appending canary tests to {', '.join(files)} failed; "
                           f"sandbox.canaries=false grades without them")
    return canaries


def canary_name(taken: str, rng: random.Random) -> str:
    """An ordinary-looking test name that `taken` (the file) does not contain."""
    while True:
        name = "test_" + "_".join(rng.choice(words) for words in CANARY_WORDS)
        if name not in taken:
            return name


def canary_source(name: str, passes: bool, rng: random.Random) -> str:
    """A small test on builtins with random values; the failing one fails on a plain assertion."""
    a, b, c = rng.sample(CANARY_WORDS[3], 3)
    kind = rng.randrange(3)
    if kind == 0:
        values = [rng.randint(1, 99) for _ in range(rng.randint(2, 5))]
        total = sum(values) + (0 if passes else rng.randint(1, 9))
        body = f"    values = {values}\n    assert sum(values) == {total}\n"
    elif kind == 1:
        order = [a, b, c] if passes else [a, c, b]
        body = f"    parts = {f'{a},{b},{c}'!r}.split(',')\n    assert parts == {order!r}\n"
    else:
        table = {k: rng.randint(0, 9) for k in (a, b, c)}
        body = f"    table = {table!r}\n    assert sorted(table) == {sorted(table, reverse=not passes)!r}\n"
    return f"\n\ndef {name}():\n{body}"


def canary_verdict(run: SuiteRun, parsed: dict[str, str], index: JunitIndex | None) -> str:
    """What the canaries say is wrong with the run ("" if nothing); see the module docstring."""
    complete = run.exit_code in (0, 1) and not run.timed_out
    keys = {junit_key(t) for t in run.canaries}
    problems = []
    for test_id, expected in run.canaries.items():
        file = test_id.split("::", 1)[0]
        others = [s for t, s in parsed.items() if t.startswith(f"{file}::") and t not in run.canaries]
        problems.append(_canary_problem(test_id, expected, [parsed[test_id]] if test_id in parsed else [],
                                        others, complete, "log"))
        if index is not None:
            module = junit_key(test_id)[0]
            others = [s for k, found in index.items() if k not in keys
                      and (k[0] == module or k[0].startswith(f"{module}.")) for s in found]
            problems.append(_canary_problem(test_id, expected, index.get(junit_key(test_id), []),
                                            others, complete, "junit report"))
    return "; ".join(p for p in problems if p)


def _canary_problem(test_id: str, expected: str, got: list[str], others: list[str], complete: bool,
                    source: str) -> str:
    must = "pass" if expected == PASSED else "fail"
    if not got:
        return (f"canary {test_id} (must {must}) is missing from the {source}, though other tests of "
                f"its file reported" if complete and others else "")
    wrong = [s for s in got if s != expected and not _explained(s, expected, others)]
    return f"canary {test_id} (must {must}) reported {wrong[0]} in the {source}" if wrong else ""


def _explained(status: str, expected: str, others: list[str]) -> bool:
    """A canary's unexpected status that the rest of its file shares is no sign of tampering: an
    autouse fixture erroring for every test, a skipped module. Passing the wrong way never is."""
    if status in OK:
        return False
    if status == SKIPPED and expected == FAILED:
        return all(s == SKIPPED for s in others)
    return status in others
