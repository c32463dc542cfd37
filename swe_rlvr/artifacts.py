"""Arrow schemas of the Parquet artifacts that the iteration's stages exchange.

Each schema carries its version in the Parquet metadata (`swe_rlvr.schema` = `<name>/v<n>`); a
reader refuses a file whose version it does not know instead of misreading columns. Bump the
version when a column changes meaning or type; adding a nullable column is compatible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa

SCHEMA_KEY = b"swe_rlvr.schema"

_ENV = pa.struct([
    ("python", pa.string()), ("pre_install", pa.list_(pa.string())),
    ("reqs_path", pa.list_(pa.string())), ("pip_packages", pa.list_(pa.string())),
    ("install", pa.string()), ("test_cmd", pa.string()), ("eval_script", pa.string()),
    ("origin", pa.string()), ("build_error", pa.string()),
])

INSTANCES = pa.schema([
    ("instance_id", pa.string()), ("repo", pa.string()), ("base_commit", pa.string()),
    ("problem_statement", pa.string()), ("patch", pa.string()), ("test_patch", pa.string()),
    ("fail_to_pass", pa.list_(pa.string())), ("pass_to_pass", pa.list_(pa.string())),
    ("env", _ENV), ("source", pa.string()), ("split", pa.string()), ("difficulty", pa.string()),
    ("version", pa.string()), ("environment_setup_commit", pa.string()),
    ("hints_text", pa.string()), ("created_at", pa.string()), ("image", pa.string()),
    ("log_parser", pa.string()), ("meta_json", pa.string()),
])

ROLLOUTS = pa.schema([
    ("episode_id", pa.string()),          # "<instance_id>/i<iter>/s<sample>" (+ "/guided")
    ("instance_id", pa.string()),
    ("iteration", pa.int32()),
    ("sample", pa.int32()),               # index inside the group
    ("guided", pa.bool_()),
    ("policy_version", pa.int32()),
    ("token_ids", pa.list_(pa.int32())),  # the whole episode: prompt + every turn, as sampled
    ("loss_mask", pa.list_(pa.int8())),   # 1 only on action tokens of well-formed turns
    ("logprobs", pa.list_(pa.float32())), # sampler log-prob per token; 0.0 where not generated
    ("guidance_start", pa.int32()),       # token span of the guidance block, -1 when unguided
    ("guidance_end", pa.int32()),
    ("messages_json", pa.string()),       # the chat messages, for reading and for guidance
    ("turns", pa.int32()),
    ("format_errors", pa.int32()),
    # submitted|max_turns|context_overflow|timeout|format_errors|patch_too_large|error
    ("termination", pa.string()),
    ("patch", pa.string()),
    ("gen_tokens", pa.int32()),
    ("gen_s", pa.float64()),
    ("exec_s", pa.float64()),
    ("wall_s", pa.float64()),
    ("error", pa.string()),
    ("turns_json", pa.string()),          # {"started_at": epoch s, "turns": [per-turn times]}
])

VALIDATIONS = pa.schema([
    ("episode_id", pa.string()),
    ("instance_id", pa.string()),
    ("patch_applied", pa.bool_()),
    ("apply_method", pa.string()),        # git-apply | 3way | patch-fuzz | "" when it failed
    ("tests_status_json", pa.string()),   # {test id: PASSED|FAILED|SKIPPED|ERROR|XFAIL}
    ("f2p_passed", pa.list_(pa.string())),
    ("f2p_failed", pa.list_(pa.string())),
    ("p2p_passed", pa.list_(pa.string())),
    ("p2p_failed", pa.list_(pa.string())),
    ("resolution", pa.string()),          # FULL | PARTIAL | NO
    ("resolved", pa.bool_()),
    ("reference_resolved", pa.bool_()),   # SWE-bench's own verdict on the same log
    ("guards", pa.list_(pa.string())),    # "<guard>: <what it saw>" where a guard failed tests
    ("tampered", pa.bool_()),             # a canary test had the wrong outcome: never resolved
    ("tamper_reason", pa.string()),
    ("infra_failure", pa.bool_()),
    ("infra_reason", pa.string()),
    ("log_excerpt", pa.string()),
    ("duration_s", pa.float64()),
])

GUIDANCE = pa.schema([
    ("instance_id", pa.string()),
    ("failed_episode_id", pa.string()),
    ("plan", pa.string()),
    ("feedback", pa.string()),
    ("location", pa.string()),
    ("text", pa.string()),                # the rendered block injected after the issue
    ("source", pa.string()),              # rules | teacher
    ("leakage", pa.float64()),            # fraction of the gold patch's added lines in the text
])

REWARDS = pa.schema([
    ("episode_id", pa.string()),
    ("instance_id", pa.string()),
    ("guided", pa.bool_()),
    ("reward_resolved", pa.float64()),
    ("reward_turns", pa.float64()),
    ("reward_overlong", pa.float64()),
    ("reward_format", pa.float64()),
    ("reward", pa.float64()),
    ("advantage", pa.float64()),
    ("kept", pa.bool_()),                 # survived infra filtering and dynamic sampling
    ("drop_reason", pa.string()),
])

CURRICULUM = pa.schema([
    ("instance_id", pa.string()),
    ("attempts", pa.int32()),             # unguided samples so far, over the run's iterations
    ("solved", pa.int32()),
    ("rate", pa.float64()),
    ("retired", pa.string()),             # "" in the pool | solved_often | never_solved
])

TRAIN_METRICS = pa.schema([
    ("step", pa.int32()),
    ("phase", pa.string()),               # rft | dapo | dpo | sft
    ("loss", pa.float64()),
    ("clip_frac_low", pa.float64()),
    ("clip_frac_high", pa.float64()),
    ("entropy", pa.float64()),
    ("approx_kl", pa.float64()),
    ("sampler_mismatch", pa.float64()),
    ("grad_norm", pa.float64()),
    ("lr", pa.float64()),
    ("tokens", pa.int64()),
    ("tokens_per_s", pa.float64()),
])

EVAL = pa.schema([
    ("instance_id", pa.string()),
    ("run", pa.int32()),
    ("episode_id", pa.string()),
    ("resolved", pa.bool_()),
    ("infra_failure", pa.bool_()),
    ("termination", pa.string()),
    ("turns", pa.int32()),
    ("format_errors", pa.int32()),
    ("verifier_score", pa.float64()),
])

SCHEMAS: dict[str, tuple[pa.Schema, int]] = {
    # v2: a plain SWE-bench record's env is SWE-bench's spec (or a build_error), where v1 held a
    # default that ran its tests in swe-rlvr's own interpreter; v1 files would still do that.
    "instances": (INSTANCES, 2),
    "rollouts": (ROLLOUTS, 1),
    "validations": (VALIDATIONS, 3),
    "guidance": (GUIDANCE, 1),
    "rewards": (REWARDS, 1),
    "curriculum": (CURRICULUM, 1),
    "train_metrics": (TRAIN_METRICS, 1),
    "eval": (EVAL, 1),
}


def versioned(name: str) -> pa.Schema:
    """The named schema with its version stamped into the metadata."""
    schema, version = SCHEMAS[name]
    return schema.with_metadata({SCHEMA_KEY: f"{name}/v{version}".encode()})


def table(name: str, rows: list[dict]) -> pa.Table:
    """Rows (dicts with exactly the schema's columns) -> a versioned table."""
    schema = versioned(name)
    missing = [f.name for f in schema if rows and f.name not in rows[0]]
    if missing:
        raise ValueError(f"{name} rows lack columns {missing}; every row needs all of "
                         f"{schema.names}.")
    return pa.Table.from_pylist(rows, schema=schema)


def check(name: str, tbl: pa.Table) -> pa.Table:
    """Refuse a table whose stamped schema is not the one this code writes."""
    _, version = SCHEMAS[name]
    stamp = (tbl.schema.metadata or {}).get(SCHEMA_KEY, b"").decode()
    if stamp != f"{name}/v{version}":
        raise ValueError(f"Artifact schema {stamp or 'unstamped'!r} is not {name}/v{version}; "
                         f"it was written by another version of swe-rlvr. Re-run that stage.")
    return tbl


# --------------------------------------------------------------------------- episode outcomes

CRASH_TERMINATIONS = frozenset({"error"})   # the runner caught an exception: not the policy's act
DROP_COUNTERS = {"no_validation": "dropped_ungraded", "infra_failure": "dropped_infra",
                 "crash": "dropped_crash"}


@dataclass(frozen=True)
class EpisodeOutcome:
    """One ROLLOUTS row joined with its VALIDATIONS row (None when it was never graded).

    The one rule for what is a training sample lives here: an episode is a sample when it was
    graded, the grading did not fail on infrastructure (the tests ran), and the episode was not
    ended by a crash. A non-sample says nothing about the policy: it joins no advantage group, no
    DPO pair, no verifier batch and no guidance selection, and its reason is counted, never
    silently lost. Timeouts, format errors and oversized patches are the policy's doing: samples.
    """

    rollout: dict
    grade: dict | None

    @property
    def episode_id(self) -> str:
        return self.rollout["episode_id"]

    @property
    def instance_id(self) -> str:
        return self.rollout["instance_id"]

    @property
    def guided(self) -> bool:
        return bool(self.rollout["guided"])

    @property
    def drop_reason(self) -> str:
        """"" for a sample, else no_validation | infra_failure | crash."""
        if self.rollout["termination"] in CRASH_TERMINATIONS:
            return "crash"
        if self.grade is None:
            return "no_validation"
        return "infra_failure" if self.grade["infra_failure"] else ""

    @property
    def is_sample(self) -> bool:
        return self.drop_reason == ""

    @property
    def resolved(self) -> bool:
        """A sample whose grade resolved the instance (grading never resolves a tampered one)."""
        return self.is_sample and self.grade is not None and bool(self.grade["resolved"])

    @property
    def tampered(self) -> bool:
        return self.grade is not None and bool(self.grade.get("tampered"))

    @property
    def outcome(self) -> str:
        """One word for the episode: its drop reason (no_validation | infra_failure | crash) for
        a non-sample, else tampered | resolved | failed."""
        if not self.is_sample:
            return self.drop_reason
        return "tampered" if self.tampered else "resolved" if self.resolved else "failed"


def outcomes(rollouts: Iterable[dict], validations: Iterable[dict]) -> list[EpisodeOutcome]:
    """Every rollout row with its grade, in rollout order (the one join of the two artifacts)."""
    grades = {v["episode_id"]: v for v in validations}
    return [EpisodeOutcome(r, grades.get(r["episode_id"])) for r in rollouts]


def dropped(episodes: Iterable[EpisodeOutcome]) -> dict[str, int]:
    """{"dropped_ungraded", "dropped_infra", "dropped_crash"}: non-samples by reason, zeros kept."""
    counts = Counter(o.drop_reason for o in episodes)
    return {name: counts.get(reason, 0) for reason, name in DROP_COUNTERS.items()}
