"""Hand-made SWE-bench-family records and the files that hold them, for the loader tests.

`swe_bench_record` is a plain SWE-bench record with real-looking fields (`oemof__tespy-653`, its
fix `PATCH` and its `TEST_PATCH`); pass keyword arguments to change or add fields (an
`install_config` makes it a SWE-rebench record). `write_jsonl` and `write_parquet` write records
the way the datasets ship them.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_parquet(path: Path, records: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


PATCH = """\
diff --git a/src/tespy/tools/helpers.py b/src/tespy/tools/helpers.py
index 3f2a1b0..8c9d4e2 100644
--- a/src/tespy/tools/helpers.py
+++ b/src/tespy/tools/helpers.py
@@ -10,3 +10,3 @@ def convert_to_SI(prop, value, unit):
     if prop == "T":
-        return value + 273.15
+        return value + 273.15 if unit == "C" else value
     return value
"""

TEST_PATCH = """\
diff --git a/tests/test_tools/test_helpers.py b/tests/test_tools/test_helpers.py
index 1a2b3c4..5d6e7f8 100644
--- a/tests/test_tools/test_helpers.py
+++ b/tests/test_tools/test_helpers.py
@@ -1,2 +1,5 @@
 from tespy.tools.helpers import convert_to_SI
 
+
+def test_convert_kelvin():
+    assert convert_to_SI("T", 300, "K") == 300
"""


def swe_bench_record(**changes) -> dict:
    record = {
        "repo": "oemof/tespy", "instance_id": "oemof__tespy-653",
        "base_commit": "6a1fb0fc7b7e6f3a8d1a0c0b9f2f2b2a9e0c6e31", "patch": PATCH,
        "test_patch": TEST_PATCH,
        "problem_statement": "convert_to_SI adds 273.15 to temperatures given in Kelvin\n",
        "hints_text": "", "created_at": "2025-01-14T09:12:44Z", "version": "0.7",
        "FAIL_TO_PASS": ["tests/test_tools/test_helpers.py::test_convert_kelvin"],
        "PASS_TO_PASS": ["tests/test_tools/test_helpers.py::test_convert_celsius"],
        "environment_setup_commit": "6a1fb0fc7b7e6f3a8d1a0c0b9f2f2b2a9e0c6e31",
    }
    record.update(changes)
    return record
