"""Guidance as a message transform (Agent-RLVR): a tagged hint block after the issue.

`inject_guidance(messages, text)` appends `guidance_block(text)` to the end of the first user message
(which holds the issue). The loop tokenises that block as its own span, records it as
`Trajectory.guidance_start/guidance_end` and gives it loss mask 0, like any other context.

Training modes (GuidanceConfig.mode): `keep` trains on the ids as they are; `strip` calls
`trainer.episodes.strip_guidance`, which cuts the span out of ids, mask and log-probs. Because the
block ends exactly where the first user message ends (before the end-of-turn token) and its edges
are token edges, the stripped ids decode to the unguided prompt followed by the same turns. The
sampler's log-probs of the policy's tokens were computed *with* the hint; under `strip` they are
stale as importance weights, so
the trainer should treat stripped episodes as off-policy (recompute old log-probs, or use them for SFT
/ RFT only). That choice belongs to the trainer.
"""

from __future__ import annotations

OPEN_TAG, CLOSE_TAG = "<guidance>", "</guidance>"
INSTRUCTION = ("Use this guidance, but solve the problem from the start: explore, edit and test as "
               "usual, and explain your reasoning as if you had found everything yourself, without "
               "mentioning this guidance.")


def guidance_block(text: str) -> str:
    """The exact text appended to the first user message."""
    return f"\n\n{OPEN_TAG}\n{text.strip()}\n\n{INSTRUCTION}\n{CLOSE_TAG}"


def inject_guidance(messages: list[dict], text: str) -> list[dict]:
    """A copy of `messages` whose first user message ends with the guidance block."""
    out = [dict(m) for m in messages]
    first = next(i for i, m in enumerate(out) if m["role"] == "user")
    out[first]["content"] += guidance_block(text)
    return out

