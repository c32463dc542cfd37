"""Every episode as an MLflow trace, linked to the training run: what the policy typed, what the
sandbox answered, and what the grade and the reward were.

One trace per episode (`episode`, an AGENT span), with two spans per turn k: the LLM call
(`llm <k>`: prompt tokens, the reply, its log-prob sum, tokens/s) and the tool call (`tool <k>`:
the command, its exit code, duration and observation, cut to OBSERVATION_CHARS). The trace's
status is OK when the episode resolved its instance and ERROR otherwise; its `outcome` tag says
which way it did not (`swe_rlvr.artifacts.EpisodeOutcome.outcome`: failed, tampered,
infra_failure, crash, no_validation). The root span carries the grade (tamper and infrastructure
reasons, the FAIL_TO_PASS tests that still fail) and, for training episodes, the reward, its
parts and the advantage; a guided episode carries its guidance text.

Tags (`TAGS`) make the UI's search find e.g. every failed evaluation episode of step 3:
`tags.stage = 'eval' AND tags.iteration = '3' AND tags.outcome = 'failed'`.

What is logged: every evaluation episode, and `tracking.trace_train_episodes` episodes of each
training stage (rollout, rollouts_guided) per iteration, chosen by a stable hash of their ids.
The traces are built from the iteration's Parquet artifacts when the step is logged
(`tasks.tracking.log_step`), after its stages ran, and MLflow exports them on its own background
thread, so no stage waits on the store (`bench.iteration` measures both costs); a marker per
(step, stage) keeps a resumed run from logging a stage twice (MLflow flushes its queue when the
process exits). `tracking.traces: false` logs none.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agent.loop import truncate
from agent.turns import Turn, turns
from swe_rlvr.artifacts import EpisodeOutcome, outcomes
from swe_rlvr.config import Config
from tasks import store
from tasks.tracking_store import use_store

OBSERVATION_CHARS = 4000
"""An observation or reply longer than this is cut (head and tail) in its span."""
PATCH_CHARS = 20000
STAGES = {"rollout": ("rollouts", "validations"),
          "rollouts_guided": ("rollouts_guided", "validations_guided"),
          "eval": ("eval_rollouts", "eval_validations")}
"""Trace stage -> (its rollouts artifact, its grades artifact) in `iter_<k>/`."""
TAGS = ("run", "iteration", "stage", "instance_id", "episode_id", "policy_version", "group",
        "outcome", "guided")
REWARD_KEYS = ("reward", "reward_resolved", "reward_turns", "reward_overlong", "reward_format",
               "advantage", "kept")


def chosen(rows: list[dict], limit: int) -> list[dict]:
    """`limit` rows picked by a stable hash of their episode ids (all when limit < 0), in their
    original order: the same episodes whatever the run's order of writing them."""
    if limit < 0 or len(rows) <= limit:
        return rows
    rank = sorted(rows, key=lambda r: hashlib.sha1(r["episode_id"].encode()).hexdigest())
    keep = {r["episode_id"] for r in rank[:limit]}
    return [r for r in rows if r["episode_id"] in keep]


def trace_tags(run: str, stage: str, episode: EpisodeOutcome) -> dict[str, str]:
    """The searchable tags of one episode's trace (`TAGS`)."""
    row = episode.rollout
    return {"run": run, "iteration": str(row["iteration"]), "stage": stage,
            "instance_id": episode.instance_id, "episode_id": episode.episode_id,
            "policy_version": str(row["policy_version"]),
            "group": f"{episode.instance_id}/i{row['iteration']}", "outcome": episode.outcome,
            "guided": str(episode.guided).lower()}


def root_attributes(episode: EpisodeOutcome, reward: dict | None) -> dict[str, Any]:
    """The grade, the episode's counters and (training episodes) its reward and advantage."""
    row, grade = episode.rollout, episode.grade or {}
    out: dict[str, Any] = {
        "outcome": episode.outcome, "resolved": episode.resolved, "tampered": episode.tampered,
        "termination": row["termination"], "turns": row["turns"],
        "format_errors": row["format_errors"], "gen_tokens": row["gen_tokens"],
        "wall_s": row["wall_s"]}
    if grade:
        out.update({"tamper_reason": grade.get("tamper_reason", ""),
                    "infra_failure": bool(grade.get("infra_failure")),
                    "infra_reason": grade.get("infra_reason", ""),
                    "patch_applied": bool(grade.get("patch_applied")),
                    "fail_to_pass_failed": list(grade.get("f2p_failed") or []),
                    "pass_to_pass_failed": list(grade.get("p2p_failed") or [])})
    if row.get("error"):
        out["error"] = row["error"]
    if reward:
        out.update({k: reward[k] for k in REWARD_KEYS if k in reward})
    return out


def turn_times(turn_list: list[Turn], wall_s: float) -> list[tuple[float, float, float]]:
    """(start, end of generation, end of the tool call) of each turn, in seconds from the
    episode's start: the turn log's when there is one, else the wall time shared evenly."""
    if turn_list and all(t.at_s is not None for t in turn_list):
        return [(t.at_s or 0.0, (t.at_s or 0.0) + (t.gen_s or 0.0),
                 (t.at_s or 0.0) + (t.gen_s or 0.0) + (t.exec_s or 0.0)) for t in turn_list]
    step = wall_s / max(1, len(turn_list))
    return [(k * step, k * step + step / 2, (k + 1) * step) for k in range(len(turn_list))]


def flush() -> None:
    """Wait until every trace built so far is in the store (before searching them)."""
    import mlflow
    mlflow.flush_trace_async_logging()


def log_episode(mlc: Any, experiment_id: str, run_id: str, run: str, stage: str,
                episode: EpisodeOutcome, reward: dict | None = None, guidance: str = "",
                now_ns: int = 0) -> str:
    """Log one episode as a trace linked to `run_id`; returns its trace id."""
    row = episode.rollout
    turn_list = turns(row)
    started = row.get("turns_json") and _started_at(row)
    base = int(started * 1e9) if started else now_ns - int(row["wall_s"] * 1e9)
    inputs: dict[str, Any] = {"instance_id": episode.instance_id, "issue": _issue(row)}
    if guidance:
        inputs["guidance"] = guidance
    root = mlc.start_trace("episode", span_type="AGENT", inputs=inputs,
                           tags=trace_tags(run, stage, episode), experiment_id=experiment_id,
                           start_time_ns=base, run_id=run_id)
    tid = root.trace_id
    def span(name: str, kind: str, inputs: dict, outputs: dict, attributes: dict,
             start_s: float, end_s: float) -> None:
        child = mlc.start_span(name, trace_id=tid, parent_id=root.span_id, span_type=kind,
                               inputs=inputs, start_time_ns=base + int(start_s * 1e9))
        mlc.end_span(tid, child.span_id, outputs=outputs, attributes=attributes,
                     end_time_ns=base + int(end_s * 1e9))

    for turn, (t0, t1, t2) in zip(turn_list, turn_times(turn_list, row["wall_s"]), strict=True):
        span(f"llm {turn.index}", "CHAT_MODEL", {"prompt_tokens": turn.prompt_tokens},
             {"reply": truncate(turn.reply, OBSERVATION_CHARS)}, _llm_attributes(turn), t0, t1)
        span(f"tool {turn.index}", "TOOL", {"command": turn.command},
             {"observation": truncate(turn.observation, OBSERVATION_CHARS)},
             _tool_attributes(turn), t1, t2)
    mlc.end_trace(tid, outputs={"outcome": episode.outcome, "termination": row["termination"],
                                "patch": truncate(row["patch"], PATCH_CHARS)},
                  attributes=root_attributes(episode, reward),
                  status="OK" if episode.resolved else "ERROR",
                  end_time_ns=base + int(row["wall_s"] * 1e9))
    return tid


def log_step_traces(cfg: Config, mlc: Any, run_id: str, run_dir: str, step: int,
                    stages: tuple[str, ...] = tuple(STAGES)) -> dict[str, int]:
    """Trace the episodes of `iter_<step>`'s `stages` (every eval episode, a sample of the
    training ones); returns {stage: traces logged}. Stages already traced (marker) are skipped."""
    import time
    if not cfg.tracking.traces:
        return {}
    it = store.join(run_dir, f"iter_{step}")
    experiment = mlc.get_run(run_id).info.experiment_id
    run = run_dir.rstrip("/").rsplit("/", 1)[-1]
    rewards = {r["episode_id"]: r for r in _rows(it, "rewards")}
    guidance = {g["instance_id"]: g["text"] for g in _rows(it, "guidance")}
    logged: dict[str, int] = {}
    use_store(cfg)
    for stage in stages:
        rollouts_name, grades_name = STAGES[stage]
        marker = store.join(run_dir, "_tracking", f"traces_{step}_{stage}.json")
        rollouts = _rows(it, rollouts_name, "rollouts")
        if not rollouts or store.read_json(marker) is not None:
            continue
        if stage != "eval":
            rollouts = chosen(rollouts, cfg.tracking.trace_train_episodes)
        now = time.time_ns()
        for episode in outcomes(rollouts, _rows(it, grades_name, "validations")):
            log_episode(mlc, experiment, run_id, run, stage, episode,
                        rewards.get(episode.episode_id),
                        guidance.get(episode.instance_id, "") if episode.guided else "", now)
        logged[stage] = len(rollouts)
        store.write_json(marker, {"traces": len(rollouts)})
    return logged


def failed_eval_filter(step: int) -> str:
    """The trace search that finds the evaluation episodes of `step` that did not resolve."""
    return f"tags.stage = 'eval' AND tags.iteration = '{step}' AND tags.outcome != 'resolved'"


def find(cfg: Config, run_id: str, filter_string: str, max_results: int = 100) -> list:
    """The run's traces matching `filter_string` (waits for the export queue first)."""
    import mlflow

    from tasks.tracking_store import client
    use_store(cfg)
    flush()
    experiment = client(cfg).get_run(run_id).info.experiment_id
    return mlflow.search_traces(locations=[experiment], filter_string=filter_string,
                                run_id=run_id, max_results=max_results, return_type="list",
                                include_spans=False)


def trace_link(base_url: str, experiment_id: str, trace_id: str) -> str:
    """The MLflow UI's page of one trace (its spans open)."""
    return f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/traces/{trace_id}"


def _rows(it: str, name: str, schema: str | None = None) -> list[dict]:
    url = store.join(it, f"{name}.parquet")
    return store.read_rows(url, schema or name) if store.exists(url) else []


def _started_at(row: dict) -> float:
    return float(json.loads(row["turns_json"]).get("started_at") or 0.0)


def _issue(row: dict) -> str:
    users = [m["content"] for m in json.loads(row["messages_json"]) if m["role"] == "user"]
    return truncate(users[0], OBSERVATION_CHARS) if users else ""


def _llm_attributes(turn: Turn) -> dict[str, Any]:
    out: dict[str, Any] = {"gen_tokens": turn.gen_tokens, "logprob_sum": turn.logprob_sum,
                           "format_error": turn.format_error}
    if turn.gen_tokens is not None and turn.gen_s:
        out["tokens_per_s"] = round(turn.gen_tokens / turn.gen_s, 2)
    return {k: v for k, v in out.items() if v is not None}


def _tool_attributes(turn: Turn) -> dict[str, Any]:
    out: dict[str, Any] = {"exit_code": turn.exit_code, "duration_s": turn.exec_s}
    return {k: v for k, v in out.items() if v is not None}
