"""The exploring expert: its diff arithmetic on hand-made hunks, and its episodes through the real
loop, where every edit must quote text that an earlier command of the same episode printed."""

from __future__ import annotations

import json

import pytest

from agent.exploring import (
    changed_block,
    code_names,
    explore_script,
    one_line_fix,
    search_term,
    sed_escape,
    sed_script,
    substitution,
)
from swe_rlvr.config import AgentConfig, SandboxConfig
from swe_rlvr.patches import parse_patch

PATCH = """diff --git a/pkg/mod.py b/pkg/mod.py
index 1111111..2222222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -10,3 +10,4 @@ def scale(value):
 def scale(value):
-    return value * 2
+    factor = 3
+    return value * factor

"""


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
    assert search_term(_Issue(issue), parse_patch(PATCH)) == "scale"
    assert search_term(_Issue("render_all() is wrong"), parse_patch(PATCH)) == "render_all"
    assert search_term(_Issue("it is wrong"), parse_patch(PATCH)) == "scale"   # the hunk's def
    headless = parse_patch(PATCH.replace("@@ def scale(value):", "@@"))
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
                                   "        return self.lo <= x < self.hi", "contains",
                                   "def contains")
    (t1, c1), (t2, c2), (_, c3) = sed_script(issue)
    assert c1 == 'grep -n -A 25 "def contains" pkg/mod.py'
    assert t2 == "Line 21 is wrong: `x <=` should be `x <`."
    assert c2 == ("sed -i '21s|x <=|x <|' pkg/mod.py && "
                  "python -m pytest -q tests/test_mod.py 2>&1 | tail -3")
    assert c3 == "submit"
    meta = _Issue("it is wrong", ONE_LINE.replace("@@ class Range:", "@@"), {"function": "contains"})
    assert sed_script(meta)[0][1] == 'grep -n -A 25 "def contains" pkg/mod.py'


WORDS = """diff --git a/pkg/words.py b/pkg/words.py
--- a/pkg/words.py
+++ b/pkg/words.py
@@ -3,3 +3,3 @@ import re

-TRUE_WORDS = {"1", "yes"}
+TRUE_WORDS = {"1", "yes", "on"}
 FALSE_WORDS = {"0", "no"}
"""
VERSION = """diff --git a/pkg/version.py b/pkg/version.py
--- a/pkg/version.py
+++ b/pkg/version.py
@@ -5,3 +5,3 @@ import re
 _VERSION = re.compile(
-    r"^(\\d+)"
+    r"^v?(\\d+)"
     r"$")
"""


def test_sed_script_reads_the_top_level_definition_of_a_line_outside_functions():
    """iniconf-1 (`TRUE_WORDS = {...}`) and semverkit-2 (a pattern line of `_VERSION =
    re.compile(...)`) fix a line outside any function. The sed style used to take only fixes
    inside a function and sent these two to the explore script, whose five turns overrun the
    4-turn budget of the ladder and quickstart configs: the expert dropped them on every run.
    Now it greps the top-level statement that holds the line."""
    # line 4: the hunk starts at the blank line 3
    assert one_line_fix(_Issue("`getbool('on')` is False", WORDS)) == (
        "pkg/words.py", 4, 'TRUE_WORDS = {"1", "yes"}', 'TRUE_WORDS = {"1", "yes", "on"}',
        "TRUE_WORDS", "^TRUE_WORDS =")
    (_, read), (_, edit), (_, last) = sed_script(_Issue("`getbool('on')` is False", WORDS))
    assert read == 'grep -n -A 25 "^TRUE_WORDS =" pkg/words.py' and last == "submit"
    assert edit.startswith("sed -i '4s|yes|yes\", \"on|' pkg/words.py && ")  # whole tokens
    # line 6 continues the assignment that starts at line 5
    fix = one_line_fix(_Issue("`parse('v1')` fails", VERSION))
    assert (fix.line, fix.symbol, fix.anchor) == (6, "_VERSION", "^_VERSION =")
    klass = _Issue("`Box.SIZE` is 3", "--- a/b.py\n+++ b/b.py\n@@ -1,2 +1,2 @@\n class Box:\n"
                   "-    SIZE = 3\n+    SIZE = 4\n")
    assert sed_script(klass)[0][1] == 'grep -n -A 25 "class Box" b.py'
    imports = _Issue("x", "--- a/c.py\n+++ b/c.py\n@@ -1 +1 @@\n-import os\n+import sys\n")
    assert one_line_fix(imports) is None                    # no definition to read: explore


def test_sed_quotes_a_single_quote_for_the_shell():
    patch = ("--- a/q.py\n+++ b/q.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 'a'\n"
             "+    return \"a\"\n")
    edit = sed_script(_Issue("`f()`", patch))[1][1]
    # the pattern 'a' becomes '\'' a '\'' inside the single-quoted sed program
    assert edit.startswith("sed -i '2s|'\\''a'\\''|\"a\"|' q.py && ")


def test_every_easy_train_instance_gets_a_three_turn_sed_script():
    """The ladder gives the sed expert 4 turns; the explore fallback needs 5."""
    from swe_rlvr.builtin import load_builtin
    easy = [i for i in load_builtin("train") if i.difficulty == "easy"]
    assert easy and [i.instance_id for i in easy if len(sed_script(i)) != 3] == []


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


BUDGETS = {"sed": AgentConfig(scaffold="bash", max_turns=4),      # configs/ladder.yaml
           "explore": AgentConfig(scaffold="bash", max_turns=6),
           "splice": AgentConfig()}
"""Each expert style with the agent config it is run under: the sed style with the 4 turns that
the ladder and quickstart configs give it."""


def expert_run(root, model_dir, style: str, keep=lambda instance: True) -> tuple[list, list]:
    """(train instances that `keep` picks, the resolved expert episodes of `style` on them)."""
    from agent.expert import expert_trajectories
    from swe_rlvr.builtin import load_builtin
    train = [i for i in load_builtin("train") if keep(i)]
    return train, expert_trajectories(
        train, model_dir, BUDGETS[style],
        SandboxConfig(workdir=str(root / "work"), env_cache=str(root / "envs")), root / "repos",
        workers=2, style=style)


@pytest.fixture(scope="module")
def explored(tmp_path_factory, tiny_model_dir):
    return expert_run(tmp_path_factory.mktemp("explore"), tiny_model_dir, "explore", lambda i:
                      i.instance_id in ("swe-rlvr__iniconf-4", "swe-rlvr__ledger-2"))[1]


DROPPED = ("swe-rlvr__iniconf-1", "swe-rlvr__semverkit-2", "swe-rlvr__texttable-m024")


@pytest.mark.e2e
def test_sed_expert_resolves_the_instances_it_used_to_drop(tmp_path, tiny_model_dir):
    """iniconf-1 and semverkit-2 fix a line outside any function (see above). texttable-m024's
    issue quotes `e` + U+0301, which the tiny Qwen2 tokenizer's NFC normaliser turns into `é`:
    the scripted policy did not find the issue in its own decoded prompt, and the episode ended
    in an error before its first turn."""
    _, episodes = expert_run(tmp_path, tiny_model_dir, "sed", lambda i: i.instance_id in DROPPED)
    assert sorted(t.instance_id for t in episodes) == sorted(DROPPED)
    assert all(t.termination == "submitted" and t.turns == 3 for t in episodes)


KNOWN_DROPS = {"explore": ["swe-rlvr__ledger-m009", "swe-rlvr__ledger-m022"]}
"""The explore style's `str.replace(old, new, 1)` edits an identical line earlier in the file
there (in m022 `__add__`'s return, where `__sub__`'s is wrong): its script sees only the hunk."""


@pytest.mark.slow
@pytest.mark.parametrize("style", BUDGETS)
def test_every_easy_train_instance_gives_a_resolved_expert_episode(style, tmp_path, tiny_model_dir):
    """The warm-up demonstrates a share of the easy train split; an instance its expert cannot
    resolve is silently missing from every run (5 to 8 minutes a style on 2 cores)."""
    train, episodes = expert_run(tmp_path, tiny_model_dir, style, lambda i: i.difficulty == "easy")
    assert len(train) > 100
    missing = sorted({i.instance_id for i in train} - {t.instance_id for t in episodes})
    assert missing == KNOWN_DROPS.get(style, [])


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
