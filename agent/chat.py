"""Incremental chat-template tokenisation for token-in/token-out episodes.

The first prompt is the chat template applied to [system, user] with the generation prompt. After
that nothing is re-tokenised: the engine's sampled ids are kept as they are, and each observation is
appended as the ids of the template's *delta* for one more user message plus the generation prompt.

The delta is derived once per tokenizer by rendering dummy conversations (no template is hard-coded):
- `render([.., assistant "A"])` ends with `A` + end-of-turn token + separator (`<|im_end|>` + `\\n`
  in ChatML). The sampled reply already ends with the end-of-turn token, so the delta starts with the
  separator, exactly once.
- `render([.., assistant, user X], generation prompt)` minus `render([.., assistant])` is the user
  message's prefix + X + suffix (`<|im_start|>user\\n` X `<|im_end|>\\n<|im_start|>assistant\\n`).
The delta text `separator + prefix + observation + suffix` is tokenised on its own and appended.

Invariants (tested): every turn's prompt ids are a prefix of the next turn's, and decoding the ids
reproduces the template's rendering of the stored messages.

Simplifications: templates that re-render earlier turns (e.g. Qwen3 dropping past `<think>` blocks)
are refused with a clear error, because no append-only delta exists for them.
"""

from __future__ import annotations

from typing import Any

_SYS, _USER, _ANSWER, _SLOT = "\x01SYS\x01", "\x01USER\x01", "\x01ANSWER\x01", "\x01SLOT\x01"


class ChatTokens:
    """The template's fixed pieces for one tokenizer, and the id deltas built from them."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        self._backend = getattr(tokenizer, "backend_tokenizer", None)  # skips HF's per-call overhead
        base = [{"role": "system", "content": _SYS}, {"role": "user", "content": _USER},
                {"role": "assistant", "content": _ANSWER}]
        closed = self.render(base)
        grown = self.render(base + [{"role": "user", "content": _SLOT}], generation_prompt=True)
        if not grown.startswith(closed):
            raise ValueError("The chat template re-renders earlier turns, so observations cannot be "
                             "appended as ids; use an append-only template such as ChatML.")
        tail = closed[closed.rindex(_ANSWER) + len(_ANSWER):]
        self.eot = _leading_special(tokenizer, tail)
        self.eot_id: int = tokenizer.convert_tokens_to_ids(self.eot)
        self.separator = tail[len(self.eot):]
        self.user_prefix, self.user_suffix = grown[len(closed):].split(_SLOT)

    def render(self, messages: list[dict], generation_prompt: bool = False) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        """Ids of `text` without added BOS/EOS (straight through the Rust tokenizer when there is one)."""
        if self._backend is not None:
            return self._backend.encode(text, add_special_tokens=False).ids
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        if self._backend is not None:
            return self._backend.decode(ids, skip_special_tokens=False)
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def stop_ids(self) -> tuple[int, ...]:
        """End-of-turn id first, then the tokenizer's eos when it differs."""
        eos = self.tokenizer.eos_token_id
        return (self.eot_id,) if eos in (None, self.eot_id) else (self.eot_id, eos)

    def prompt(self, messages: list[dict], span: str = "") -> tuple[list[int], tuple[int, int]]:
        """Ids of the first prompt, and the token span of the text `span` inside it ((-1, -1) if none).

        With a span, the three pieces (before, span, after) are tokenised apart so that the span's
        edges are token edges and cutting it out leaves a valid tokenisation of the rest.
        """
        text = self.render(messages, generation_prompt=True)
        at = text.rfind(span) if span else -1
        if at < 0:
            return self.encode(text), (-1, -1)
        head, body, rest = self.encode(text[:at]), self.encode(span), self.encode(text[at + len(span):])
        return head + body + rest, (len(head), len(head) + len(body))

    def closing(self, sampled: list[int]) -> list[int]:
        """Ids to append after a reply so it ends with the end-of-turn token (empty if it does)."""
        return [] if sampled and sampled[-1] == self.eot_id else [self.eot_id]

    def user_delta(self, content: str) -> list[int]:
        """Ids that follow a closed assistant turn: separator, one user message, generation prompt."""
        return self.encode(self.separator + self.user_prefix + content + self.user_suffix)


def _leading_special(tokenizer: Any, text: str) -> str:
    specials = sorted(set(tokenizer.all_special_tokens) | set(tokenizer.get_added_vocab()), key=len)
    found = [tok for tok in specials if tok and text.startswith(tok)]
    if not found:
        raise ValueError(f"The chat template closes an assistant turn with {text[:20]!r}, which does "
                         f"not start with a special token; token-in/token-out needs one to stop on.")
    return found[-1]
