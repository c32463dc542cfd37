"""Guidance sources: AST localisation, feedback, leakage, and the teacher's fallback."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.guidance_sources import Failure, RulesSource, enclosing_symbol, feedback_text, leakage, locate
from agent.recovery import make_source
from agent.teacher import TeacherSource, parse_teacher
from swe_rlvr.config import GuidanceConfig
from swe_rlvr.instances import Instance

BASE = '''import math


class Money:
    def __init__(self, cents):
        self.cents = cents

    def split(self, parts):
        share = self.cents // parts
        return [share] * parts


def total(items):
    return sum(i.cents for i in items)
'''

# Line 9 `share = ...` sits inside Money.split (lines 8-10); line 14 inside total (13-14).
GOLD = '''diff --git a/shop/money.py b/shop/money.py
--- a/shop/money.py
+++ b/shop/money.py
@@ -8,3 +8,5 @@ class Money:
     def split(self, parts):
-        share = self.cents // parts
-        return [share] * parts
+        share, rest = divmod(self.cents, parts)
+        out = [share] * parts
+        out[0] += rest
+        return out
@@ -14 +16 @@ def total(items):
-    return sum(i.cents for i in items)
+    return sum(i.cents for i in items if i is not None)
'''


def make_instance(patch: str = GOLD) -> Instance:
    return Instance(instance_id="shop-1", repo="acme/shop", base_commit="abc",
                    problem_statement="Money.split loses cents. Splitting 10 cents in 3 gives 9.",
                    patch=patch, test_patch="", fail_to_pass=("tests/test_money.py::test_split",),
                    pass_to_pass=())


def read_base(instance: Instance, path: str) -> str:
    return {"shop/money.py": BASE}.get(path, "")


def test_enclosing_symbol_is_innermost_qualified_name():
    assert enclosing_symbol(BASE, 9) == ("Money.split", "function")
    assert enclosing_symbol(BASE, 5) == ("Money.__init__", "function")
    assert enclosing_symbol(BASE, 14) == ("total", "function")
    assert enclosing_symbol(BASE, 1) == ("", "")          # an import at module level
    assert enclosing_symbol("def broken(:\n", 1) == ("", "")  # unparsable: no symbol, no crash


def test_enclosing_symbol_names_module_and_class_constants():
    source = "LIMIT = 3\n\nclass Box:\n    SIZE: int = (\n        4)\n\n    def f(self):\n        x = 1\n"
    assert enclosing_symbol(source, 1) == ("LIMIT", "name")
    assert enclosing_symbol(source, 5) == ("Box.SIZE", "name")     # line 5 continues line 4
    assert enclosing_symbol(source, 8) == ("Box.f", "function")    # a local is not a definition


def test_locate_names_file_function_and_removed_lines():
    locations = locate(make_instance(), read_base)
    described = [loc.describe() for loc in locations]
    # Hunk 1 removes base lines 9 and 10 (the context line 8 is not a change).
    assert described == ["- File `shop/money.py`, function `Money.split` (lines 9-10)",
                         "- File `shop/money.py`, function `total` (line 14)"]


def test_feedback_reports_tests_assertions_frames_and_format_errors():
    log = ("tests/test_money.py:12: in test_split\n"
           "E       assert [3, 3, 3] == [4, 3, 3]\n"
           "shop/money.py:10: AssertionError\n")
    text = feedback_text(Failure(patch="diff", f2p_failed=("tests/test_money.py::test_split",),
                                 log_excerpt=log, format_errors=2))
    assert "`tests/test_money.py::test_split`" in text
    assert "assert [3, 3, 3] == [4, 3, 3]" in text
    assert "tests/test_money.py:12: in test_split" in text
    assert "2 of your replies had no single valid command block" in text


def test_feedback_for_empty_patch_and_budget():
    text = feedback_text(Failure(patch="", termination="max_turns"))
    assert "submitted no change" in text and "max turns" in text


def test_leakage_zero_for_location_only_and_positive_when_fix_is_copied():
    instance = make_instance()
    location_only = RulesSource(read_base, GuidanceConfig(parts=("location",)))
    g = location_only.make(instance, Failure())
    assert g.leakage == 0.0
    # The gold patch adds 5 lines of >= 8 chars once stripped: "share, rest = divmod(...)" (39),
    # "out = [share] * parts" (21), "out[0] += rest" (14), "return out" (10) and
    # "return sum(... if i is not None)" (51). Copying two of them verbatim leaks 2/5.
    copied = "do this:\n    share, rest = divmod(self.cents, parts)\n    out[0] += rest\n"
    assert leakage(copied, GOLD) == pytest.approx(2 / 5)
    assert leakage("return x", GOLD) == 0.0  # 8 chars, but not a line of the fix


def test_default_rules_guidance_has_three_parts_and_no_verbatim_code():
    g = make_source(GuidanceConfig(), read_base).make(instance := make_instance(),
                                                       Failure(patch="", termination="submitted"))
    text = g.text()
    assert text.index("Plan:") < text.index("Feedback") < text.index("Location:")
    assert "Money.split" in text and g.leakage == 0.0
    verbatim = make_source(GuidanceConfig(allow_verbatim=True), read_base).make(instance, Failure())
    assert verbatim.leakage == 1.0


def test_unknown_source_and_part_name_the_fix():
    with pytest.raises(ValueError, match="choose one of: rules, teacher"):
        make_source(GuidanceConfig(source="oracle"), read_base)
    with pytest.raises(ValueError, match="guidance.parts"):
        make_source(GuidanceConfig(parts=("hint",)), read_base)
    with pytest.raises(ValueError, match="teacher_base_url"):
        make_source(GuidanceConfig(source="teacher"), read_base)


def test_parse_teacher_requires_all_sections():
    answer = "PLAN: fix split\nFEEDBACK: you edited tests\nLOCATION: shop/money.py Money.split"
    assert parse_teacher(answer) == {"plan": "fix split", "feedback": "you edited tests",
                                     "location": "shop/money.py Money.split"}
    with pytest.raises(ValueError, match="LOCATION"):
        parse_teacher("PLAN: a\nFEEDBACK: b")


class _Teacher(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible /chat/completions endpoint on 127.0.0.1."""

    answer = ""
    calls = 0
    trickle_s = 0.0
    """Seconds between the answer's bytes (0: all at once)."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        type(self).calls += 1
        length = int(self.headers["Content-Length"])
        request = json.loads(self.rfile.read(length))
        assert request["messages"][0]["content"].startswith("You are a senior engineer")
        body = json.dumps({"choices": [{"message": {"content": type(self).answer}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not type(self).trickle_s:
            self.wfile.write(body)
            return
        for i in range(len(body)):
            self.wfile.write(body[i:i + 1])
            self.wfile.flush()
            time.sleep(type(self).trickle_s)

    def log_message(self, *args):
        pass


@pytest.fixture
def teacher_server():
    _Teacher.trickle_s = 0.0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Teacher)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def test_teacher_answer_is_used_and_cached(teacher_server, tmp_path):
    _Teacher.answer = "PLAN: split with divmod\nFEEDBACK: empty patch\nLOCATION: Money.split"
    _Teacher.calls = 0
    cfg = GuidanceConfig(source="teacher", teacher_base_url=teacher_server, teacher_model="t")
    source = make_source(cfg, read_base, cache_dir=tmp_path)
    first = source.make(make_instance(), Failure(episode_id="e1"))
    second = source.make(make_instance(), Failure(episode_id="e1"))
    assert first.source == "teacher" and first.plan == "split with divmod"
    assert second.plan == first.plan and _Teacher.calls == 1  # the second came from the cache


def test_teacher_bad_output_falls_back_to_rules(teacher_server, caplog):
    _Teacher.answer = "I think you should try harder."
    cfg = GuidanceConfig(source="teacher", teacher_base_url=teacher_server, teacher_model="t")
    with caplog.at_level(logging.WARNING):
        g = TeacherSource(read_base, cfg).make(make_instance(), Failure())
    assert g.source == "rules" and "Money.split" in g.location
    assert "falling back to rules" in caplog.text


def test_teacher_unreachable_falls_back_to_rules(caplog):
    cfg = GuidanceConfig(source="teacher", teacher_base_url="http://127.0.0.1:9/v1",
                         teacher_model="t", teacher_timeout_s=2)
    with caplog.at_level(logging.WARNING):
        g = TeacherSource(read_base, cfg).make(make_instance(), Failure())
    assert g.source == "rules" and "falling back" in caplog.text


def test_a_silent_teacher_times_out_and_falls_back_to_rules(caplog):
    """A server that accepts the request and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        cfg = GuidanceConfig(source="teacher", teacher_base_url=url, teacher_model="t",
                             teacher_timeout_s=0.3)
        with caplog.at_level(logging.WARNING):
            g = TeacherSource(read_base, cfg).make(make_instance(), Failure())
    assert g == RulesSource(read_base, cfg).make(make_instance(), Failure())
    assert "timed out" in caplog.text and "falling back to rules" in caplog.text


def test_a_trickling_teacher_times_out_on_the_whole_request(teacher_server, caplog):
    """Each byte arrives well within the timeout, the whole answer (~90 bytes, 20 ms apart) does
    not: the limit bounds the request, not each socket wait."""
    _Teacher.answer = "PLAN: a\nFEEDBACK: b\nLOCATION: c"
    _Teacher.trickle_s = 0.02
    cfg = GuidanceConfig(source="teacher", teacher_base_url=teacher_server, teacher_model="t",
                         teacher_timeout_s=0.5)
    start = time.monotonic()
    with caplog.at_level(logging.WARNING):
        g = TeacherSource(read_base, cfg).make(make_instance(), Failure())
    assert g.source == "rules" and "timed out" in caplog.text
    assert time.monotonic() - start < 0.5 + 0.5 + 1.0     # the deadline plus one socket wait
