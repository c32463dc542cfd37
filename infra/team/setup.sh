#!/usr/bin/env bash
# The team stack's one-shot set-up (the `setup` service of infra/docker-compose.yml), run from
# /app in the team image against the stack's Prefect server:
#   1. the policy model on the `runs` volume, once: `swe-rlvr model $SWE_RLVR_MODEL` (smollm2 by
#      default; `tiny` for a smoke test) at /runs/models/<kind>;
#   2. `swe-rlvr deploy` of both deployments for the worker's pool, with the stack's settings (the
#      model, the docker sandbox through the engine's socket, runs on the volume, the MLflow server
#      and the URL a browser on the host opens it by)
#      and then $SWE_RLVR_OVERRIDES (space-separated KEY=VALUE, applied last). The deployments
#      are registered from /app, where the worker has the same code.
set -euo pipefail

kind=${SWE_RLVR_MODEL:-smollm2}
model=/runs/models/$kind
if [ ! -f "$model/config.json" ]; then
  echo "[team-setup] building the $kind model at $model (once)"
  swe-rlvr model "$kind" "$model"
fi
echo "[team-setup] registering the deployments (config ${SWE_RLVR_CONFIG:-configs/quickstart.yaml})"
# shellcheck disable=SC2086  # the overrides are a space-separated KEY=VALUE list
exec swe-rlvr deploy --config "${SWE_RLVR_CONFIG:-configs/quickstart.yaml}" \
  engine.model="$model" sandbox.backend=docker orchestration.run_root=/runs/runs \
  sandbox.workdir=/runs/work tracking.mlflow_uri=http://mlflow:5000 \
  tracking.ui_url="${SWE_RLVR_MLFLOW_UI:-http://127.0.0.1:5000}" \
  ${SWE_RLVR_OVERRIDES:-}
