"""The built-in suite's train/test overlap rules, checked on the shipped instances.jsonl.

(a) Every instance of a held-out project (`HOLDOUT_PROJECTS`: datekit, one of the projects the
    grown suite added) is `test`: no train instance touches it.
(b) In every other project the generated instances (both tiers) are split by function: a test
    instance's function is touched by no train instance. The hand-written instances keep the
    splits they were authored with; the few of them that touch a function whose generated
    instances sit on the other side are listed here, so no new overlap creeps in.
(c) Train and test share projects (all but the held-out one) and files; only functions are
    kept apart.
(d) The dev split (`swe_rlvr.builtin.splits`) holds whole functions of the generated tier that
    were train: no train or test instance touches a dev function, and carving is idempotent.

Besides the rules, the selections that configs depend on are pinned: the quickstart's [easy]
selection is byte for byte what it was before the `generated` tier existed, and the ladder's
selection holds at least 500 train instances.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import defaultdict
from pathlib import Path

from swe_rlvr.builtin import INSTANCES_PATH, load_builtin
from swe_rlvr.builtin.mutations import FIRST_PROJECTS, HOLDOUT_PROJECTS, split_of
from swe_rlvr.builtin.splits import (
    carve_dev,
    dev_bucket,
    function_key,
    touched,
    touched_functions,
)
from swe_rlvr.config import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
INSTANCES = load_builtin()
GENERATED = [i for i in INSTANCES if i.meta()["kind"] == "mutation"]
FIRST_GENERATION_SHA256 = "4ab48bcfce513d55e6703e0aed4ff38d8e51df15de091d8c3463548f898b16bc"
"""sha256 of instances.jsonl's lines of every tier but `generated`, joined by newlines, as they
were before the `generated` tier was added (158 records: 32 hand-written, 126 easy mutants)."""
HANDWRITTEN_ACROSS = {
    "swe-rlvr__iniconf-6": ["iniconf/values.py:to_seconds"],
    "swe-rlvr__iniconf-8": ["iniconf/lexer.py:tokenize"],
    "swe-rlvr__ledger-4": ["ledger/invoice.py:tax"],
    "swe-rlvr__ledger-5": ["ledger/money.py:__mul__"],
    "swe-rlvr__ledger-6": ["ledger/invoice.py:add"],
    "swe-rlvr__ledger-8": ["ledger/invoice.py:discount", "ledger/money.py:format"],
    "swe-rlvr__semverkit-3": ["semverkit/sugar.py:tilde"],
    "swe-rlvr__semverkit-6": ["semverkit/ranges.py:_test_set"],
    "swe-rlvr__semverkit-8": ["semverkit/collection.py:unique_versions"],
    "swe-rlvr__texttable-3": ["texttable/width.py:char_width"],
    "swe-rlvr__texttable-4": ["texttable/cells.py:infer"],
    "swe-rlvr__texttable-5": ["texttable/table.py:sort_by"],
}
"""Hand-written instance -> the functions it touches whose generated instances are in the other
split. The hand-written splits were authored before the split by function existed, and the
quickstart's selection depends on them, so they stay; 2 of these 12 are easy (in the ladder's
selection): semverkit-3 and texttable-3, both test."""


_key = function_key


def test_holdout_project_is_test_only_and_new():
    for project in HOLDOUT_PROJECTS:
        held = [i for i in INSTANCES if i.repo == f"swe-rlvr/{project}"]
        assert held and {i.split for i in held} == {"test"}, project
        assert project not in FIRST_PROJECTS
    train_projects = {i.meta()["project"] for i in INSTANCES if i.split == "train"}
    assert not train_projects & set(HOLDOUT_PROJECTS)


def test_generated_instances_are_split_by_function():
    sides = defaultdict(set)
    for inst in GENERATED:
        sides[_key(inst)].add(inst.split)
        if inst.split == "dev":
            assert split_of(*_key(inst)) == "train" and dev_bucket(*_key(inst)), inst.instance_id
        else:
            assert inst.split == split_of(*_key(inst)), inst.instance_id
    assert [key for key, splits in sides.items() if len(splits) > 1] == []


def test_splits_share_projects_and_files():
    by_project, by_file = defaultdict(set), defaultdict(set)
    for inst in GENERATED:
        by_project[inst.meta()["project"]].add(inst.split)
        by_file[inst.meta()["project"], inst.meta()["file"]].add(inst.split)
    shared = {p for p, splits in by_project.items() if splits >= {"train", "test"}}
    assert shared == set(by_project) - set(HOLDOUT_PROJECTS)
    assert sum(splits >= {"train", "test"} for splits in by_file.values()) >= len(shared)


def test_handwritten_overlaps_are_the_known_ones():
    side = {_key(i): i.split for i in GENERATED}
    across = {}
    for inst in INSTANCES:
        if inst.meta()["kind"] != "handwritten":
            continue
        project = inst.meta()["project"]
        other = sorted(f"{file}:{function}" for file, function in touched(project, inst.patch)
                       if side.get((project, file, function), inst.split) != inst.split)
        if other:
            across[inst.instance_id] = other
    assert across == HANDWRITTEN_ACROSS


def test_first_generation_records_are_unchanged():
    """The quickstart selects [easy] and its timing and learning figures depend on exactly those
    instances: every record outside the `generated` tier is the one it was before that tier
    existed (same ids, order, commits, patches and tests; the digest pins the rows as rebuilt,
    whose `env` also spells out EnvSpec's empty `origin` and `build_error`)."""
    lines = [ln for ln in INSTANCES_PATH.read_text().splitlines()
             if json.loads(ln)["difficulty"] != "generated"]
    assert len(lines) == 158
    assert hashlib.sha256("\n".join(lines).encode()).hexdigest() == FIRST_GENERATION_SHA256


def test_quickstart_keeps_its_selection_and_the_ladder_gets_the_grown_suite():
    quickstart = load_config(CONFIGS / "quickstart.yaml")
    ladder = load_config(CONFIGS / "ladder.yaml")

    def count(tiers: tuple[str, ...], split: str) -> int:
        return sum(i.split == split and i.difficulty in tiers for i in INSTANCES)
    assert quickstart.instances.tiers == ("easy",)
    assert (count(("easy",), "train"), count(("easy",), "test")) == (107, 30)
    assert "generated" in ladder.instances.tiers
    assert count(ladder.instances.tiers, "train") >= 500


def test_dev_split_holds_whole_generated_train_functions():
    dev = [i for i in INSTANCES if i.split == "dev"]
    assert {i.difficulty for i in dev} == {"generated"}
    assert 80 <= len(dev) <= 160, len(dev)   # about a fifth of the generated tier's train side
    dev_keys = {_key(i) for i in dev}
    for inst in INSTANCES:
        if inst.split != "dev":
            assert not touched_functions(inst) & dev_keys, inst.instance_id
    assert carve_dev(INSTANCES) == INSTANCES   # the shipped file is carved, and carving is stable


def test_carving_moves_only_unpinned_functions_in_the_bucket():
    """A hand-made pair of records: a generated train mutant in a dev-bucket function moves to
    dev unless a pinned (easy) train instance touches the same function."""
    gen = next(i for i in INSTANCES if i.split == "dev")
    back = dataclasses.replace(gen, split="train")
    assert carve_dev([back]) == [gen]
    pin = dataclasses.replace(back, instance_id="swe-rlvr__pin-1", difficulty="easy")
    assert carve_dev([back, pin]) == [back, pin]
    pinned = {k for i in INSTANCES if i.difficulty != "generated" for k in touched_functions(i)}
    kept = [i for i in GENERATED if i.split == "train" and i.difficulty == "generated"]
    assert all(not dev_bucket(*_key(i)) or _key(i) in pinned for i in kept)
