"""The episode loop: system prompt + issue (+ guidance), then turns of generate -> parse -> execute.

`step()` is `execute(parse(generate()))` (mini-swe-agent's DefaultAgent). Three exceptions carry
the observation and end or redirect a turn: `FormatError` (the turn is masked and the policy is told
how to fix it; `max_format_errors` in a row end the episode), `Submitted` and `LimitsExceeded`
(max turns, the context-token budget, wall time). A sandbox failure while running a command becomes
an observation at the tool boundary. Every other exception propagates to the runner, which records
the episode with termination `error`.

Token-in/token-out: the engine gets the episode's ids and returns sampled ids; observations are
appended as template deltas (agent.chat), never by re-tokenising the conversation.

A submission whose patch is larger than `sandbox.max_patch_kb` ends as `patch_too_large` (a format
failure, no patch).

Simplifications: the patch is recorded only for submitted episodes (an episode cut by a limit is a
failure, as in Nebius); the wall-time limit is checked between turns, and a running command is
bounded by the sandbox's own command timeout.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from agent import prompts
from agent.actions import Action, AgentEvent, FormatError, LimitsExceeded, Submitted, parse_action
from agent.chat import ChatTokens
from agent.engines.base import SamplingParams
from agent.guidance import guidance_block, inject_guidance
from agent.tools import make_tools
from agent.trajectory import Trajectory
from sandbox.base import PatchTooLarge, SandboxError
from swe_rlvr.config import AgentConfig
from swe_rlvr.instances import Instance

if TYPE_CHECKING:
    from agent.engines.base import Engine
    from sandbox.base import Sandbox

_CHATS: dict[int, tuple[object, ChatTokens]] = {}


def chat_tokens(tokenizer: object) -> ChatTokens:
    """The ChatTokens of a tokenizer, derived once (the tokenizer is kept alive with it)."""
    if id(tokenizer) not in _CHATS:
        _CHATS[id(tokenizer)] = (tokenizer, ChatTokens(tokenizer))
    return _CHATS[id(tokenizer)][1]


def truncate(text: str, limit: int) -> str:
    """Head and tail of `text` with a marker in between when it is longer than `limit` chars."""
    if len(text) <= limit:
        return text
    head, tail = text[:limit // 2], text[len(text) - limit // 2:]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters omitted ...]\n{tail}"


class Episode:
    """One attempt at one instance in one sandbox."""

    def __init__(self, instance: Instance, sandbox: Sandbox, engine: Engine, cfg: AgentConfig,
                 guidance: str = "", temperature: float = 1.0):
        self.instance, self.sandbox, self.engine, self.cfg = instance, sandbox, engine, cfg
        self.guidance, self.temperature = guidance, temperature
        self.tools = make_tools(sandbox, cfg)
        self.chat = chat_tokens(engine.tokenizer)
        self.traj = Trajectory(instance.instance_id, guided=bool(guidance),
                               policy_version=engine.policy_version)
        self.errors_in_a_row, self.deadline, self.began = 0, 0.0, time.monotonic()

    def run(self) -> Trajectory:
        start = self.began = time.monotonic()
        self.traj.started_at = time.time()
        self.deadline = start + self.cfg.wall_time_s
        self.start()
        try:
            while True:
                try:
                    self.step()
                except FormatError as exc:
                    self.format_error(exc)
        except (Submitted, LimitsExceeded) as exc:
            self.finish(exc)
        finally:
            self.traj.wall_s = time.monotonic() - start
            end = getattr(self.engine, "end_episode", None)   # engines that keep per-episode state
            if end is not None:
                end(self.traj.token_ids)
        return self.traj

    def start(self) -> None:
        messages = [{"role": "system", "content": prompts.system_prompt(self.cfg, self.sandbox.workdir)},
                    {"role": "user", "content": prompts.issue_message(self.instance)}]
        if self.guidance:
            messages = inject_guidance(messages, self.guidance)
        span = guidance_block(self.guidance) if self.guidance else ""
        ids, (self.traj.guidance_start, self.traj.guidance_end) = self.chat.prompt(messages, span)
        self.traj.messages = messages
        self.traj.add_context(ids)

    def step(self) -> None:
        self.execute(self.parse(self.generate()))

    def generate(self) -> str:
        self.check_limits()
        budget = self.cfg.context_tokens - len(self.traj.token_ids)
        params = SamplingParams(temperature=self.temperature, stop_token_ids=self.chat.stop_ids(),
                                max_new_tokens=min(self.cfg.max_new_tokens, budget))
        began = time.monotonic()
        sample = self.engine.generate([self.traj.token_ids], params)[0]
        took = time.monotonic() - began
        self.traj.gen_s += took
        ids, closing = list(sample.token_ids), self.chat.closing(sample.token_ids)
        self.traj.add_reply(ids, sample.logprobs, at_s=began - self.began, gen_s=took)
        self.traj.add_context(closing)
        reply = self.chat.decode(ids if closing else ids[:-1])
        self.traj.messages.append({"role": "assistant", "content": reply})
        return reply

    def parse(self, reply: str) -> Action:
        return parse_action(reply, self.tools.specs)

    def execute(self, action: Action) -> None:
        began = time.monotonic()
        try:
            observation = self.tools.run(action)
        except (SandboxError, OSError) as exc:  # the loop's boundary: a sandbox failure is observed
            observation = f"The sandbox failed to run this command: {type(exc).__name__}: {exc}"
        finally:
            took = time.monotonic() - began
            self.traj.exec_s += took
            self.traj.turn_log[-1]["exec_s"] = round(took, 4)
        self.errors_in_a_row = 0
        self.observe(observation)

    def observe(self, text: str) -> None:
        text = truncate(text, self.cfg.observation_chars)
        self.traj.messages.append({"role": "user", "content": text})
        self.traj.add_context(self.chat.user_delta(text))

    def format_error(self, exc: FormatError) -> None:
        self.traj.mask_last_reply()
        self.traj.format_errors += 1
        self.errors_in_a_row += 1
        if self.errors_in_a_row >= self.cfg.max_format_errors:
            raise LimitsExceeded("format_errors")
        self.observe(prompts.format_error(exc.observation))

    def check_limits(self) -> None:
        if self.traj.turns >= self.cfg.max_turns:
            raise LimitsExceeded("max_turns")
        if len(self.traj.token_ids) >= self.cfg.context_tokens:
            raise LimitsExceeded("context_overflow")
        if time.monotonic() > self.deadline:
            raise LimitsExceeded("timeout")

    def finish(self, event: AgentEvent) -> None:
        """Record how the episode ended and, for a submission, its patch. A patch past
        `sandbox.max_patch_kb` is a format failure: termination `patch_too_large`, no patch."""
        submitted = isinstance(event, Submitted)
        self.traj.termination = "submitted" if submitted else event.termination
        began = time.monotonic()
        try:
            self.traj.patch = self.sandbox.diff() if submitted else ""
        except PatchTooLarge as exc:
            self.traj.patch, self.traj.termination, self.traj.error = "", "patch_too_large", str(exc)
            self.traj.format_errors += 1
        self.traj.exec_s += time.monotonic() - began


def run_episode(instance: Instance, sandbox: Sandbox, engine: Engine, cfg: AgentConfig,
                guidance: str = "", temperature: float = 1.0) -> Trajectory:
    """Run one episode to its end and return its trajectory."""
    return Episode(instance, sandbox, engine, cfg, guidance, temperature).run()
