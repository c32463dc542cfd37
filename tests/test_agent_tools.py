"""SWE-agent and bash tools against the real local sandbox on a toy repository."""

from __future__ import annotations

import pytest

from agent.actions import FormatError, Submitted, parse_action
from agent.loop import truncate
from agent.tools import make_tools
from swe_rlvr.config import AgentConfig
from test_agent_support import BUGGY, toy  # noqa: F401  (fixture)


def run(tools, command: str) -> str:
    return tools.run(parse_action(f"```\n{command}\n```", tools.specs))


@pytest.fixture
def tools(toy):
    _instance, box = toy
    return make_tools(box, AgentConfig(window=4))


def test_open_shows_a_numbered_window_and_scrolls(tools):
    out = run(tools, "open calc/ops.py 6")
    # window 4 centred on line 6: top = 6 - 2 = 4, lines 4..7 of 10
    assert out.splitlines() == ["[File: calc/ops.py (10 lines total)]", "(3 more lines above)",
                                "4:def add(a, b):", '5:    """Return a + b."""', "6:    return a - b",
                                "7:", "(3 more lines below)"]
    # down by 4 from top 4 would start at 8; the last full window starts at 7
    assert run(tools, "scroll_down").splitlines()[1:3] == ["(6 more lines above)", "7:"]
    assert run(tools, "scroll_up").splitlines()[2].startswith("3:")
    assert run(tools, "goto 1").splitlines()[1] == '1:"""Tiny arithmetic helpers."""'


def test_edit_replaces_inserts_and_deletes_lines(tools, toy):
    _instance, box = toy
    run(tools, "open calc/ops.py")
    out = run(tools, "edit 6:6 <<'EOF'\n    return a + b\nEOF")
    assert out.startswith("Edited.") and "6:    return a + b" in out
    run(tools, "edit 1:0 <<'EOF'\n# header\nEOF")          # END = START-1: insert before line 1
    run(tools, "edit 2:4 <<'EOF'\nEOF")                   # empty body: delete lines 2..4
    lines = box.read_file("calc/ops.py").splitlines()
    assert lines[:3] == ["# header", "def add(a, b):", '    """Return a + b."""']
    assert box.read_file("calc/ops.py").endswith("return a * b\n")


def test_edit_range_is_checked_against_the_file(tools):
    run(tools, "open calc/ops.py")
    with pytest.raises(FormatError, match="has 10 lines"):
        run(tools, "edit 11:12 <<'EOF'\nx\nEOF")
    assert run(tools, "edit 11:10 <<'EOF'\n# end\nEOF").startswith("Edited.")  # append at the end


def test_replace_needs_exactly_one_match(tools, toy):
    _instance, box = toy
    assert "occurs 2 times" in run(tools, "replace calc/ops.py <<'OLD' <<'NEW'\nreturn a\nOLD\nx\nNEW")
    assert "occurs 0 times" in run(tools, "replace calc/ops.py <<'OLD' <<'NEW'\nnope\nOLD\nx\nNEW")
    out = run(tools, "replace calc/ops.py <<'OLD' <<'NEW'\n    return a - b\nOLD\n    return a + b\nNEW")
    assert out.startswith("Replaced.") and "6:    return a + b" in out
    assert box.read_file("calc/ops.py") == BUGGY.replace("a - b", "a + b")


def test_create_makes_folders_refuses_existing_files_and_opens(tools, toy):
    _instance, box = toy
    out = run(tools, "create pkg/new/mod.py <<'EOF'\nX = 1\nEOF")
    assert out.splitlines()[:2] == ["[File: pkg/new/mod.py (1 lines total)]", "1:X = 1"]
    assert box.read_file("pkg/new/mod.py") == "X = 1\n"
    assert "already exists" in run(tools, "create calc/ops.py")
    assert "(the file is empty)" in run(tools, "create empty.txt")
    assert "new file mode" in box.diff()


def test_search_file_and_missing_files(tools):
    out = run(tools, "search_file 'return a' calc/ops.py")
    assert out.splitlines() == ['2 matches for "return a" in calc/ops.py:', "Line 6:     return a - b",
                                "Line 10:     return a * b"]
    assert run(tools, "open nope.py").startswith("Cannot open nope.py")
    assert run(tools, "goto 3") == "No file is open. Use `open FILE` first."
    assert run(tools, "search_file x") == "No file is open. Use `open FILE` first."


def test_shell_observation_has_output_and_exit_code(tools):
    assert run(tools, "echo hi; exit 3") == "hi\n[exit code 3]"
    assert run(tools, "true") == "(no output)\n[exit code 0]"
    assert run(tools, "python -c 'import calc.ops as o; print(o.add(2, 3))'").startswith("-1")


def test_unknown_tool_is_a_format_error_only_in_swe_agent_mode(toy):
    _instance, box = toy
    with pytest.raises(FormatError, match="Unknown tool"):
        run(make_tools(box, AgentConfig()), "find_file ops.py")
    bash = make_tools(box, AgentConfig(scaffold="bash"))
    assert "[exit code 127]" in run(bash, "find_file ops.py")
    assert "[exit code 127]" in run(bash, "open calc/ops.py")      # no viewer in bash mode
    with pytest.raises(Submitted):
        run(bash, "submit")


def test_unknown_scaffold_names_the_choices(toy):
    with pytest.raises(ValueError, match="choose one of: swe-agent, bash"):
        make_tools(toy[1], AgentConfig(scaffold="sweagent"))


def test_truncate_keeps_head_and_tail_with_a_marker():
    text = "a" * 50 + "b" * 50
    out = truncate(text, 20)
    # 10 chars of head, 10 of tail, 80 omitted
    assert out == "a" * 10 + "\n[... 80 characters omitted ...]\n" + "b" * 10
    assert truncate("short", 20) == "short"
