"""Token-in/token-out: the prefix property on every turn, ids that decode to the messages, guidance.

Checked on the tiny model's ChatML template and on two more ChatML dialects written out below in
the shape Qwen2.5-Instruct and SmolLM2-Instruct use (a default system prompt when none is given).
"""

from __future__ import annotations

import copy

import pytest

from agent.chat import ChatTokens
from agent.guidance import OPEN_TAG, guidance_block, inject_guidance
from agent.loop import run_episode
from agent.scripted import ReplayPolicy, ScriptedPolicy
from swe_rlvr.config import AgentConfig
from test_agent_support import tokenizer, toy  # noqa: F401  (fixtures)
from trainer.episodes import episode_from_row, strip_guidance

QWEN25_STYLE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' or not loop.first %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SMOLLM2_STYLE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class Recording:
    """Engine wrapper that keeps a copy of every prompt it is given."""

    def __init__(self, engine):
        self.engine, self.tokenizer, self.policy_version = engine, engine.tokenizer, engine.policy_version
        self.prompts: list[list[int]] = []

    def generate(self, prompts, params):
        self.prompts += [list(p) for p in prompts]
        return self.engine.generate(prompts, params)


def with_template(tokenizer, template: str | None):
    if template is None:
        return tokenizer
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = template
    return tok


def assert_token_in_token_out(traj, engine: Recording, chat: ChatTokens) -> None:
    """Prefix property on every turn, and every prompt decodes to its messages' rendering."""
    prompts = engine.prompts
    assert prompts == traj.prompts() and len(prompts) == traj.turns
    for k, prompt in enumerate(prompts):
        later = prompts[k + 1] if k + 1 < len(prompts) else traj.token_ids
        assert later[:len(prompt)] == prompt, f"turn {k}'s prompt is not a prefix of the next"
        # messages before turn k's reply: system, issue, then k (reply, observation) pairs
        assert chat.decode(prompt) == chat.render(traj.messages[:2 + 2 * k], generation_prompt=True)
    if traj.messages[-1]["role"] == "user":    # ended by a limit after an observation
        assert chat.decode(traj.token_ids) == chat.render(traj.messages, generation_prompt=True)
    else:                                       # ended on a reply: the ids stop at its <|im_end|>
        assert chat.decode(traj.token_ids) + chat.separator == chat.render(traj.messages)
    assert len(traj.token_ids) == len(traj.loss_mask) == len(traj.logprobs)


@pytest.mark.parametrize("template", [None, QWEN25_STYLE, SMOLLM2_STYLE], ids=["tiny", "qwen2.5", "smollm2"])
def test_prefix_property_and_decoding_on_chatml_templates(template, toy, tokenizer):
    instance, box = toy
    tok = with_template(tokenizer, template)
    engine = Recording(ScriptedPolicy(tok, [instance]))
    traj = run_episode(instance, box, engine, AgentConfig())
    assert traj.termination == "submitted" and traj.turns >= 4
    assert_token_in_token_out(traj, engine, ChatTokens(tok))


def test_first_prompt_is_the_chat_template_with_generation_prompt(tokenizer):
    messages = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Issue: x\n\ny"}]
    ids, span = ChatTokens(tokenizer).prompt(messages)
    assert span == (-1, -1)
    assert ids == list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False))


def test_length_cut_turn_gets_an_unmasked_free_end_of_turn(toy, tokenizer):
    instance, box = toy
    chat = ChatTokens(tokenizer)
    replies = ["Thinking " * 200, "```\nls\n```", "not a command"]
    engine = Recording(ReplayPolicy(tokenizer, replies))
    traj = run_episode(instance, box, engine, AgentConfig(max_new_tokens=40))
    assert_token_in_token_out(traj, engine, chat)
    first = traj.turn_starts[0]
    # turn 1 was cut at 40 sampled ids; id 41 is the appended <|im_end|> with mask 0, logprob 0
    assert traj.token_ids[first + 40] == chat.eot_id and traj.loss_mask[first + 40] == 0
    # turn 2 (`ls`) is well formed: every sampled id, its <|im_end|> included, has mask 1
    second = traj.token_ids[traj.turn_starts[1]:]
    n2 = second.index(chat.eot_id) + 1
    assert traj.loss_mask[traj.turn_starts[1]:traj.turn_starts[1] + n2] == [1] * n2
    # only turns 2 and 4 (`submit`) train; 1 (no block after the cut) and 3 (no block) are masked
    trained = sum(traj.loss_mask)
    n4 = len(traj.token_ids) - traj.turn_starts[3]
    assert trained == n2 + n4


def test_stop_ids_include_a_distinct_eos(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.eos_token = "<|endoftext|>"
    chat = ChatTokens(tok)
    assert chat.stop_ids() == (tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>"))


def test_templates_that_rerender_history_are_refused(tokenizer):
    reversed_template = ("{% for m in messages|reverse %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] "
                         "+ '<|im_end|>\\n' }}{% endfor %}")
    with pytest.raises(ValueError, match="append-only"):
        ChatTokens(with_template(tokenizer, reversed_template))


HINT = "Location:\n- File `calc/ops.py`, function `add` (line 6)"


def test_guidance_is_a_message_transform_after_the_issue():
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "the issue"}]
    out = inject_guidance(messages, HINT)
    assert messages[1]["content"] == "the issue"                      # the input is not mutated
    assert out[1]["content"] == "the issue" + guidance_block(HINT)
    assert out[1]["content"].index("the issue") < out[1]["content"].index(OPEN_TAG)
    assert "from the start" in guidance_block(HINT) and "as if" in guidance_block(HINT)


def test_guidance_tokens_are_masked_and_strippable(toy, tokenizer):
    instance, box = toy
    chat = ChatTokens(tokenizer)
    engine = Recording(ScriptedPolicy(tokenizer, [instance], variant="weak"))
    traj = run_episode(instance, box, engine, AgentConfig(), guidance=HINT)
    assert traj.guided and traj.termination == "submitted" and "return a + b" in traj.patch
    a, b = traj.guidance_start, traj.guidance_end
    assert 0 < a < b < traj.turn_starts[0]
    assert chat.decode(traj.token_ids[a:b]) == guidance_block(HINT)   # the span is exactly the block
    assert set(traj.loss_mask[a:b]) == {0} and set(traj.logprobs[a:b]) == {0.0}
    assert_token_in_token_out(traj, engine, chat)
    stripped = strip_guidance(episode_from_row(traj.to_row()))         # what the trainer runs
    ids, mask, logprobs = list(stripped.token_ids), stripped.loss_mask, stripped.logprobs
    unguided = chat.render(traj.messages[:2], generation_prompt=True).replace(guidance_block(HINT), "")
    assert chat.decode(ids).startswith(unguided) and OPEN_TAG not in chat.decode(ids)
    assert len(ids) == len(mask) == len(logprobs) == len(traj.token_ids) - (b - a)
    assert sum(mask) == sum(traj.loss_mask)


def test_weak_policy_without_guidance_submits_nothing(toy, tokenizer):
    instance, box = toy
    traj = run_episode(instance, box, ScriptedPolicy(tokenizer, [instance], variant="weak"), AgentConfig())
    assert (traj.termination, traj.patch, traj.guidance_start) == ("submitted", "", -1)


def test_real_hf_engine_keeps_the_prefix_property(toy, tiny_model_dir):
    engines = pytest.importorskip("agent.engines")
    from swe_rlvr.config import EngineConfig

    instance, box = toy
    engine = Recording(engines.make_engine(EngineConfig(name="hf", model=str(tiny_model_dir), device="cpu",
                                                        torch_threads=1)))
    traj = run_episode(instance, box, engine, AgentConfig(max_turns=3, max_new_tokens=24,
                                                          max_format_errors=5))
    assert traj.turns == 3 and traj.termination in ("max_turns", "submitted")
    assert_token_in_token_out(traj, engine, ChatTokens(engine.tokenizer))
    sampled = [lp for lp, m, k in zip(traj.logprobs, traj.loss_mask, range(len(traj.logprobs)))
               if k >= traj.turn_starts[0]]
    assert any(lp < 0 for lp in sampled)                     # the sampler's log-probs are kept
