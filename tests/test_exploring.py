"""The exploring expert: its diff arithmetic on hand-made hunks, and its episodes through the real
loop, where every edit must quote text that an earlier command of the same episode printed."""

from __future__ import annotations

import json

import pytest

from agent.exploring import changed_block, code_names, explore_script, parse_diff, search_term
from swe_rlvr.config import AgentConfig, SandboxConfig

PATCH = """diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -10,4 +10,5 @@ def scale(value):
 def scale(value):
-    return value * 2
+    factor = 3
+    return value * factor
 
"""


def test_parse_diff_keeps_both_sides_and_the_hunk_header():
    (f,) = parse_diff(PATCH)
    (h,) = f.hunks
    assert (f.path, h.old_start, h.header) == ("pkg/mod.py", 10, "def scale(value):")
    assert h.old == ["def scale(value):", "    return value * 2", ""]
    assert h.new == ["def scale(value):", "    factor = 3", "    return value * factor", ""]


def test_changed_block_drops_common_lines_and_anchors_insertions():
    # a replacement: the common "a" and "c" go, the changed line stays (offset 1 in the hunk)
    assert changed_block(["a", "b", "c"], ["a", "B", "c"]) == ("b\n", "B\n", 1)
    # an insertion after "a": nothing old is left, so "a" anchors it
    assert changed_block(["a", "c"], ["a", "b", "c"]) == ("a\n", "a\nb\n", 0)
    # an insertion at the top of the hunk: the line below anchors it
    assert changed_block(["c"], ["b", "c"]) == ("c\n", "b\nc\n", 0)


def test_search_term_prefers_a_code_name_that_the_fix_touches():
    issue = "Calling `scale()` on a Report gives twice the value; see render_all too."
    assert code_names(issue) == ["scale", "render_all"]          # "Report" and words are not code
    assert search_term(_Issue(issue), parse_diff(PATCH)) == "scale"
    assert search_term(_Issue("render_all() is wrong"), parse_diff(PATCH)) == "render_all"
    assert search_term(_Issue("it is wrong"), parse_diff(PATCH)) == "scale"   # the hunk's def
    headless = parse_diff(PATCH.replace("@@ def scale(value):", "@@"))
    assert search_term(_Issue("it is wrong"), headless) == "mod"              # the file's stem


class _Issue:
    """The two fields of an Instance that the script reads."""

    def __init__(self, text: str, patch: str = PATCH):
        self.problem_statement, self.patch = text, patch


def test_script_reads_before_it_edits_and_tests_before_it_submits():
    steps = [command for _, command in explore_script(_Issue("`scale()` is off", PATCH))]
    assert steps[0].startswith("grep -rn 'scale'")
    assert steps[1] == "sed -n '8,14p' pkg/mod.py"                  # 2 lines of margin each side
    assert "text.replace('    return value * 2\\n', '    factor = 3\\n    return value * factor\\n', 1)" \
        in steps[2]
    assert steps[3].startswith("python -m pytest") and steps[4] == "submit"


def test_explore_refuses_the_swe_agent_scaffold():
    from agent.expert import make_expert
    with pytest.raises(ValueError, match="agent.scaffold=bash or orchestration.expert_style=splice"):
        make_expert("explore", None, [], "swe-agent")
    with pytest.raises(ValueError, match="choose one of: splice, explore"):
        make_expert("teacher", None, [], "bash")


@pytest.fixture(scope="module")
def explored(tmp_path_factory, tiny_model_dir):
    from agent.expert import expert_trajectories
    from swe_rlvr.builtin import load_builtin
    root = tmp_path_factory.mktemp("explore")
    train = [i for i in load_builtin("train") if i.instance_id in
             ("swe-rlvr__iniconf-4", "swe-rlvr__ledger-2")]
    return expert_trajectories(train, tiny_model_dir, AgentConfig(scaffold="bash", max_turns=6),
                               SandboxConfig(workdir=str(root / "work"), env_cache=str(root / "envs")),
                               root / "repos", workers=2, style="explore")


def test_explore_episodes_resolve_and_edit_only_what_they_printed(explored):
    assert sorted(t.instance_id for t in explored) == ["swe-rlvr__iniconf-4", "swe-rlvr__ledger-2"]
    for traj in explored:
        assert traj.termination == "submitted" and traj.turns == 5 and not traj.format_errors
        messages = json.loads(traj.to_row()["messages_json"])
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        observations = [m["content"] for m in messages if m["role"] == "user"][1:]
        assert "grep -rn" in replies[0] and "sed -n" in replies[1] and "text.replace(" in replies[2]
        old = replies[2].split("text.replace(", 1)[1].split(", ", 1)[0]
        first_old_line = eval(old).splitlines()[0]                   # the quoted old text
        assert first_old_line in observations[1], traj.instance_id   # ...printed by the sed -n
        assert "passed" in observations[3]                            # the project's tests ran
