"""The openai engine's client side, without vLLM: unreachable servers, and the wire format.

The wire format is checked against a small /v1/completions server in a thread that answers like
vLLM (`token_ids` from `return_token_ids`, `logprobs.token_logprobs`) with the hf engine behind
it; tests/test_vllm_server.py runs the same client against vLLM's real server.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent.engines import SamplingParams, is_unfiltered, make_engine  # noqa: E402
from agent.engines.openai import EngineUnavailable  # noqa: E402
from swe_rlvr.config import EngineConfig  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """The session's tiny Qwen2 (tests/conftest.py: build_tiny with its defaults, seed 0)."""
    torch.set_num_threads(1)  # the CI box is shared; one thread is also the fastest here
    return tiny_model_dir


def _closed_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block exits: nothing listens there


def test_unreachable_server_names_the_url(tiny):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(EngineUnavailable, match=f"{url}/models.*after 2 tries"):
        make_engine(EngineConfig(name="openai", model=str(tiny), base_url=url, max_retries=1))


def test_missing_base_url_says_what_to_set(tiny):
    with pytest.raises(ValueError, match="engine.base_url"):
        make_engine(EngineConfig(name="openai", model=str(tiny)))


@pytest.fixture(scope="module")
def hf_backed_server(tiny):
    """A vLLM-shaped /v1/completions endpoint answering from the hf engine; records each body."""
    hf = make_engine(EngineConfig(name="hf", model=str(tiny), torch_threads=1))
    bodies: list[dict] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep pytest output clean
            pass

        def _reply(self, payload: dict) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            self._reply({"data": [{"id": "tiny"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                bodies.append(body)
                sample = hf.generate([body["prompt"]], SamplingParams(
                    temperature=body["temperature"], max_new_tokens=body["max_tokens"],
                    stop_token_ids=tuple(body["stop_token_ids"]), seed=body["seed"]))[0]
            self._reply({"choices": [{"index": 0, "text": "", "token_ids": sample.token_ids,
                                      "finish_reason": sample.finish_reason,
                                      "logprobs": {"token_logprobs": sample.logprobs}}]})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", bodies, hf
    server.shutdown()
    server.server_close()


def test_wire_format_token_ids_logprobs_and_forced_knobs(tiny, hf_backed_server):
    url, bodies, hf = hf_backed_server
    engine = make_engine(EngineConfig(name="openai", model=str(tiny), base_url=url))
    assert engine.served_model == "tiny"
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": "ls"}],
                                                  add_generation_prompt=True, return_dict=False)
    samples = engine.generate([prompt] * 3, SamplingParams(temperature=0.8, max_new_tokens=6, seed=10))
    assert len(samples) == 3 and all(len(s.token_ids) == len(s.logprobs) > 0 for s in samples)
    sent = sorted(bodies[-3:], key=lambda b: b["seed"])
    assert [b["seed"] for b in sent] == [10, 11, 12]          # prompt i carries seed + i
    for body in sent:
        assert body["prompt"] == prompt and body["return_token_ids"] is True and body["logprobs"] == 1
        assert is_unfiltered(body) and body["temperature"] == 0.8
    # What came back is what the server's engine sampled for that seed.
    direct = hf.generate([prompt], SamplingParams(temperature=0.8, max_new_tokens=6, seed=10))[0]
    assert samples[0].token_ids == direct.token_ids and samples[0].logprobs == direct.logprobs
    assert is_unfiltered(engine.effective_sampling())


@pytest.fixture()
def reload_server():
    """A server that records POSTs to its reload endpoints; `reloads=False`: it has none (404)."""
    calls: list[tuple[str, dict]] = []
    state = {"reloads": True}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _reply(self, code: int, payload: dict) -> None:
            raw = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            self._reply(200, {"data": [{"id": "policy"}]})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            if not state["reloads"]:
                return self._reply(404, {"detail": "Not Found"})
            calls.append((self.path, body))
            self._reply(200, {})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", calls, state
    server.shutdown()
    server.server_close()


def test_a_stage_moves_the_users_server_onto_its_policy(tmp_path, reload_server):
    """engine.name=openai: the server was started on engine.model. A stage sampling another
    policy reloads the server onto it first, once; a stage sampling the base model again after
    that reloads it back; a server that cannot reload is refused with the fix, never sampled
    stale (its episodes would carry the new policy's version)."""
    from agent.engines.openai import serve_policy
    from agent.models import build_tiny
    url, calls, state = reload_server
    base, new = (build_tiny(tmp_path / name, seed=seed, tie_embeddings=False)
                 for name, seed in (("base", 0), ("new", 1)))
    cfg = EngineConfig(name="openai", model=str(base), base_url=url, served_model="policy")
    serve_policy(cfg, str(base))
    assert calls == []                                         # it holds the base model
    serve_policy(cfg, str(new))
    assert [path for path, _ in calls] == ["/collective_rpc", "/reset_prefix_cache"]
    assert calls[0][1] == {"method": "reload_weights", "kwargs": {"weights_path": str(new)}}
    serve_policy(cfg, str(new))
    assert len(calls) == 2                                     # already there
    serve_policy(cfg, str(base))
    assert calls[-2][1]["kwargs"]["weights_path"] == str(base)
    state["reloads"] = False
    with pytest.raises(RuntimeError, match="VLLM_SERVER_DEV_MODE=1"):
        serve_policy(cfg, str(new))
