"""`bench/decode_step.py` on the tiny model: the step's split adds up to its wall time, and the
check refuses a decode step that does not compute the whole sequence's next-token law."""

from __future__ import annotations

import re

import pytest
import torch

from bench import decode_step


@pytest.mark.parametrize("forward", decode_step.FORWARDS)
def test_the_split_of_a_step_adds_up_to_its_wall_time(tiny_model_dir, capsys, forward):
    assert decode_step.main(["--model", str(tiny_model_dir), "--rows", "3", "--context", "40",
                             "--steps", "3", "--threads", "1", "--forward", forward]) == 0
    out = capsys.readouterr().out
    assert f"-- {forward} forward" in out and "lean/hf" not in out
    ms = {name: float(re.search(rf"^{name}\s+(-?[\d.]+) ms", out, re.M).group(1))
          for name in ("step", "linears", "attention", "other ops", "python/rest", "roofline")}
    parts = ms["linears"] + ms["attention"] + ms["other ops"] + ms["python/rest"]
    assert parts == pytest.approx(ms["step"], abs=0.2)            # each printed to 0.1 ms
    assert ms["linears"] > 0 and ms["roofline"] > 0
    assert "fp32 check" in out and "wall/roof" in out
    rows, cached = map(int, re.search(r"(\d+) rows over (\d+) cached tokens", out).groups())
    assert (rows, cached) == (3, 40 + 2 + 3)          # the prompt, 2 warm-up steps, the timed ones


def test_both_forwards_are_timed_over_caches_of_their_own_and_compared(tiny_model_dir, capsys):
    assert decode_step.main(["--model", str(tiny_model_dir), "--rows", "2", "--context", "20",
                             "--steps", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert out.index("-- hf forward") < out.index("-- lean forward") < out.index("lean/hf")
    steps = [float(x) for x in re.findall(r"^step\s+([\d.]+) ms  \(median of 4;", out, re.M)]
    ratio = float(re.search(r"^lean/hf\s+([\d.]+)", out, re.M).group(1))
    assert len(steps) == 2
    hf, lean = steps                       # printed to 0.1 ms: each within 0.05 of what was divided
    assert (lean - 0.05) / (hf + 0.05) - 0.005 <= ratio <= (lean + 0.05) / (hf - 0.05) + 0.005
    rows, cached = map(int, re.search(r"(\d+) rows over (\d+) cached tokens", out).groups())
    assert (rows, cached) == (2, 20 + 2 + 2 * 2)     # two interleaved rounds of 2 steps each


def test_the_profile_puts_the_products_where_they_belong(tiny_model_dir):
    """The tiny model's 2 layers: per step, the packed linears (7 a layer and the head) and two
    bmm a layer in the grouped decode attention."""
    model, _ = decode_step.load(str(tiny_model_dir), torch.float32, True)
    with torch.inference_mode():
        decoder = decode_step.Decoder(model, torch.randint(0, 64, (2, 12)))
        split = decode_step.profile(decoder, 2)
    assert split["linears"] > 0 and split["attention"] > 0 and split["other"] > 0
    assert split["calls"] > 2 * 7 + 1 + 2 * 2


@pytest.mark.parametrize("forward", decode_step.FORWARDS)
def test_a_step_that_computes_something_else_is_refused(tiny_model_dir, monkeypatch, forward):
    step = decode_step.Decoder.step

    def off(self):
        token = step(self)
        if (self.lean is not None) == (forward == "lean"):
            self.logits = self.logits + torch.randn_like(self.logits)
        return token

    monkeypatch.setattr(decode_step.Decoder, "step", off)
    vocab = 64
    ids = torch.randint(0, vocab, (2, 12), generator=torch.Generator().manual_seed(0))
    with pytest.raises(SystemExit, match=f"{forward} forward.*differ from a whole forward"):
        decode_step.check(str(tiny_model_dir), ids)


def test_beside_times_the_steps_with_busy_python_threads_then_processes(tiny_model_dir, capsys):
    threads = decode_step.threading.active_count()
    assert decode_step.main(["--model", str(tiny_model_dir), "--rows", "2", "--context", "16",
                             "--steps", "2", "--beside", "2", "--duty", "0.5"]) == 0
    out = capsys.readouterr().out
    line = [x for x in out.splitlines() if x.startswith("beside")][0]
    assert "with 2 Python thread(s) busy 50% of the time" in line and "ms alone after" in line
    assert "with 2 Python process(es) busy as much" in out
    assert decode_step.threading.active_count() == threads          # the busy threads joined


@pytest.mark.parametrize("duty", ["0", "1.5"])
def test_a_duty_outside_its_range_is_refused_by_name(duty):
    with pytest.raises(SystemExit, match="--duty"):
        decode_step.main(["--duty", duty])
