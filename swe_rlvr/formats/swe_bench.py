"""SWE-bench records (also Verified and Lite) and SWE-Gym's, which share their columns.

Hub columns; FAIL_TO_PASS / PASS_TO_PASS as JSON-encoded strings or real lists; optional `image`,
`eval_script`, `log_parser`, `split`, `difficulty` (Verified's "<15 min fix" ... ">4 hours" become
easy/medium/hard). The `EnvSpec` is SWE-bench's spec for the repo and version
(`swe_rlvr.env_specs`; swebench is imported only when a file holds such a record).

Simplification: the test command of a SWE-bench record is its spec's `test_cmd`, not parsed out of
`eval_script`; the script is kept whole in `EnvSpec.eval_script` for the Docker backend.
"""

from __future__ import annotations

from swe_rlvr.env_specs import swebench_env
from swe_rlvr.formats import fields
from swe_rlvr.instances import EnvSpec, Instance

SWE_BENCH_KEYS = {
   "instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch",
    "FAIL_TO_PASS", "PASS_TO_PASS", "hints_text", "created_at", "version",
    "environment_setup_commit", "split", "difficulty", "image", "image_name", "docker_image",
    "eval_script",
}


def common_fields(raw: dict, source: str) -> dict:
    """The fields that SWE-bench, SWE-Gym, SWE-rebench and SWE-smith share."""
    ident, repo = fields.instance_id(raw), fields.repo(raw)
    return dict(
        instance_id=ident, repo=repo,
        problem_statement=fields.text(raw, "problem_statement", nonempty=True),
        fail_to_pass=fields.tests(raw, "FAIL_TO_PASS", nonempty=True),
        pass_to_pass=fields.tests(raw, "PASS_TO_PASS", nonempty=False),
        source=source, split=fields.split(raw), difficulty=fields.difficulty(raw),
        version=fields.version(raw),
        environment_setup_commit=fields.text(raw, "environment_setup_commit", required=False),
        hints_text=fields.text(raw, "hints_text", required=False),
        created_at=fields.text(raw, "created_at", required=False),
        image=fields.image(raw), log_parser=fields.log_parser(raw, repo),
    )


def from_swe_bench(raw: dict, source: str = "swe-bench") -> Instance:
    """A SWE-bench / Verified / Lite / SWE-Gym record; its environment is SWE-bench's spec."""
    common = common_fields(raw, source)
    return Instance(
        **common, base_commit=fields.text(raw, "base_commit", nonempty=True),
        patch=fields.patch(raw, "patch"), test_patch=fields.patch(raw, "test_patch"),
        env=spec_env(raw, common), meta_json=fields.meta_json(raw, SWE_BENCH_KEYS),
    )


def spec_env(raw: dict, common: dict) -> EnvSpec:
    return swebench_env(common["repo"], common["version"], image=common["image"],
                        eval_script=fields.text(raw, "eval_script", required=False))
