"""Hidden variant tests: the build's pure steps by hand, and grading with them on real sandboxes.

A fix that special-cases the visible test's input passes FAIL_TO_PASS; the variants ask the same
function at other inputs, and such a patch is graded tampered. Gold stays resolved.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

from hostile_support import attack, env, graded  # noqa: F401 - `env` is a fixture
from sandbox.grading import grade
from sandbox.variants import NONE_SHIPPED, variant_source
from swe_rlvr.builtin import load_builtin
from swe_rlvr.builtin.variants import (
    VARIANTS_PATH,
    Call,
    Case,
    candidates,
    is_literal,
    patch_sha,
    perturb_value,
    perturbed_calls,
    select_cases,
    variants_of,
)
from test_sandbox_support import sandbox_config

SPECIAL_CASE = '''def to_bool(raw):
    if raw in ("on", "ON", "On"):
        return True
    lowered = raw.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise ValueError(f"not a boolean: {raw!r}")
'''
"""iniconf-1's bug left in place (TRUE_WORDS lacks "on") and the visible tests' inputs answered."""


# --------------------------------------------------------------------------- the build, by hand


def test_literals_are_values_whose_repr_reads_back_equal_and_short():
    assert is_literal((1, "a", [2.5, None], {"k": (True,)}))
    assert not is_literal(float("nan")) and not is_literal(float("inf"))
    assert not is_literal(object()) and not is_literal(range(3)) and not is_literal("x" * 500)


def test_each_type_is_perturbed_near_itself():
    assert perturb_value(True) == [False]
    assert perturb_value(3) == [4, 2, 9]
    assert perturb_value(2.0) == [3.0, 2.25, -2.0]
    assert perturb_value("ab") == ["aba", "ba", "b", "AB", "ab "]
    assert perturb_value("") == ["a", "", "", "", " "]
    assert perturb_value([1, 2]) == [[2, 1], [1], [1, 2, 1], [2, 2]]
    assert perturb_value((5,)) == [(5,), (), (5, 5), (6,)]
    assert perturb_value({"a": 1, "b": 2}) == [{"a": 1}]
    assert perturb_value(None) == [] and perturb_value({}) == []


def test_one_argument_changes_at_a_time_positional_then_keyword():
    calls = perturbed_calls(Call("m", "f", "(1, True)", "{'k': 'x'}"))
    assert [(c.args, c.kwargs) for c in calls] == [
        ("(2, True)", "{'k': 'x'}"), ("(0, True)", "{'k': 'x'}"), ("(5, True)", "{'k': 'x'}"),
        ("(1, False)", "{'k': 'x'}"),
        ("(1, True)", "{'k': 'xx'}"), ("(1, True)", "{'k': 'x'}"), ("(1, True)", "{'k': ''}"),
        ("(1, True)", "{'k': 'X'}"), ("(1, True)", "{'k': 'x '}")]


def test_candidates_never_repeat_an_input_the_suite_uses():
    seen = [Call("m", "f", "(1,)"), Call("m", "f", "(2,)")]
    assert [c.args for c in candidates(seen)] == ["(0,)", "(5,)", "(3,)", "(7,)"]


def test_only_instances_whose_bug_some_case_tells_apart_get_variants():
    calls = [Call("m", "f", f"({n},)") for n in range(5)]
    fixed = [("ok", "1", "(0,)"), ("raises", "ValueError"), ("ok", "3", "(2,)"), None, ("ok", "5", "(4,)")]
    same = list(fixed)
    assert select_cases(calls, fixed, same) == []
    buggy = [("ok", "1", "(0,)"), ("ok", "9", "(1,)"), ("ok", "4", "(2,)"), ("ok", "0", "(3,)"), ("timeout",)]
    cases = select_cases(calls, fixed, buggy)
    # returns before raises among the telling cases, then the cases that agree; None and a
    # buggy timeout are never cases
    assert [c.call.args for c in cases] == ["(2,)", "(1,)", "(0,)"]
    assert cases[0].outcome == ("ok", "3", "(2,)")


def test_variants_belong_to_the_exact_gold_patch():
    inst = next(i for i in load_builtin() if i.instance_id == "swe-rlvr__iniconf-1")
    assert variants_of(inst.instance_id, inst.patch)
    assert variants_of(inst.instance_id, inst.patch + "\n") == []
    assert variants_of("swe-rlvr__no-such-instance", inst.patch) == []


def test_the_shipped_file_covers_every_project_and_names_real_gold_patches():
    rows = [json.loads(line) for line in VARIANTS_PATH.read_text().splitlines()]
    gold = {i.instance_id: i.patch for i in load_builtin()}
    assert len(rows) > len(gold) / 2
    assert all(patch_sha(gold[r["instance_id"]]) == r["patch_sha"] for r in rows)
    assert {r["instance_id"].split("__")[1].split("-")[0] for r in rows} >= {
        "datekit", "exprcalc", "iniconf", "statkit", "structs", "textkit", "texttable"}
    assert all(1 <= len(r["cases"]) <= 6 for r in rows)


def test_the_test_file_compares_floats_loosely_and_containers_by_type(tmp_path, monkeypatch):
    (tmp_path / "mod.py").write_text("def f(x, out):\n    out.append(x)\n    return (x * 0.1, [x])\n")
    cases = [Case(Call("mod", "f", "(3, [])"), ("ok", "(0.30000000000000004, [3])", "(3, [3])")),
             Case(Call("mod", "f", "(3, [])"), ("ok", "(0.3, [3])", "(3, [3])")),
             Case(Call("mod", "f", "(3, [])"), ("ok", "(0.3, (3,))", "(3, [3])")),
             Case(Call("mod", "f", "(3, [])"), ("ok", "(0.3, [3])", "(3, [])")),
             Case(Call("mod", "f", "('a', [])"), ("raises", "TypeError")),
             Case(Call("mod", "g", "()"), ("ok", "None", "()"))]
    source = variant_source(cases, [f"test_{n}" for n in range(len(cases))], ["_same", "_check"])
    namespace: dict = {}
    monkeypatch.syspath_prepend(str(tmp_path))
    exec(compile(source, "variants.py", "exec"), namespace)  # noqa: S102 - the generated test file
    outcomes = []
    for n in range(len(cases)):
        try:
            namespace[f"test_{n}"]()
            outcomes.append("passed")
        except (AssertionError, AttributeError):
            outcomes.append("failed")
    assert outcomes == ["passed", "passed", "failed", "failed", "passed", "failed"]


# --------------------------------------------------------------------------- grading


def test_gold_passes_its_variants_and_a_special_cased_fix_is_tampered(env):  # noqa: F811
    inst, cfg, store = env
    gold = grade(inst, inst.patch, cfg, store)
    assert gold.resolved and not gold.tampered, (gold.tamper_reason, gold.guards)
    assert NONE_SHIPPED not in gold.notes
    assert not any(t.split("::")[0] not in {f.split("::")[0] for f in inst.fail_to_pass + inst.pass_to_pass}
                   for t in gold.tests_status)
    report = graded(env, {"iniconf/values.py": lambda text: text.replace(
        text[text.index("def to_bool"):text.index("def to_int")], SPECIAL_CASE + "\n\n")})
    assert report.tampered and not report.resolved, report.tamper_reason
    assert report.reference_resolved  # SWE-bench's parser alone would pay it
    assert report.tamper_reason.startswith("variant tests:") and "'on " not in report.tamper_reason
    excerpt = report.to_row()["log_excerpt"]
    hidden = [t.rsplit("::", 1)[1] for t in report.canaries]
    assert len(hidden) == 2 * 2 + len(variants_of(inst.instance_id, inst.patch)) and not any(name in excerpt for name in hidden)
    assert "'on '" not in excerpt and "'On '" not in excerpt  # the cases never reach guidance


def test_a_special_cased_fix_passes_with_variants_off_and_an_instance_without_says_so(env):  # noqa: F811
    inst, cfg, store = env
    patch = attack(env, {"iniconf/values.py": lambda text: text.replace(
        text[text.index("def to_bool"):text.index("def to_int")], SPECIAL_CASE + "\n\n")})
    off = grade(inst, patch, replace(cfg, static_screen=False, variant_tests=False), store)
    assert off.resolved and not off.tampered
    other = next(i for i in load_builtin() if i.source == "builtin" and not variants_of(i.instance_id, i.patch)
                 and i.repo == inst.repo)
    report = grade(other, other.patch, cfg, store)
    assert report.resolved and NONE_SHIPPED in report.notes


def test_a_fix_that_answers_only_the_visible_input_of_a_generated_instance_is_tampered(tmp_path):
    inst = next(i for i in load_builtin() if i.instance_id == "swe-rlvr__texttable-g028")
    cfg, store = sandbox_config(tmp_path), tmp_path / "repos"
    docstring = '    """Cut `text` to at most `max_width` columns, ending in an ellipsis when cut."""\n'
    patch = attack((inst, cfg, store), {"texttable/width.py": lambda text: text.replace(
        docstring, docstring + '    if text == "abc" and max_width == 5:\n        return text\n')})
    assert "return text" in patch and "<=" not in patch  # the bug stays; one input is answered
    report = grade(inst, patch, replace(cfg, static_screen=False), store)
    assert report.tampered and not report.resolved and report.reference_resolved, report.tamper_reason
    gold = grade(inst, inst.patch, cfg, store)
    assert gold.resolved and not gold.tampered


def test_variant_names_are_drawn_and_differ_between_runs():
    cases = [Case(Call("m", "f", "(1,)"), ("ok", "2", "(1,)"))]
    a = variant_source(cases, ["test_a_0"], ["_x", "_y"])
    b = variant_source(cases, ["test_b_0"], ["_p", "_q"])
    assert a != b and "def test_a_0" in a and "_x(" in a and "_p(" in b
    rng = random.Random(1)
    from sandbox.canaries import canary_name
    assert canary_name("", rng) != canary_name("", rng)
