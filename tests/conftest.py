"""Fixtures shared across test modules."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import durations

# Prefect's ephemeral API keeps its SQLite database under PREFECT_HOME. The tests get their own,
# set before any test module imports prefect, so they never read, lock or fill ~/.prefect (a
# second Prefect process on the same database makes the ephemeral server fail "database is locked").
_PREFECT_HOME = tempfile.mkdtemp(prefix="swe-rlvr-test-prefect-")
os.environ["PREFECT_HOME"] = _PREFECT_HOME
os.environ.pop("PREFECT_API_URL", None)
# Its start-up (migrations on a fresh database) can take over Prefect's 20 s default on 2 busy cores.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
atexit.register(shutil.rmtree, _PREFECT_HOME, ignore_errors=True)
# `auto` precision means fp32 on every CPU here, AVX512-BF16 and AMX ones too, so that pinned
# numbers and fp32 equivalences do not depend on the machine kind (swe_rlvr.precision).
os.environ["SWE_RLVR_NO_CPU_BF16"] = "1"

SCOPE_SECONDS = durations.load()
"""Seconds each test scope took when last recorded, per stage (tests/durations.py: longest first)."""
_spent: dict[str, float] = {}


def pytest_collection_modifyitems(config, items):
    seconds = SCOPE_SECONDS.get(config.option.markexpr, {})             # this stage's table
    items[:] = [items[i] for i in durations.ordered([item.nodeid for item in items], seconds)]


def pytest_runtest_logreport(report):
    """Seconds per scope (setup, call and teardown), summed where the reports arrive: in the
    xdist controller for the whole run, when SWE_RLVR_TEST_DURATIONS names a record to write."""
    if os.environ.get(durations.ENV):
        scope = durations.scope_of(report.nodeid)
        _spent[scope] = _spent.get(scope, 0.0) + report.duration


def pytest_sessionfinish(session):
    path = os.environ.get(durations.ENV)
    if path and _spent and not hasattr(session.config, "workerinput"):   # the controller only
        record = Path(path)
        tables = durations.merged(durations.load(record), session.config.option.markexpr, _spent)
        record.write_text(json.dumps(tables, indent=1) + "\n")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Qwen2 model with an offline BPE tokenizer, built once per test session."""
    from agent.models import build_tiny
    return build_tiny(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def prefect_api():
    """One real Prefect API (a temporary SQLite database) for the whole test run, as Prefect's
    testing guide advises: a harness per module paid its start-up (migrations) every time. Under
    pytest-xdist each worker has its own, beside its own PREFECT_HOME."""
    from prefect.testing.utilities import prefect_test_harness
    with prefect_test_harness(server_startup_timeout=180):
        yield


@pytest.fixture(scope="session")
def builtin_repo_store(tmp_path_factory):
    """One store of the built-in suite's git repos, materialised on first use and shared by every
    test that rolls out or grades built-in instances (`swe_rlvr.builtin.materialize` is
    idempotent and safe under concurrent callers)."""
    return tmp_path_factory.mktemp("builtin-repo-store")


@pytest.fixture
def one_torch_thread():
    """torch on one thread for the test (gradients summed in one order: comparisons to 1e-6 hold)."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
