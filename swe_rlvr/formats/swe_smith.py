"""SWE-smith records: `patch` *introduces* the bug, so `Instance.patch` is its reverse
(`reverse_patch`).

Simplifications and assumptions: SWE-smith records name no upstream base commit. The SWE-smith
harness checks out a branch named after the instance id in the mirror repo (`repo` =
"swesmith/<owner>__<name>.<hash>") inside the repo's one image (`image_name`); `base_commit`
therefore holds that branch name unless the record has its own `base_commit`. The bug patch and
the upstream commit hash (the suffix of the mirror name) are kept in `meta_json` as `bug_patch` and
`upstream_commit`, so a backend without the mirror can rebuild the buggy state. SWE-smith records
need no test patch: their tests already live in the repository.
"""

from __future__ import annotations

import re

from swe_rlvr.formats import fields
from swe_rlvr.formats.fields import BadField
from swe_rlvr.formats.swe_bench import SWE_BENCH_KEYS, common_fields, spec_env
from swe_rlvr.instances import Instance
from swe_rlvr.patches import reverse_patch

_MIRROR_COMMIT = re.compile(r"\.([0-9a-f]{7,40})$")


def from_swe_smith(raw: dict) -> Instance:
    """A SWE-smith record: `patch` introduces the bug, so the gold fix is its reverse."""
    common, bug = common_fields(raw, "swe-smith"), fields.patch(raw, "patch")
    try:
        fix = reverse_patch(bug)
    except ValueError as exc:
        raise BadField("patch", f"cannot be reversed into a fix: {exc}") from None
    upstream = _MIRROR_COMMIT.search(common["repo"])
    extra = {"bug_patch": bug, "upstream_commit": upstream.group(1) if upstream else ""}
    return Instance(
        **common,
        base_commit=fields.text(raw, "base_commit", required=False) or common["instance_id"],
        patch=fix, test_patch=fields.patch(raw, "test_patch", required=False),
        env=spec_env(raw, common),
        meta_json=fields.meta_json(raw, SWE_BENCH_KEYS | {"base_commit"}, extra),
    )
