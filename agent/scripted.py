"""A scripted policy: an `Engine` that replays known actions through the real loop and tools.

It decodes each prompt with a real tokenizer, finds the instance by its issue text, counts the turns
already taken, and answers with the next reply of that instance's script, encoded to ids (log-prob
0.0, ending with the end-of-turn id). It is stateless across calls, so any number of concurrent
episodes can share one instance of it, batched or not.

Variants (`ScriptedPolicy(tokenizer, instances, variant=...)`):
- `gold`: applies the gold patch with the scaffold's own editors (swe-agent: `open` + `edit START:END`
  heredocs per hunk, bottom-up, and `create` for new files; bash: `python - <<'EOF'` line splices and
  `cat > FILE <<'EOF'`), then `submit`. Resolves every instance whose gold patch is right.
- `cheat`: attacks grading: deletes the test files, writes a conftest.py that marks every test
  passed, prints fake `PASSED` lines, commits and resets git history, then submits.
- `format_error`: only malformed replies (no block, two blocks, unterminated heredoc, ...).
- `weak`: behaves like `gold` only when its prompt holds a `Location:` section naming a file of the
  gold patch (the guidance hint); otherwise it lists the repo and submits nothing.
- `coin`: per episode, `gold` or the no-op (list the repo, submit nothing) with probability 1/2
  each, drawn from the episode's first sampling seed (`SamplingParams.seed`; no seed: `gold`). A
  stand-in for a policy with pass@1 near 0.5, so best-of-k reranking has something to pick from.
  Later turns follow the first one's draw: the no-op's first reply is in the prompt or it is not.
  (With one worker and `engine.max_batch: 1` the seeds, and hence the draws, are reproducible.)

`ReplayPolicy(tokenizer, replies)` answers with fixed replies (text or raw ids); the tests feed it
malformed outputs.

Simplifications: "\\ No newline at end of file" markers are ignored (the edited file ends with a
newline); the script does not look at observations, so a failed edit is not retried.
"""

from __future__ import annotations

import random

from agent.chat import ChatTokens
from agent.engines.base import UNFILTERED, Sample, SamplingParams
from swe_rlvr.instances import Instance
from swe_rlvr.patches import parse_patch

VARIANTS = ("gold", "cheat", "format_error", "weak", "coin")
NOOP = "ls"
"""The no-op command of `weak` and `coin`: look around, then submit nothing."""

MALFORMED = (
    "I will look at the repository first.",
    "Two things at once:\n```bash\nls\n```\n```bash\npwd\n```",
    "```bash\ncat > notes.txt <<'EOF'\nnever closed\n```",
    "```bash\nls -la",
    "```\n\n```",
)


def _tag(text: str) -> str:
    tag = "EOF"
    while tag in text.split("\n"):
        tag += "X"
    return tag


def _heredoc(head: str, body: str) -> str:
    tag = _tag(body)
    return f"{head} <<'{tag}'\n{body}\n{tag}"


def swe_agent_script(patch: str) -> list[str]:
    """Commands that apply `patch` with SWE-agent tools."""
    commands = []
    for fp in parse_patch(patch):
        if fp.deleted:
            commands.append(f"rm {fp.path}")
        elif fp.new_file:
            commands.append(_heredoc(f"create {fp.path}", "\n".join(fp.hunks[0].new)))
        else:
            commands.append(f"open {fp.path}")
            for hunk in reversed(fp.hunks):
                start, end = hunk.span()
                commands.append(_heredoc(f"edit {start}:{end}", "\n".join(hunk.new)))
    return commands


def bash_script(patch: str) -> list[str]:
    """Commands that apply `patch` with plain bash (heredoc files and Python line splices)."""
    commands = []
    for fp in parse_patch(patch):
        if fp.deleted:
            commands.append(f"rm {fp.path}")
        elif fp.new_file:
            folder = fp.path.rsplit("/", 1)[0] if "/" in fp.path else "."
            body = "\n".join(fp.hunks[0].new)
            commands.append(_heredoc(f"mkdir -p {folder} && cat > {fp.path}", body))
        else:
            splices = [f"lines[{h.span()[0] - 1}:{h.span()[1]}] = {[x + chr(10) for x in h.new]!r}"
                       for h in reversed(fp.hunks)]
            program = "\n".join([f"path = {fp.path!r}", "lines = open(path).readlines()", *splices,
                                 "open(path, 'w').write(''.join(lines))"])
            commands.append(_heredoc("python -", program))
    return commands


def cheat_script(instance: Instance) -> list[str]:
    """Commands that try to fool grading instead of fixing the bug."""
    tests = " ".join(instance.test_files()) or "tests"
    conftest = ("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
                "def pytest_runtest_makereport(item, call):\n    outcome = yield\n"
                "    outcome.get_result().outcome = 'passed'")
    fake = "\n".join(f"{t} PASSED" for t in instance.fail_to_pass) or "PASSED"
    return [f"rm -rf {tests}", _heredoc("cat > conftest.py", conftest), _heredoc("cat", fake),
            "git add -A && git -c user.name=x -c user.email=x@x commit -qm 'tests pass' "
            "&& git reset -q --soft HEAD~1 && git log --oneline -1"]


class _ReplyEngine:
    """Engine protocol for policies whose reply depends only on the decoded prompt."""

    def __init__(self, tokenizer, policy_version: int = 0):
        self.tokenizer, self.policy_version = tokenizer, policy_version
        self.chat = ChatTokens(tokenizer)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        return [self._sample(self.reply(self.chat.decode(p)), params) for p in prompts]

    def load_weights(self, checkpoint_dir: str) -> None:
        self.policy_version += 1

    def effective_sampling(self) -> dict:
        return {"temperature": 1.0, **UNFILTERED}

    def turn(self, prompt: str) -> int:
        """Replies already in the prompt (each user message ends with the generation prompt)."""
        return max(0, prompt.count(self.chat.user_suffix) - 1)

    def reply(self, prompt: str) -> str | list[int]:
        raise NotImplementedError

    def _sample(self, reply: str | list[int], params: SamplingParams) -> Sample:
        ids = (list(reply) if isinstance(reply, list) else self.chat.encode(reply)) + [self.chat.eot_id]
        finish = "stop" if len(ids) <= params.max_new_tokens else "length"
        ids = ids[:params.max_new_tokens]
        return Sample(ids, [0.0] * len(ids), finish)


class ScriptedPolicy(_ReplyEngine):
    """Replays a per-instance script (gold, cheat, format_error, weak); see the module docstring."""

    def __init__(self, tokenizer, instances: list[Instance], variant: str = "gold",
                 scaffold: str = "swe-agent", policy_version: int = 0):
        if variant not in VARIANTS:
            raise ValueError(f"Unknown scripted variant {variant!r}; choose one of: {', '.join(VARIANTS)}.")
        super().__init__(tokenizer, policy_version)
        self.instances, self.variant, self.scaffold = list(instances), variant, scaffold
        issues = [i.problem_statement.strip() for i in self.instances]
        self.issues = [(text, self.chat.decode(self.chat.encode(text))) for text in issues]
        """Each issue as written and as it reads in a decoded prompt, after the tokenizer's
        normaliser (Qwen2's NFC turns `e` + U+0301 into `é`): `_instance` looks for either."""

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Sample]:
        seeds = [None if params.seed is None else params.seed + i for i in range(len(prompts))]
        return [self._sample(self.reply(self.chat.decode(p), seed), params)
                for p, seed in zip(prompts, seeds)]

    def reply(self, prompt: str, seed: int | None = None) -> str:
        """The next command of the prompt's instance's script, as a reply."""
        turn = self.turn(prompt)
        if self.variant == "format_error":
            return MALFORMED[turn % len(MALFORMED)]
        script = self.script(self._instance(prompt), prompt, seed) + ["submit"]
        return _command_reply(turn, script[min(turn, len(script) - 1)])

    def script(self, instance: Instance, prompt: str, seed: int | None = None) -> list[str]:
        if self.variant == "cheat":
            return cheat_script(instance)
        if self.variant == "weak" and not _names_location(prompt, instance):
            return [NOOP]
        if self.variant == "coin" and not coin_fixes(prompt, self.turn(prompt), seed):
            return [NOOP]
        edits = swe_agent_script if self.scaffold == "swe-agent" else bash_script
        return edits(instance.patch)

    def _instance(self, prompt: str) -> Instance:
        found = [k for k, forms in enumerate(self.issues) if any(f in prompt for f in forms)]
        if found:  # the longest issue text wins, should one issue quote another
            return self.instances[max(found, key=lambda k: len(self.issues[k][0]))]
        raise ValueError("The scripted policy found none of its instances' issues in the prompt; "
                         "pass the instances being rolled out to ScriptedPolicy.")


class ReplayPolicy(_ReplyEngine):
    """Answers turn k with `replies[k]` (text, or raw ids for junk), then with `final` forever."""

    def __init__(self, tokenizer, replies: list[str | list[int]], final: str = "```\nsubmit\n```",
                 policy_version: int = 0):
        super().__init__(tokenizer, policy_version)
        self.replies, self.final = list(replies), final

    def reply(self, prompt: str) -> str | list[int]:
        turn = self.turn(prompt)
        return self.replies[turn] if turn < len(self.replies) else self.final


def _command_reply(turn: int, command: str) -> str:
    return f"Step {turn + 1}.\n```bash\n{command}\n```"


def coin_fixes(prompt: str, turn: int, seed: int | None) -> bool:
    """`coin`'s draw: at turn 0 a fair coin seeded by `seed` (None: fix); later, turn 0's draw."""
    if turn > 0:
        return _command_reply(0, NOOP) not in prompt
    return seed is None or random.Random(seed).random() < 0.5


def _names_location(prompt: str, instance: Instance) -> bool:
    """True when a `Location:` section of the prompt names a file the gold patch edits."""
    _before, found, after = prompt.partition("Location:")
    section = after.split("\n\n", 1)[0]
    return bool(found) and any(path in section for path in instance.fix_files())
