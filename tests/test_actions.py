"""Action parsing, and malformed policy outputs through the real loop: each is a format-error turn."""

from __future__ import annotations

import pytest

from agent.actions import SHELL, FormatError, extract_block, parse_action
from agent.loop import run_episode
from agent.scripted import ReplayPolicy
from agent.tools import BASH_TOOLS, SWE_AGENT_TOOLS
from swe_rlvr.config import AgentConfig
from test_agent_support import tokenizer, toy  # noqa: F401  (fixtures)


def test_one_block_with_language_tag_and_reasoning():
    reply = "I will list files.\n```bash\nls -la\n```\nThen read them."
    assert extract_block(reply) == "ls -la"
    action = parse_action(reply, SWE_AGENT_TOOLS)
    assert (action.tool, action.command) == (SHELL, "ls -la")


def test_tool_call_with_heredoc_body():
    action = parse_action("```\nedit 10:12 <<'EOF'\n    x = 1\n\n    y = 2\nEOF\n```", SWE_AGENT_TOOLS)
    assert action.tool == "edit" and action.args == ("10:12",)
    assert action.bodies == ("    x = 1\n\n    y = 2",)


def test_replace_takes_two_heredocs_in_declaration_order():
    reply = "```\nreplace src/m.py <<'OLD' <<\"NEW\"\nreturn a-b\nOLD\nreturn a+b\nNEW\n```"
    action = parse_action(reply, SWE_AGENT_TOOLS)
    assert action.args == ("src/m.py",) and action.bodies == ("return a-b", "return a+b")


def test_quoted_argument_and_shell_heredoc_pass():
    assert parse_action("```\nsearch_file 'def add' calc/ops.py\n```", SWE_AGENT_TOOLS).args == \
        ("def add", "calc/ops.py")
    shell = parse_action("```bash\ncat > f.txt <<'EOF'\nhi\nEOF\n```", SWE_AGENT_TOOLS)
    assert shell.tool == SHELL and shell.command.endswith("EOF")


def test_bash_mode_treats_tool_names_as_shell_except_submit():
    assert parse_action("```\nopen a.py\n```", BASH_TOOLS).tool == SHELL
    assert parse_action("```\nsubmit\n```", BASH_TOOLS).tool == "submit"


def test_here_string_and_shift_are_not_heredocs():
    for cmd in ("cat <<< 'x'", "python -c 'print(1 << 2)'"):
        assert parse_action(f"```\n{cmd}\n```", BASH_TOOLS).command == cmd


@pytest.mark.parametrize("reply, fix", [
    ("", "no command block"),
    ("```\nls\n```\n```\npwd\n```", "2 command blocks"),
    ("```\nls", "never closed"),
    ("```\nedit 1:2 <<'EOF'\nx\n```", "exactly `EOF`"),
])
def test_errors_say_how_to_fix(reply, fix):
    with pytest.raises(FormatError) as err:
        parse_action(reply, SWE_AGENT_TOOLS)
    assert fix in err.value.observation


OPEN = "```\nopen calc/ops.py\n```"

# (name, replies before the malformed one, the malformed reply)
MALFORMED = [
    ("empty", [], ""),
    ("whitespace", [], "   \n\n  \t"),
    ("no block", [], "I think the bug is in add(). Let me fix it."),
    ("two blocks", [], "```\nls\n```\nand\n```bash\npwd\n```"),
    ("empty block", [], "```\n```"),
    ("unclosed fence", [], "```bash\nls -la"),
    ("stray fences", [], "```\n```\n```"),
    ("unterminated tool heredoc", [OPEN], "```\nedit 1:1 <<'EOF'\nx = 1\n```"),
    ("unterminated shell heredoc", [], "```bash\ncat > notes.txt <<'EOF'\nhello\n```"),
    ("text after terminator", [OPEN], "```\nedit 1:1 <<'EOF'\nx\nEOF\nmore text\n```"),
    ("binary junk ids", [], list(range(3, 400, 3))),
    ("binary junk text", [], "\x00\x01\xff\xfe\ufffd" * 50),
    ("NUL in command", [], "```\nls \x00 -la\n```"),
    ("100k chars, no block", [], "word " * 20_000),
    ("unknown tool", [], "```\nfrobnicate_file calc/ops.py\n```"),
    ("bad edit range", [OPEN], "```\nedit 50:60 <<'EOF'\nx\nEOF\n```"),
    ("reversed edit range", [OPEN], "```\nedit 5:2 <<'EOF'\nx\nEOF\n```"),
    ("non-numeric edit range", [OPEN], "```\nedit a:b <<'EOF'\nx\nEOF\n```"),
    ("edit without body", [OPEN], "```\nedit 1:2\n```"),
    ("open without file", [], "```\nopen\n```"),
    ("open with too many args", [], "```\nopen a.py 1 2\n```"),
    ("goto a word", [OPEN], "```\ngoto ten\n```"),
    ("unbalanced quotes", [], "```\nsearch_file 'def add\n```"),
    ("replace with one body", [], "```\nreplace calc/ops.py <<'OLD'\na - b\nOLD\n```"),
    ("replace empty old text", [], "```\nreplace calc/ops.py <<'OLD' <<'NEW'\nOLD\nx\nNEW\n```"),
    ("submit with arguments", [], "```\nsubmit now please\n```"),
    ("scroll with arguments", [OPEN], "```\nscroll_down 5\n```"),
    ("tool call plus a second command", [], "```\nopen calc/ops.py\nls\n```"),
]


@pytest.mark.parametrize("name, before, bad", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_output_is_a_masked_format_error_turn(name, before, bad, toy, tokenizer):
    instance, box = toy
    policy = ReplayPolicy(tokenizer, [*before, bad])
    traj = run_episode(instance, box, policy, AgentConfig(max_format_errors=2))
    bad_turn = len(before)
    assert traj.termination == "submitted" and traj.format_errors == 1, traj.messages[-3:]
    # messages: system, issue, then (reply, observation) pairs; the bad turn's observation:
    assert traj.messages[3 + 2 * bad_turn]["content"].startswith("Format error:")
    starts = traj.turn_starts + [len(traj.token_ids)]
    bad_mask = traj.loss_mask[starts[bad_turn]:starts[bad_turn + 1]]
    assert set(bad_mask) == {0}                       # the whole malformed turn is masked
    final = traj.loss_mask[starts[-2]:]               # the submit turn: reply ids + <|im_end|>
    assert set(final) == {1}


def test_a_100k_char_reply_cut_by_length_is_a_format_error(toy, tokenizer):
    instance, box = toy
    policy = ReplayPolicy(tokenizer, ["```bash\n" + "echo x; " * 12_500])
    traj = run_episode(instance, box, policy, AgentConfig(max_new_tokens=64, max_format_errors=2))
    assert (traj.termination, traj.format_errors) == ("submitted", 1)
    first = traj.token_ids[traj.turn_starts[0]:traj.turn_starts[1]]
    # 64 sampled ids (mask 0), then the appended <|im_end|> (mask 0), then the observation delta
    assert first[64] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert set(traj.loss_mask[traj.turn_starts[0]:traj.turn_starts[1]]) == {0}


def test_consecutive_format_errors_end_the_episode(toy, tokenizer):
    instance, box = toy
    traj = run_episode(instance, box, ReplayPolicy(tokenizer, ["no block"] * 5),
                       AgentConfig(max_format_errors=3))
    assert (traj.termination, traj.format_errors, traj.turns) == ("format_errors", 3, 3)
    assert sum(traj.loss_mask) == 0 and traj.patch == ""


def test_a_good_turn_resets_the_format_error_count(toy, tokenizer):
    instance, box = toy
    replies = ["no block", "no block", "```\nls\n```", "no block", "no block"]
    traj = run_episode(instance, box, ReplayPolicy(tokenizer, replies), AgentConfig(max_format_errors=3))
    assert (traj.termination, traj.format_errors) == ("submitted", 4)
