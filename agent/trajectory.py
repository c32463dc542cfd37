"""One episode stored token by token: the ids as sampled, the sampler's log-probs and the loss mask.

`token_ids` is the whole episode (first prompt + every reply + every observation delta) with one
`loss_mask` entry and one `logprobs` entry per id:
- mask 1 only on the sampled ids of well-formed turns, their end-of-turn token included;
- mask 0 on the system prompt, the issue, guidance, observations, format-error turns, and an
  end-of-turn id appended after a reply cut by `length`;
- logprob 0.0 wherever the engine did not sample the id.
`messages` mirror the ids: decoding `token_ids` gives the chat template's rendering of `messages`.
`turn_starts[k]` is the prompt length before turn k's reply, so `token_ids[:turn_starts[k]]` is the
exact prompt of turn k (the prefix property: each is a prefix of the next).
`turn_log` keeps when each turn happened and what it cost (`TurnTimes`), stored as `turns_json`
with the episode's wall-clock start: what an episode's trace (`tasks.traces`) shows per turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

TERMINATIONS = ("submitted", "max_turns", "context_overflow", "timeout", "format_errors",
                "patch_too_large", "error")


def episode_id(instance_id: str, iteration: int, sample: int, guided: bool = False) -> str:
    return f"{instance_id}/i{iteration}/s{sample}" + ("/guided" if guided else "")


@dataclass
class Trajectory:
    instance_id: str
    guided: bool = False
    policy_version: int = 0
    iteration: int = 0
    sample: int = 0
    """Index of the episode inside its group."""
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    messages: list[dict] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    guidance_start: int = -1
    guidance_end: int = -1
    turns: int = 0
    format_errors: int = 0
    termination: str = ""
    patch: str = ""
    gen_tokens: int = 0
    gen_s: float = 0.0
    exec_s: float = 0.0
    wall_s: float = 0.0
    error: str = ""
    started_at: float = 0.0
    """Wall-clock (epoch seconds) start of the episode."""
    turn_log: list[dict] = field(default_factory=list)
    """Per turn: `at_s` (seconds from the start to the turn's generation), `gen_s`, `exec_s` (its
    command; 0.0 when none ran), `prompt_tokens` (= its turn_start) and `gen_tokens`."""

    def add_context(self, ids: list[int]) -> None:
        """Ids the policy reads but did not write (prompt, observations): mask 0, logprob 0."""
        self.token_ids += ids
        self.loss_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)

    def add_reply(self, ids: list[int], logprobs: list[float], at_s: float = 0.0,
                  gen_s: float = 0.0) -> None:
        """Sampled ids of one turn, trainable until `mask_last_reply` says otherwise; `at_s` and
        `gen_s` time its generation for the turn log."""
        self.turn_log.append({"at_s": round(at_s, 4), "gen_s": round(gen_s, 4), "exec_s": 0.0,
                              "prompt_tokens": len(self.token_ids), "gen_tokens": len(ids)})
        self.turn_starts.append(len(self.token_ids))
        self.token_ids += ids
        self.loss_mask += [1] * len(ids)
        self.logprobs += [float(x) for x in logprobs]
        self.turns += 1
        self.gen_tokens += len(ids)

    def mask_last_reply(self) -> None:
        """Set the loss mask of the last reply to 0 (a format-error turn)."""
        start = self.turn_starts[-1]
        self.loss_mask[start:] = [0] * (len(self.loss_mask) - start)

    def prompts(self) -> list[list[int]]:
        """The exact prompt ids of each turn."""
        return [self.token_ids[:n] for n in self.turn_starts]

    def to_row(self, iteration: int | None = None, sample: int | None = None,
               policy_version: int | None = None) -> dict:
        """A ROLLOUTS row (swe_rlvr.artifacts); arguments override the stored values."""
        iteration = self.iteration if iteration is None else iteration
        sample = self.sample if sample is None else sample
        return {
            "episode_id": episode_id(self.instance_id, iteration, sample, self.guided),
            "instance_id": self.instance_id, "iteration": iteration, "sample": sample,
            "guided": self.guided,
            "policy_version": self.policy_version if policy_version is None else policy_version,
            "token_ids": self.token_ids, "loss_mask": self.loss_mask, "logprobs": self.logprobs,
            "guidance_start": self.guidance_start, "guidance_end": self.guidance_end,
            "messages_json": json.dumps(self.messages), "turns": self.turns,
            "format_errors": self.format_errors, "termination": self.termination,
            "patch": self.patch, "gen_tokens": self.gen_tokens, "gen_s": self.gen_s,
            "exec_s": self.exec_s, "wall_s": self.wall_s, "error": self.error,
            "turns_json": json.dumps({"started_at": self.started_at, "turns": self.turn_log}),
        }

    @classmethod
    def from_row(cls, row: dict) -> Trajectory:
        """Inverse of `to_row` (turn_starts are not stored and come back empty)."""
        keep = {k: row[k] for k in ("instance_id", "guided", "policy_version", "iteration", "sample",
                                    "guidance_start",
                                    "guidance_end", "turns", "format_errors", "termination", "patch",
                                    "gen_tokens", "gen_s", "exec_s", "wall_s", "error")}
        log = json.loads(row.get("turns_json") or "{}")   # absent from files of before it
        return cls(token_ids=list(row["token_ids"]), loss_mask=list(row["loss_mask"]),
                   logprobs=list(row["logprobs"]), messages=json.loads(row["messages_json"]),
                   started_at=log.get("started_at", 0.0), turn_log=log.get("turns", []), **keep)
