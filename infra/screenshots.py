"""Screenshots of one real run in the Prefect and MLflow UIs, for docs/.

Starts a `prefect server` and an `mlflow server` on 127.0.0.1 (in a temp dir), runs one short
training run through them (`swe-rlvr train`: the tiny random model driven by the scripted gold
policy, so that episodes resolve and the final policy is registered), then photographs with
headless Chromium (`apt-get install chromium`):

    prefect-flow-run.png        the training flow run: its sub-flows on the timeline, state, logs
    prefect-iteration-dag.png   one RL iteration's task graph (rollout -> validate -> ... -> update)
    prefect-artifacts.png       the run's summary artifact in Prefect (it links the MLflow run)
    mlflow-run.png              the MLflow run: its description, datasets, logged models,
                                parameters, per-step pass@1 and the Prefect tags
    mlflow-trace.png            one evaluation episode as a trace: its turns (the LLM's reply,
                                the command, the observation) and its grade
    mlflow-logged-model.png     the final policy as a logged model, with its linked metrics
    mlflow-model-version.png    the registered policy's champion version

    .venv/bin/python infra/screenshots.py [--out docs] [--keep]

Both servers and the run are stopped by their process ids at the end (`--keep` leaves the temp
dir with the servers' logs and databases).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from process_support import free_port, start_mlflow_server, stop, wait_http  # noqa: E402
from process_support import http_json as api


def shoot(url: str, png: Path, width: int = 1600, height: int = 1000, wait_ms: int = 40000) -> None:
    """Headless Chromium's screenshot of `url` once its scripts ran for `wait_ms` (virtual time)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which(
        "google-chrome")
    if not chromium:
        raise SystemExit("no Chromium: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--user-data-dir={profile}",
                        f"--window-size={width},{height}", f"--virtual-time-budget={wait_ms}",
                        f"--screenshot={png}", url], check=True, capture_output=True, timeout=180)
    print(f"{png.name}: {url}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (logs, databases)")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="swe-rlvr-screens-"))
    port = free_port()
    prefect_url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect"),
           "PREFECT_API_URL": f"{prefect_url}/api", "PREFECT_UI_API_URL": f"{prefect_url}/api",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    procs = []
    try:
        with open(tmp / "prefect.log", "w") as log:
            procs.append(subprocess.Popen(
                [PY, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port",
                 str(port)], stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, cwd=ROOT))
        wait_http(f"{prefect_url}/api/health", procs[0], tmp / "prefect.log", timeout=240)
        mlflow, mlflow_url = start_mlflow_server(tmp, env)
        procs.append(mlflow)
        from agent.models import build_tiny
        model = build_tiny(tmp / "tiny")
        overrides = [
            f"orchestration.run_root={tmp / 'runs'}", "orchestration.run_name=screenshots",
            "orchestration.iterations=2", "orchestration.rft_warmup=false",
            "orchestration.eval_base=true", "instances.source=builtin", "instances.limit=2",
            f"engine.model={model}", "engine.name=scripted:gold", "agent.scaffold=bash",
            "algorithm.group_size=2", "guidance.attempts=1", f"sandbox.workdir={tmp / 'work'}",
            "eval.limit=2", "eval.runs=1", "eval.k=1", f"tracking.mlflow_uri={mlflow_url}",
            "tracking.register_final=true", "trainer.pack_tokens=4096"]
        run = subprocess.run([PY, "-m", "swe_rlvr.cli", "train", *overrides, "--json"], env=env,
                             cwd=ROOT, capture_output=True, text=True, timeout=1800)
        (tmp / "train.log").write_text(run.stdout + run.stderr)
        if run.returncode != 0:
            raise SystemExit(f"the run failed: {(run.stdout + run.stderr)[-3000:]}")
        text = "\n" + run.stdout                  # --json prints the result as one JSON object
        result, _ = json.JSONDecoder().raw_decode(text[text.index("\n{") + 1:])
        mlflow_run = api(f"{mlflow_url}/api/2.0/mlflow/runs/get?run_id={result['mlflow_run_id']}")
        info, tags = mlflow_run["run"]["info"], {t["key"]: t["value"]
                                                 for t in mlflow_run["run"]["data"]["tags"]}
        flow_run = tags["prefect.flow_run_id"]
        children = api(f"{prefect_url}/api/flow_runs/filter", {
            "flow_runs": {"parent_flow_run_id": {"operator": "and_", "any_": [flow_run]}},
            "sort": "START_TIME_ASC"})
        iteration = next(f["id"] for f in children if f["name"] == "iteration-0")
        args.out.mkdir(parents=True, exist_ok=True)
        shoot(f"{prefect_url}/runs/flow-run/{flow_run}", args.out / "prefect-flow-run.png")
        shoot(f"{prefect_url}/runs/flow-run/{iteration}", args.out / "prefect-iteration-dag.png")
        artifacts = api(f"{prefect_url}/api/artifacts/filter",
                        {"artifacts": {"flow_run_id": {"any_": [flow_run]}}})
        summary = next(a["id"] for a in artifacts if (a.get("key") or "").endswith("-summary"))
        shoot(f"{prefect_url}/artifacts/artifact/{summary}", args.out / "prefect-artifacts.png")
        view = "workflowType=machine_learning"     # tasks.tracking.ML_VIEW
        experiment = info["experiment_id"]
        shoot(f"{mlflow_url}/#/experiments/{experiment}/runs/{info['run_id']}?{view}",
              args.out / "mlflow-run.png", height=1400)
        import mlflow

        from tasks.traces import trace_link
        mlflow.set_tracking_uri(mlflow_url)
        episodes = mlflow.search_traces(locations=[experiment], run_id=info["run_id"],
                                        filter_string="tags.stage = 'eval'", max_results=1,
                                        return_type="list", include_spans=False)
        shoot(trace_link(mlflow_url, experiment, episodes[0].info.trace_id),
              args.out / "mlflow-trace.png")
        champion = api(f"{mlflow_url}/api/2.0/mlflow/registered-models/alias"
                       f"?name=swe-rlvr-policy&alias=champion")["model_version"]
        model_id = {t["key"]: t["value"] for t in champion["tags"]}["model_id"]
        shoot(f"{mlflow_url}/#/experiments/{experiment}/models/{model_id}?{view}",
              args.out / "mlflow-logged-model.png")
        shoot(f"{mlflow_url}/#/models/swe-rlvr-policy/versions/{champion['version']}?{view}",
              args.out / "mlflow-model-version.png")
    finally:
        for proc in reversed(procs):
            stop(proc)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
