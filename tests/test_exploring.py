"""The exploring expert: its diff arithmetic on hand-made hunks, and its episodes through the real
loop, where every edit must quote text that an earlier command of the same episode printed."""

from __future__ import annotations

import json

import pytest

from agent.exploring import (changed_block, code_names, explore_script, one_line_fix, parse_diff,
                             search_term, sed_escape, sed_script, substitution)
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
    """The fields of an Instance that the scripts read."""

    def __init__(self, text: str, patch: str = PATCH, meta: dict | None = None,
                 tests: tuple[str, ...] = ("tests/test_mod.py",)):
        self.problem_statement, self.patch, self._meta, self._tests = text, patch, meta or {}, tests

    def meta(self) -> dict:
        return self._meta

    def test_files(self) -> tuple[str, ...]:
        return self._tests


ONE_LINE = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -20,3 +20,3 @@ class Range:
     def contains(self, x):
-        return self.lo <= x <= self.hi
+        return self.lo <= x < self.hi
 
"""


@pytest.mark.parametrize("old, new, pattern, replacement", [
    ("    return a - b", "    return a + b", "-", "+"),                 # one operator token
    ("    if n <= 0:", "    if n < 0:", "<=", "<"),
    ("    return True", "    return False", "True", "False"),
    ("    if not ok:", "    if ok:", "not ", ""),                      # a dropped `not`
    # "1" alone occurs three times in the line; widened left to "+ 1", which occurs once
    ("    x = f(1) + 1  # 1", "    x = f(1) + 2  # 1", "+ 1", "+ 2"),
    # "1" twice; left "+ 1" still twice ("(1 + 1" and ", 1 + 1"): then right, "+ 1)"
    ("    g(1 + 1, 1 + 1)", "    g(1 + 1, 1 + 2)", "+ 1)", "+ 2)"),
    # the differing "<=" occurs twice: widened to "x <=", which occurs once
    ("        return self.lo <= x <= self.hi", "        return self.lo <= x < self.hi",
     "x <=", "x <"),
])
def test_substitution_is_the_smallest_unique_run_of_tokens(old, new, pattern, replacement):
    assert substitution(old, new) == (pattern, replacement)
    assert old.count(pattern) == 1 and old.replace(pattern, replacement) == new


def test_sed_escape_quotes_what_sed_would_read_as_syntax():
    assert sed_escape("x * 2") == "x \\* 2" and sed_escape("a[0].b") == "a\\[0\\]\\.b"
    assert sed_escape("a|b") == "a\\|b"                              # the s||| delimiter
    assert sed_escape("x & y", replacement=True) == "x \\& y"        # & is the match in sed
    assert sed_escape("x * y", replacement=True) == "x * y"            # literal in a replacement


def test_sed_script_reads_the_function_then_substitutes_on_its_line():
    issue = _Issue("`Range.contains()` is wrong", ONE_LINE)
    # the changed line is the hunk's second old line: 20 + 1
    assert one_line_fix(issue) == ("pkg/mod.py", 21, "        return self.lo <= x <= self.hi",
                                   "        return self.lo <= x < self.hi", "contains")
    (t1, c1), (t2, c2), (_, c3) = sed_script(issue)
    assert c1 == 'grep -n -A 25 "def contains" pkg/mod.py'
    assert t2 == "Line 21 is wrong: `x <=` should be `x <`."
    assert c2 == ("sed -i '21s|x <=|x <|' pkg/mod.py && "
                  "python -m pytest -q tests/test_mod.py 2>&1 | tail -3")
    assert c3 == "submit"
    meta = _Issue("it is wrong", ONE_LINE.replace("@@ class Range:", "@@"), {"function": "contains"})
    assert sed_script(meta)[0][1] == 'grep -n -A 25 "def contains" pkg/mod.py'


def test_sed_script_falls_back_to_explore_for_other_fixes():
    issue = _Issue("`scale()` is off", PATCH)                           # two lines for one
    assert one_line_fix(issue) is None and sed_script(issue) == explore_script(issue)


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
    with pytest.raises(ValueError, match="choose one of: splice, explore, sed"):
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
