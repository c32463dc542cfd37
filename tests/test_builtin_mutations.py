"""Generated built-in instances: single-token mutants that the projects' own tests detect.

Pure parts (the candidate enumeration, the one-line edit, the per-function choice, the split and
the bug-report template) are checked on tiny inputs with the expected values worked out below.
The shipped records are checked against the enumeration without running tests, and a sample of
them, one per project, tier and split, the way the grader will use them: materialise the repository,
check out the base commit, run the failing tests' files, apply the gold patch, run them again.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

from swe_rlvr.builtin import load_builtin, materialize, store
from swe_rlvr.builtin.mutations import (
    EASY,
    FIRST_PROJECTS,
    GENERATED,
    HOLDOUT_PROJECTS,
    Mutation,
    candidates,
    greppable,
    project_candidates,
    split_of,
    spread,
    tiers_of,
)
from swe_rlvr.builtin.operators import GROWN, OPERATORS
from swe_rlvr.builtin.outcomes import passed, run_pytest
from swe_rlvr.builtin.reports import failure_excerpt, statement
from swe_rlvr.builtin.repository import git

GENERATED_INSTANCES = load_builtin(kind="mutation")
TIERS = {tier.name: tier for tier in (EASY, GENERATED)}

SOURCE = '''\
LIMIT = 3


def clamp(x, flag=True):
    """Keep x under LIMIT."""
    if not flag and x >= LIMIT:
        return x - 1
    return x is None


class Box:
    def size(self):
        return self.items[0] + 0, f"{2 + 1}"
'''


def test_candidates_of_a_tiny_module():
    """Columns counted by hand:
    line 6  `    if not flag and x >= LIMIT:`  `not ` at 7..11, `and` at 16..19, `>=` at 22..24;
    line 7  `        return x - 1`             `-` at 17..18, `1` at 19..20 (-> 0 and -> 2);
    line 8  `    return x is None`             `is` at 13..15 (`None` is no small int);
    line 13 `        return self.items[0] + 0, f"{2 + 1}"`
            `0` at 26..27 (-> -1 and -> 1), `+` at 29..30, `0` at 31..32 (-> 1 only: after a
            `+`, -1 would read `+ -1`); nothing inside the f-string.
    Not mutated: `LIMIT = 3` (module level), `flag=True` (a default, not the body), the docstring.
    """
    found = [(m.line, m.col, m.end_col, m.old, m.new, m.operator, m.qualname, m.def_line)
             for m in candidates(SOURCE, "pkg/mod.py")]
    assert found == [
        (6, 7, 11, "not ", "", "not", "clamp", 4),
        (6, 16, 19, "and", "or", "bool", "clamp", 4),
        (6, 22, 24, ">=", ">", "cmp", "clamp", 4),
        (7, 17, 18, "-", "+", "arith", "clamp", 4),
        (7, 19, 20, "1", "0", "const", "clamp", 4),
        (7, 19, 20, "1", "2", "const", "clamp", 4),
        (8, 13, 15, "is", "is not", "cmp", "clamp", 4),
        (13, 26, 27, "0", "-1", "const", "Box.size", 12),
        (13, 26, 27, "0", "1", "const", "Box.size", 12),
        (13, 29, 30, "+", "-", "arith", "Box.size", 12),
        (13, 31, 32, "0", "1", "const", "Box.size", 12),
    ]
    assert {m.function for m in candidates(SOURCE, "pkg/mod.py")} == {"clamp", "size"}


def test_each_edit_changes_exactly_one_line_and_still_parses():
    clean = SOURCE.splitlines(keepends=True)
    for m in candidates(SOURCE, "pkg/mod.py"):
        mutated = m.apply(SOURCE).splitlines(keepends=True)
        changed = [n for n, (a, b) in enumerate(zip(clean, mutated), start=1) if a != b]
        assert len(mutated) == len(clean) and changed == [m.line], m
        line = clean[m.line - 1]
        assert mutated[m.line - 1] == line[:m.col] + m.new + line[m.end_col:]
        assert ast.dump(ast.parse(m.apply(SOURCE))) != ast.dump(ast.parse(SOURCE)), m
    dropped_not = candidates(SOURCE, "pkg/mod.py")[0].apply(SOURCE)
    assert dropped_not.splitlines()[5] == "    if flag and x >= LIMIT:"


def test_apply_refuses_a_changed_source():
    m = candidates(SOURCE, "pkg/mod.py")[0]
    with pytest.raises(ValueError, match="the source changed"):
        m.apply(SOURCE.replace("if not flag", "if flag"))


GROWN_SOURCE = '''\
def pick(xs, n):
    if len(xs) > n:
        return max(xs[:n])
    for x in xs:
        if x is None:
            break
    return divmod(n, 2)


def same(a):
    return pow(a, a), round(a, ndigits=2), a[1:2]


def count(a):
    return range(len(a))
'''


def test_grown_operators_of_a_tiny_module():
    """Columns counted by hand:
    line 2 `    if len(xs) > n:`        `>` at 15..16 -> `<` (flip); `len(xs)` has one argument.
    line 3 `        return max(xs[:n])`  `max` at 15..18 -> `min` (twin); the slice `:n` at 22..24
                                         -> `n:` (slice); its bound `n` at 23..24 -> `n + 1`
                                         and `n - 1` (bound; `+` sorts before `-`).
    line 6 `            break`           at 12..17 -> `continue` (loop).
    line 7 `    return divmod(n, 2)`     `n, 2` at 18..22 -> `2, n` (swap).
    line 15 `    return range(len(a))`   the stop `len(a)` at 17..23 -> `len(a) + 1`, `len(a) - 1`.
    Not mutated by these operators: `is` (only the first generation's `cmp` swaps it),
    `pow(a, a)` (swapping equal arguments changes nothing), `round(a, ndigits=2)` (a keyword),
    `a[1:2]` (a two-sided slice with literal bounds, which `const` moves).
    """
    found = [(m.line, m.col, m.end_col, m.old, m.new, m.operator)
             for m in candidates(GROWN_SOURCE, "pkg/mod.py", GROWN)]
    assert found == [
        (2, 15, 16, ">", "<", "flip"),
        (3, 15, 18, "max", "min", "twin"),
        (3, 22, 24, ":n", "n:", "slice"),
        (3, 23, 24, "n", "n + 1", "bound"),
        (3, 23, 24, "n", "n - 1", "bound"),
        (6, 12, 17, "break", "continue", "loop"),
        (7, 18, 22, "n, 2", "2, n", "swap"),
        (15, 17, 23, "len(a)", "len(a) + 1", "bound"),
        (15, 17, 23, "len(a)", "len(a) - 1", "bound"),
    ]
    mutated = [m.apply(GROWN_SOURCE).splitlines()[m.line - 1]
               for m in candidates(GROWN_SOURCE, "pkg/mod.py", GROWN)]
    assert mutated == ["    if len(xs) < n:", "        return min(xs[:n])",
                       "        return max(xs[n:])", "        return max(xs[:n + 1])",
                       "        return max(xs[:n - 1])", "            continue",
                       "    return divmod(2, n)", "    return range(len(a) + 1)",
                       "    return range(len(a) - 1)"]
    for m in candidates(GROWN_SOURCE, "pkg/mod.py", GROWN):
        ast.parse(m.apply(GROWN_SOURCE))


def test_every_operator_is_named_once_and_the_first_generation_is_unchanged():
    assert set(OPERATORS) == set(EASY.operators) | set(GROWN) == set(GENERATED.operators)
    assert EASY.operators == ("cmp", "arith", "bool", "const", "not")
    assert candidates(SOURCE, "pkg/mod.py") == candidates(SOURCE, "pkg/mod.py", EASY.operators)


def test_first_projects_have_both_tiers_and_the_others_only_generated():
    assert tiers_of("ledger") == (EASY, GENERATED)
    assert tiers_of("statkit") == tiers_of("datekit") == (GENERATED,)
    assert set(FIRST_PROJECTS) == {"iniconf", "ledger", "semverkit", "texttable"}


def test_greppable_drops_repeated_names_and_bugs_far_below_the_def():
    # `size` is defined twice, so `grep "def size"` is ambiguous; `far`'s `==` sits on line 31,
    # 27 lines below its `def` on line 4 (more than 25); `near`'s `==` is 25 lines below: kept.
    source = ("class A:\n    def size(self):\n        return 1 == 1\n"
              "def far(x):\n" + "    pass\n" * 26 + "    return x == 1\n"
              "def near(x):\n" + "    pass\n" * 24 + "    return x == 1\n"
              "class B:\n    def size(self):\n        return 2\n")
    kept = {(m.function, m.line, m.operator) for m in greppable(candidates(source, "f.py"), source)}
    # near: def on line 32, `return x == 1` on line 57 = 32 + 25
    assert kept == {("near", 57, "cmp"), ("near", 57, "const")}


def test_spread_keeps_first_and_last_per_function():
    def mut(function: str, line: int) -> Mutation:
        return Mutation("f.py", line, 0, 1, "1", "2", "const", function, function, 1)
    many = [mut("a", n) for n in (9, 3, 5, 7, 4)] + [mut("b", 2)]
    # k=2: a's sorted lines 3,4,5,7,9 -> indices round(0*4/1)=0 and round(1*4/1)=4 -> lines 3
    # and 9; b has one. The result is in position order (same file: by line).
    assert [(m.function, m.line) for m in spread(many, k=2)] == [("b", 2), ("a", 3), ("a", 9)]
    # k=3: indices round(0*4/2)=0, round(1*4/2)=2, round(2*4/2)=4 -> lines 3, 5, 9
    assert [(m.function, m.line) for m in spread(many, k=3)] == [("b", 2), ("a", 3), ("a", 5),
                                                                  ("a", 9)]
    # k=4 (MAX_PER_FUNCTION): round(0)=0, round(4/3)=1, round(8/3)=3, round(4)=4 -> 3, 4, 7, 9
    assert [(m.function, m.line) for m in spread(many)] == [("b", 2), ("a", 3), ("a", 4),
                                                             ("a", 7), ("a", 9)]


def test_spread_with_fewer_than_k():
    def mut(line: int) -> Mutation:
        return Mutation("f.py", line, 0, 1, "1", "2", "const", "a", "a", 1)
    three = [mut(n) for n in (3, 5, 7)]
    # the easy tier's rule, k=4, n=3: indices round(0)=0, round(2/3)=1, round(4/3)=1 -> lines 3, 5
    assert [m.line for m in spread(three, k=4)] == [3, 5]
    # the generated tier keeps all of a function's mutants when they are no more than k
    assert [m.line for m in spread(three, k=6, whole_when_fewer=True)] == [3, 5, 7]
    assert [m.line for m in spread(three, k=2, whole_when_fewer=True)] == [3, 7]


def test_split_is_a_stable_hash_of_the_function():
    # sha256("iniconf/iniconf/values.py/to_bool") = 0ceec06e...2ed855c; the digest mod 4 is its
    # last hex digit mod 4 (16 is a multiple of 4): 0xc = 12 -> 0 -> test.
    assert split_of("iniconf", "iniconf/values.py", "to_bool") == "test"
    # sha256("semverkit/semverkit/ranges.py/satisfies") ends in ...277b2a: 0xa = 10 -> 2 -> train.
    assert split_of("semverkit", "semverkit/ranges.py", "satisfies") == "train"
    # a held-out project is test whatever the hash says
    assert HOLDOUT_PROJECTS == ("datekit",)
    assert split_of("datekit", "datekit/calendar.py", "is_leap") == "test"


def test_generated_split_is_by_function():
    splits = defaultdict(set)
    for inst in GENERATED_INSTANCES:
        meta = inst.meta()
        key = (meta["project"], meta["file"], meta["function"])
        splits[key].add(inst.split)
        # dev: whole train functions carved out afterwards (swe_rlvr.builtin.splits)
        expected = split_of(*key)
        assert inst.split == expected or (inst.split, expected) == ("dev", "train"), inst.instance_id
    assert all(len(s) == 1 for s in splits.values())
    hashed = [s for (project, _, _), s in splits.items() if project not in HOLDOUT_PROJECTS]
    test_share = sum(s == {"test"} for s in hashed) / len(hashed)
    assert 0.1 <= test_share <= 0.4, test_share  # a quarter of the buckets; ~200 functions


def test_generated_records_match_the_enumeration():
    """Without running tests: each record's bug is an enumerated candidate of its tier's
    operators, its gold patch swaps exactly that line back, no two records share a bug, and at
    most the tier's max_per_function (easy 4, generated 6) come from one function."""
    by_key = {}
    for project in sorted({i.meta()["project"] for i in GENERATED_INSTANCES}):
        for m in project_candidates(store.PROJECTS_DIR / project, tuple(OPERATORS)):
            by_key.setdefault((project, m.file, m.line, m.operator), []).append(m)
    per_function = defaultdict(int)
    for inst in GENERATED_INSTANCES:
        meta = inst.meta()
        tier = TIERS[inst.difficulty]
        assert tier in tiers_of(meta["project"]) and meta["operator"] in tier.operators
        assert meta["kind"] == "mutation" and inst.test_patch == ""
        assert re.fullmatch(rf"swe-rlvr__{meta['project']}-{tier.prefix}\d{{3}}", inst.instance_id)
        clean = (store.PROJECTS_DIR / meta["project"] / meta["file"]).read_text()
        removed, added = _changed_lines(inst.patch)
        options = by_key[meta["project"], meta["file"], meta["line"], meta["operator"]]
        assert any(m.apply(clean).splitlines()[m.line - 1] == removed and m.function ==
                   meta["function"] for m in options), inst.instance_id
        assert clean.splitlines()[meta["line"] - 1] == added
        assert 1 <= len(inst.fail_to_pass) <= 8
        per_function[tier.name, meta["project"], meta["file"], meta["function"]] += 1
    assert all(n <= TIERS[key[0]].max_per_function for key, n in per_function.items())
    assert len({i.patch for i in GENERATED_INSTANCES}) == len(GENERATED_INSTANCES)


def _changed_lines(patch: str) -> tuple[str, str]:
    lines = patch.splitlines()
    removed = [ln[1:] for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    added = [ln[1:] for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    assert len(removed) == len(added) == 1, patch
    return removed[0], added[0]


def _sample():
    """One generated instance per (project, tier, split), the middle one of each."""
    groups = defaultdict(list)
    for inst in GENERATED_INSTANCES:
        groups[inst.meta()["project"], inst.difficulty, inst.split].append(inst)
    return [groups[key][len(groups[key]) // 2] for key in sorted(groups)]


@pytest.fixture
def repo_store(builtin_repo_store) -> Path:
    return builtin_repo_store


@pytest.mark.e2e
@pytest.mark.parametrize("instance", _sample(), ids=lambda i: i.instance_id)
def test_sampled_instance_fails_at_base_and_passes_with_gold(instance, repo_store, tmp_path):
    work = tmp_path / "work"
    origin = materialize(instance.repo, repo_store)
    git(tmp_path, "clone", "-q", "--no-checkout", str(origin), str(work))
    git(work, "checkout", "-q", instance.base_commit)
    files = sorted({t.split("::", 1)[0] for t in instance.fail_to_pass})
    listed = set(instance.fail_to_pass) | set(instance.pass_to_pass)
    before = run_pytest(work, files)
    assert set(before) == listed and passed(before) == set(instance.pass_to_pass)
    git(work, "apply", "-", stdin=instance.patch)
    after = run_pytest(work, files)
    assert set(after) == listed and passed(after) == listed
    added = _changed_lines(instance.patch)[1].strip()
    assert added not in instance.problem_statement
    assert len(instance.problem_statement) < 700 and "/tmp" not in instance.problem_statement


LOG = """\
FF.                                                                      [100%]
=================================== FAILURES ===================================
_____________________________ test_total[case1] ______________________________
tests/test_calc.py:12: in test_total
    assert total([1, 2]) == 3
           ^^^^^^^^^^^^^
calc/core.py:5: in total
    return sum(xs) + 1
E   AssertionError: assert 4 == 3
E    +  where 4 = total([1, 2])
__________________________________ test_open __________________________________
tests/test_io.py:7: in test_open
    load("/tmp/swe-rlvr-x/scratch0/calc/data.txt")
E   OSError: <Reader object at 0x7f3a2b1c> cannot read /tmp/swe-rlvr-x/scratch0/calc/data.txt
=========================== short test summary info ============================
FAILED tests/test_calc.py::test_total[case1] - AssertionError: assert 4 == 3
FAILED tests/test_io.py::test_open - OSError: <Reader object at 0x7f3a2b1c> ...
2 failed, 1 passed in 0.05s
"""


def test_statement_quotes_the_first_failing_test_and_not_the_buggy_line():
    """The first failure in sorted order is test_total[case1]; its report keeps the test's line and
    the E lines, and drops the `^^^` markers and the frame in calc/core.py (the buggy line)."""
    text = statement("total", "calc/core.py",
                     ["tests/test_io.py::test_open", "tests/test_calc.py::test_total[case1]"], LOG)
    assert text == (
        "`total()` in calc/core.py gives wrong results\n"
        "\n"
        "Since the last change to calc/core.py, 2 tests fail, for example:\n"
        "\n"
        "tests/test_calc.py::test_total[case1]\n"
        "    assert total([1, 2]) == 3\n"
        "E   AssertionError: assert 4 == 3\n"
        "E    +  where 4 = total([1, 2])\n")


def test_excerpt_hides_the_scratch_path_and_object_addresses():
    assert failure_excerpt(LOG, "tests/test_io.py::test_open", "/tmp/swe-rlvr-x/scratch0/calc") == [
        '    load("data.txt")',
        "E   OSError: <Reader object at 0x...> cannot read data.txt"]
    one = statement("Box.load", "calc/io.py", ["tests/test_io.py::test_open"], LOG)
    assert one.startswith("`Box.load()` in calc/io.py gives wrong results\n\n"
                          "Since the last change to calc/io.py, 1 test fails:\n\n")


def test_excerpt_of_a_missing_test_says_how_to_get_one():
    with pytest.raises(ValueError, match="--tb=short"):
        failure_excerpt(LOG, "tests/test_calc.py::test_open")   # test_open is in test_io.py


def test_generated_statements_are_unique_and_quote_the_first_failure():
    statements = [i.problem_statement for i in GENERATED_INSTANCES]
    assert len(set(statements)) == len(statements)
    for inst in GENERATED_INSTANCES:
        meta = inst.meta()
        assert inst.problem_statement.startswith("`") and meta["file"] in inst.problem_statement
        assert inst.fail_to_pass[0] in inst.problem_statement


def test_every_generated_train_instance_gets_a_three_turn_sed_script():
    """The ladder's sed expert demonstrates train instances in 3 turns (read, substitute and
    test, submit); the explore fallback would need more turns than the ladder gives."""
    from agent.exploring import sed_script
    train = [i for i in GENERATED_INSTANCES if i.split == "train"]
    assert [i.instance_id for i in train if len(sed_script(i)) != 3] == []
