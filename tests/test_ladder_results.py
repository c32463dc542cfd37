"""The ladder's committable seed files and the report rebuilt from them alone.

Rows are hand-made in the shape `tasks.ladder_report.seed_result` writes, with the machine paths
a real run has (an absolute run directory and policy), so the test sees them removed.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from swe_rlvr.cli import main
from swe_rlvr.config import ConfigError
from tasks.ladder_results import (
    cpu_info,
    load_results,
    portable,
    update_seed_file,
    write_committed_report,
)

IDS = ["proj__a-1", "proj__b-2"]
CPU = {"device": "cpu", "cpu": "Intel(R) Xeon(R) Platinum 8480+", "flags": ["amx_bf16", "avx2"],
       "gpu": None}
GPU = {"device": "cuda", "cpu": "AMD EPYC 9654", "flags": ["avx2"], "gpu": "NVIDIA H200"}
SHA = "0123456789abcdef0123456789abcdef01234567"


def _row(arm: str, seed: int, solved: int = 0) -> dict:
    """One (arm, seed) result: 2 test instances x 1 run, `solved` of them resolved."""
    instances = {i: [int(k < solved), 1] for k, i in enumerate(IDS)}
    training = {"0": {"train_resolve_rate": 0.25, "train_samples": 8, "groups": 2,
                      "signal_groups": 1, "guided_instances": 0, "guided_recovered": 0}}
    run = f"/home/me/runs/ladder/{arm}-seed{seed}"
    return {"arm": arm, "seed": seed, "run_dir": run, "run_name": f"{arm}-seed{seed}",
            "mlflow_run_id": f"{arm}{seed:032d}"[-32:], "policy": f"{run}/policy",
            "pass1_by_step": {"0": solved / 2}, "pass1": solved / 2, "format_error_rate": 0.1,
            "submit_rate": 0.9, "mean_turns": 3.5, "instances": instances,
            "training": training if arm != "base" else {},
            "times": {"rollout": 10.0, "eval": 20.0}, "wall_s": 30.0}


def _meta(hardware: dict = CPU, runs: int = 1) -> dict:
    return {"commit": SHA, "dirty": False, "config": "configs/ladder.yaml",
            "overrides": ["eval.limit=2"], "eval_split": "test", "eval_instances": 2,
            "eval_runs": runs, "hardware": hardware, "finished": "2025-01-01T00:00:00+00:00"}


def _absolute_paths(value) -> list[str]:
    if isinstance(value, dict):
        return [p for v in value.values() for p in _absolute_paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in _absolute_paths(v)]
    return [value] if isinstance(value, str) and value.startswith("/") else []


def test_portable_row_keeps_the_report_fields_and_no_machine_path():
    row = portable(_row("dapo", 0, solved=1))
    assert "policy" not in row and row["run_dir"] == row["run_name"] == "dapo-seed0"
    assert not _absolute_paths(row)
    assert row["instances"] == {"proj__a-1": [1, 1], "proj__b-2": [0, 1]}
    without_name = {k: v for k, v in _row("base", 1).items() if k != "run_name"}
    assert portable(without_name)["run_dir"] == "base-seed1"      # run_dir's last component
    with pytest.raises(ValueError, match="'times.scratch' .* holds the machine path"):
        portable({**_row("base", 0), "times": {"scratch": "/tmp/x"}})


def test_seed_file_merges_arms_of_two_invocations_and_keeps_their_provenance(tmp_path):
    path = tmp_path / "seed-0.json"
    update_seed_file(path, _row("base", 0), _meta())
    update_seed_file(path, _row("warmup", 0, solved=1), {**_meta(), "commit": "f" * 40})
    seed = json.loads(path.read_text())
    assert seed["format"] == 1 and seed["seed"] == 0 and seed["hardware"] == CPU
    assert set(seed["arms"]) == {"base", "warmup"} and seed["notes"] == []
    assert seed["arms"]["base"]["commit"] == SHA and seed["arms"]["warmup"]["commit"] == "f" * 40
    assert seed["arms"]["warmup"]["eval_runs"] == 1 and seed["arms"]["warmup"]["pass1"] == 0.5
    assert not _absolute_paths(seed)
    assert list(tmp_path.iterdir()) == [path]                   # no temporary file left behind
    # a resumed ladder meets base's result again: the file keeps the invocation that made it
    update_seed_file(path, _row("base", 0), {**_meta(), "commit": "e" * 40})
    assert json.loads(path.read_text())["arms"]["base"]["commit"] == SHA
    # ... unless its training curve was completed since with its tallies: that alone is replaced
    tallied = _row("warmup", 0, solved=1)
    tallied["training"]["0"]["train_tally"] = {"a": [1, 4], "b": [1, 4]}
    update_seed_file(path, tallied, {**_meta(), "commit": "e" * 40})
    warmup = json.loads(path.read_text())["arms"]["warmup"]
    assert warmup["training"] == tallied["training"] and warmup["commit"] == "f" * 40


def test_seed_file_refuses_an_arm_under_another_eval_protocol(tmp_path):
    path = tmp_path / "seed-0.json"
    update_seed_file(path, _row("base", 0), _meta())
    with pytest.raises(ConfigError, match=r"in eval_runs \(3 against 1\).*Set eval.runs"):
        update_seed_file(path, _row("warmup", 0), _meta(runs=3))
    other = {**_row("warmup", 0), "instances": {"proj__c-3": [0, 1], "proj__b-2": [0, 1]}}
    with pytest.raises(ConfigError, match=r"in instances \(2 instance ids against 2, 1 in common"):
        update_seed_file(path, other, _meta())
    with pytest.raises(ConfigError, match=r"in hardware.device \('cuda' against 'cpu'\)"):
        update_seed_file(path, _row("warmup", 0), _meta(GPU))
    assert set(json.loads(path.read_text())["arms"]) == {"base"}          # nothing merged


def _folder(tmp_path):
    """Seeds 0 and 1 on CPUs (base, warmup, dapo), seed 2 on a GPU (base, dapo)."""
    folder = tmp_path / "ladder"
    for seed in (0, 1):
        for arm, solved in (("dapo", 2), ("base", 0), ("warmup", 1)):
            update_seed_file(folder / f"seed-{seed}.json", _row(arm, seed, solved), _meta())
    for arm, solved in (("base", 0), ("dapo", 1)):
        update_seed_file(folder / "seed-2.json", _row(arm, 2, solved), _meta(GPU, runs=3))
    return folder


def test_load_results_reports_gpu_seeds_apart_from_cpu_seeds(tmp_path):
    cpu, gpu = load_results(_folder(tmp_path), order=["base", "warmup", "rft", "dapo"])
    assert list(cpu) == ["base", "warmup", "dapo"]                        # ladder order
    assert [r["seed"] for r in cpu["dapo"]] == [0, 1]
    assert list(gpu) == ["base", "dapo"] and [r["seed"] for r in gpu["dapo"]] == [2]
    assert gpu["dapo"][0]["eval_runs"] == 3                   # its own protocol, never pooled


def test_committed_report_names_seeds_commits_hardware_and_its_pngs(tmp_path):
    folder, out = _folder(tmp_path), tmp_path / "docs" / "ladder-cpu.md"
    text = write_committed_report(folder, out, order=["base", "warmup", "dapo"])
    assert out.read_text() == text
    for png in ("ladder-cpu.png", "ladder-cpu-curves.png"):
        assert (out.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in text
    assert "](curves.png)" not in text and "](ladder.png)" not in text
    assert "- seeds: CPU 0, 1; GPU 2" in text
    assert f"`dapo` seed(s) 0, 1, 2: commit `{SHA}`, config `configs/ladder.yaml`" in text
    assert "  - seed 0: cpu, Intel(R) Xeon(R) Platinum 8480+ (bf16-relevant flags: amx_bf16" in text
    assert "  - seed 2: cuda, NVIDIA H200 (host CPU AMD EPYC 9654)" in text
    assert "CPU seeds: split `test`, 2 instances x 1 run(s)" in text
    assert "| dapo | 2 | 1.000 |" in text                     # the CPU seeds' arm row
    gpu = text.split("## GPU seeds")[1]
    assert "| dapo | 1 | 0.500 |" in gpu and "2 instances x 3 run(s)" in gpu
    assert "No two arms to compare on a GPU seed." in gpu        # base and dapo: no listed pair
    assert "| dapo − warmup | pooled |" in text.split("## GPU seeds")[0]


def test_cpu_info_reads_the_model_and_the_bf16_flags():
    text = "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 avx512f amx_bf16\n\n" \
           "processor\t: 1\nmodel name\t: Some CPU\n"
    assert cpu_info(text) == ("Some CPU", ["amx_bf16", "avx2"])
    assert cpu_info("") == ("unknown", [])


def test_report_command_writes_the_report_and_refuses_an_empty_folder(tmp_path, capsys):
    folder, out = _folder(tmp_path), tmp_path / "out" / "ladder.md"
    assert main(["experiment", "report", str(folder), "--out", str(out)]) == 0
    assert f"report: {out}" in capsys.readouterr().out
    assert out.exists() and (out.parent / "ladder-curves.png").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["experiment", "report", str(empty), "--out", str(out)]) == 2
    assert f"{empty} holds no seed-*.json; pass the folder that" in capsys.readouterr().err


def test_a_resumed_ladder_fills_the_seed_file_from_results_it_skips(tmp_path):
    """An (arm, seed) finished by an earlier invocation is skipped, and still merged, with this
    machine's commit and hardware, and the time its result was written."""
    from flows.experiment import ARMS, Ladder, _run_arm_seed
    from swe_rlvr.config import load_config
    from tasks.ladder_results import finished_at, ladder_meta
    cfg = load_config("configs/ladder.yaml", ["engine.device=cpu"])
    ladder = Ladder("configs/ladder.yaml", ["engine.device=cpu"], cfg, tmp_path / "out", [0],
                    ["base"], results_dir=tmp_path / "docs",
                    meta=ladder_meta(cfg, "configs/ladder.yaml", ["engine.device=cpu"], 2))
    result = ladder.result_path("base", 0)
    result.parent.mkdir(parents=True)
    result.write_text(json.dumps(_row("base", 0)))
    _run_arm_seed(ladder, ARMS["base"], 0, "unused-arm-run")
    arm = json.loads((tmp_path / "docs" / "seed-0.json").read_text())["arms"]["base"]
    assert arm["hardware"]["device"] == "cpu" and arm["config"] == "configs/ladder.yaml"
    assert arm["commit"] == "unknown" or len(arm["commit"]) == 40
    assert arm["finished"] == finished_at(result) and arm["eval_instances"] == 2
    assert "window_per_iteration" not in arm         # files from before the option: unchanged
    rotating = ladder_meta(cfg, None, [], 2, mixed_window=512, window_per_iteration=28)
    assert (rotating["mixed_window"], rotating["window_per_iteration"]) == (512, 28)


def test_the_results_folder_does_not_make_a_checkout_dirty(tmp_path):
    """A seed file the ladder itself updated is not a code change; any other tracked file is."""
    from tasks.ladder_results import git_state
    git = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "docs" / "ladder").mkdir(parents=True)
    (tmp_path / "docs" / "ladder" / "seed-0.json").write_text("{}")
    (tmp_path / "recipe.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    (tmp_path / "docs" / "ladder" / "seed-0.json").write_text('{"arms": {}}')
    commit, dirty = git_state(tmp_path, outputs=tmp_path / "docs" / "ladder")
    assert len(commit) == 40 and not dirty
    assert git_state(tmp_path)[1]                               # without the folder: dirty
    assert git_state(tmp_path, outputs=tmp_path.parent / "elsewhere")[1]   # outside: no effect
    (tmp_path / "recipe.py").write_text("x = 2\n")
    assert git_state(tmp_path, outputs=tmp_path / "docs" / "ladder")[1]


def test_checkpoint_digest_sees_the_weights_and_nothing_else(tmp_path):
    from tasks.ladder_results import checkpoint_digest
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "config.json").write_text("{}")
    first = checkpoint_digest(str(tmp_path))
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert checkpoint_digest(str(tmp_path)) == first
    (tmp_path / "model.safetensors").write_bytes(b"weightz")
    assert checkpoint_digest(str(tmp_path)) != first
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"no \*\.safetensors"):
        checkpoint_digest(str(empty))


def test_seeds_with_another_shared_warm_up_are_never_pooled(tmp_path):
    path = tmp_path / "seed-0.json"
    update_seed_file(path, _row("warmup", 0), {**_meta(), "shared_warmup": "ab" * 32})
    with pytest.raises(ConfigError, match=r"in shared_warmup \(None against 'abab.*--shared-warmup"):
        update_seed_file(path, _row("dapo", 0), _meta())
    update_seed_file(path, _row("dapo", 0, solved=2), {**_meta(), "shared_warmup": "ab" * 32})
    text = write_committed_report(tmp_path, tmp_path / "report.md")
    assert "one warm-up shared by every seed (checkpoint sha256 `abababababab`)" in text
    assert "warm-up's own variance is not measured" in text


def test_a_folder_with_a_design_judges_its_comparison_at_the_looks_bound(tmp_path):
    """design.json beside the seed files: the report adds the comparison's look (2 seeds of a
    planned 2, 4), its bound and the interval at that level; without one it has no such section."""
    folder, out = _folder(tmp_path), tmp_path / "report.md"
    assert "sequential design" not in write_committed_report(folder, out)
    (folder / "design.json").write_text(json.dumps(
        {"comparison": ["dapo", "warmup"], "looks": [2, 4], "declared": "2026-11-30"}))
    text = write_committed_report(folder, out)
    assert "## The claim's sequential design" in text
    assert "| dapo − warmup | 1 of 2 | 2 | 0.50 | 2.772 | 99.4% |" in text
    assert "judged when 2 and 4 seeds are pooled" in text and "This is look 1 of 2." in text
