"""The agent loop's own overhead per turn, excluding generation and execution (target <= 2 ms).

Runs episodes of a replayed policy (a fixed mix of viewer, editor, search and shell actions, then
`submit`) through the real loop and the local sandbox on a generated repository. The loop measures
engine time (`gen_s`) and tool time (`exec_s`) itself; what is left of the wall time, divided by the
turns, is the loop's overhead: parsing, observation truncation, template deltas, tokenisation and
trajectory bookkeeping. Tool time includes the file tools' Python work on top of the sandbox calls.

On a shared machine the wall-clock figure includes time the loop thread spent waiting for a CPU, so
the bench also reports the loop thread's CPU time outside the engine and sandbox calls (measured by
wrapping both with `time.thread_time()`); there the file tools' Python work counts as loop time.

    python -m bench.agent [--episodes 5] [--turns 30] [--scaffold swe-agent] [--model DIR] [--engines]

`--engines` also runs `bench.engines.main()` (hf vs vllm throughput) when that module exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE_LINES = 600


def make_repo(root: Path) -> Path:
    """A git repo with one long module (so windows and searches have something to show)."""
    (root / "pkg").mkdir(parents=True)
    body = "\n".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(MODULE_LINES // 3))
    (root / "pkg" / "mod.py").write_text(body)
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", *cmd], cwd=root, check=True)
    return root


def actions(turns: int, scaffold: str) -> list[str]:
    """`turns` replies cycling through the scaffold's actions."""
    tools = ["open pkg/mod.py 100", "scroll_down", "goto 300", "search_file 'return x + 7'",
             "edit 10:11 <<'EOF'\ndef f3(x):\n    return x - 3\nEOF", "ls -la pkg",
             "replace pkg/mod.py <<'OLD' <<'NEW'\n    return x + 42\nOLD\n    return x + 4200\nNEW",
             "grep -n 'def f1' pkg/mod.py | head -5"]
    shell = ["sed -n 1,100p pkg/mod.py", "grep -n 'return' pkg/mod.py | head -50", "ls -la",
             "sed -i 's/x + 5$/x + 55/' pkg/mod.py", "git status --short"]
    cycle = tools if scaffold == "swe-agent" else shell
    return [f"Next.\n```bash\n{cycle[k % len(cycle)]}\n```" for k in range(turns)]


class CpuClock:
    """Wraps an engine or a sandbox and adds up this thread's CPU time spent inside its methods."""

    def __init__(self, inner, methods: tuple[str, ...]):
        self.inner, self.cpu_s = inner, 0.0
        for name in methods:
            setattr(self, name, self._timed(getattr(inner, name)))

    def _timed(self, method):
        def call(*args, **kwargs):
            began = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.cpu_s += time.thread_time() - began
        return call

    def __getattr__(self, name):
        return getattr(self.inner, name)


def bench_loop(args, tokenizer, tmp: Path) -> dict[str, list[float]]:
    """Per-turn seconds of each episode: wall-clock overhead (in-loop timers), CPU overhead, tokenising."""
    from agent.loop import run_episode
    from agent.scripted import ReplayPolicy
    from sandbox import open_sandbox
    from swe_rlvr.config import AgentConfig, SandboxConfig
    from swe_rlvr.instances import Instance

    store = tmp / "store"
    make_repo(store / "bench__repo")
    instance = Instance("bench__repo-1", "bench/repo", "HEAD", "Make f3 subtract.", "", "", (), ())
    sandbox_cfg = SandboxConfig(isolation=args.isolation, workdir=str(tmp / "work"), env_cache=str(tmp / "envs"))
    agent_cfg = AgentConfig(scaffold=args.scaffold, max_turns=args.turns + 1, context_tokens=1 << 20)
    policy = ReplayPolicy(tokenizer, actions(args.turns, args.scaffold))
    out: dict[str, list[float]] = {"wall": [], "cpu": [], "tokenise": []}
    for k in range(args.episodes + 1):                       # episode 0 warms caches up
        with open_sandbox(instance, sandbox_cfg, store) as raw_box:
            engine = CpuClock(policy, ("generate",))
            box = CpuClock(raw_box, ("execute", "read_file", "write_file", "diff"))
            began = time.thread_time()
            traj = run_episode(instance, box, engine, agent_cfg)
            cpu = (time.thread_time() - began - engine.cpu_s - box.cpu_s) / traj.turns
        wall = (traj.wall_s - traj.gen_s - traj.exec_s) / traj.turns
        encode = observation_encode_s(traj, policy.chat) / traj.turns
        if k:
            for key, value in (("wall", wall), ("cpu", cpu), ("tokenise", encode)):
                out[key].append(value)
            print(f"episode {k}: {traj.turns} turns, {len(traj.token_ids)} tokens, wall {traj.wall_s:.3f} s, "
                  f"gen {traj.gen_s:.3f} s, exec {traj.exec_s:.3f} s; loop {wall * 1e3:.3f} ms/turn wall, "
                  f"{cpu * 1e3:.3f} ms/turn CPU (tokenising the observation ~{encode * 1e3:.3f} ms)")
    return out


def observation_encode_s(traj, chat, repeats: int = 3) -> float:
    """Time to tokenise the episode's observation deltas again (the loop did exactly this work);
    the fastest of `repeats` runs, since other processes only ever add time."""
    observations = [m["content"] for m in traj.messages[2:] if m["role"] == "user"]
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        for text in observations:
            chat.user_delta(text)
        best = min(best, time.perf_counter() - began)
    return best


def load_tokenizer(model: str, tmp: Path):
    from transformers import AutoTokenizer

    if not model:
        from agent.models import build_tiny
        model = str(build_tiny(tmp / "tiny"))
    return AutoTokenizer.from_pretrained(model)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--scaffold", default="swe-agent", choices=["swe-agent", "bash"])
    parser.add_argument("--isolation", default="auto", help="local sandbox isolation level")
    parser.add_argument("--model", default="", help="HF dir for the tokenizer (default: build the tiny one)")
    parser.add_argument("--engines", action="store_true", help="also run bench.engines (hf vs vllm)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        began = time.monotonic()
        tokenizer = load_tokenizer(args.model, Path(tmp))
        times = bench_loop(args, tokenizer, Path(tmp))
        ms = {key: [v * 1e3 for v in values] for key, values in times.items()}
        wall, cpu = statistics.median(ms["wall"]), statistics.median(ms["cpu"])
        print(f"\nloop overhead per turn ({args.scaffold}, {len(ms['wall'])} episodes x {args.turns} turns, "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs):\n"
              f"  wall clock (wall - gen - exec, in-loop timers): median {wall:.3f} ms, "
              f"min {min(ms['wall']):.3f} ms, max {max(ms['wall']):.3f} ms\n"
              f"  CPU time of the loop thread outside engine and sandbox: median {cpu:.3f} ms "
              f"(of it tokenising observations ~{min(ms['tokenise']):.3f} ms)\n"
              f"  target <= 2 ms: {'met' if wall <= 2 else 'missed'} (wall), "
              f"{'met' if cpu <= 2 else 'missed'} (CPU); bench took {time.monotonic() - began:.0f} s")

    # ----------------------------------------------------------------- engines (bench/engines.py)
    if args.engines:
        if importlib.util.find_spec("bench.engines") is None:
            print("bench.engines is not available; skipping the engine throughput section.")
        else:
            from bench.engines import main as engines_main
            engines_main([])  # its own defaults; our flags are not its flags
    return 0


if __name__ == "__main__":
    sys.exit(main())
