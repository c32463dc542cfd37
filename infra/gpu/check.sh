#!/usr/bin/env bash
# What the CPU cannot prove, in one run on a GPU machine (one H100/H200, torch and
# transformers preinstalled, no registry). Each step has a time budget and prints one verdict line,
# `PASS|FAIL|SKIP <step> (<s>s): <reason>`, and its whole log goes to <out>/<step>.log:
#   setup      install the carried wheels (.gpu-wheels/, from infra/gpu/prepare.sh) into a private
#              target and import everything the steps need (infra/gpu/imports.py)
#   gpu-tests  pytest -m gpu: varlen attention vs per-segment SDPA, compiled vs eager, shared-prefix
#              rows, in bf16 on CUDA (tests/test_trainer_gpu.py; the 2-GPU launch test skips on one)
#   deepspeed  the ZeRO-2 and ZeRO-3 equivalence tests on the GPU (SWE_RLVR_TEST_DEVICE=cuda)
#   bench      bench/trainer.py --gpu: MFU at the 1.5B shape, 16k packed tokens, eager and
#              compiled, with and without gradient checkpointing
#   engine     the hf engine's batched generation on CUDA vs a CPU float32 forward, and tok/s
#   e2e        one tiny iteration rollout -> validate -> reward -> update, engine and trainer on
#              CUDA, without Prefect (infra/gpu/e2e_check.py)
#
#   bash infra/gpu/check.sh [--dry-run] [--out DIR] [--steps a,b,...] [--wheels DIR]
#
# --dry-run (a machine without a GPU): every step is still invoked; the CUDA-only ones only collect
# or parse (SKIP: no GPU), engine and e2e run on CPU at tiny size, and setup checks the wheel
# folder against an emulation of the GPU image. --out defaults to $OUT, else a new temp dir.
# --steps picks steps (setup always runs): the whole budget is over a 10-minute limit per command,
# so run `--steps gpu-tests,deepspeed,engine,e2e` and then `--steps bench` (README, "On a GPU").
# Exit status: 0 when no step failed, 1 when one did, 2 for a usage error or no GPU.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

STEPS=(setup gpu-tests deepspeed bench engine e2e)
# seconds per step on the GPU (780 in all: 525 for the first call, 300 for `--steps bench`)
# and in a dry run on a 2-core CPU (280 in all; about 100 are used)
declare -A BUDGET=([setup]=45 [gpu-tests]=120 [deepspeed]=150 [bench]=255 [engine]=90 [e2e]=120)
declare -A DRY_BUDGET=([setup]=60 [gpu-tests]=30 [deepspeed]=30 [bench]=10 [engine]=60 [e2e]=90)
BENCH_VARIANTS=compile-varlen,eager-varlen,compile-varlen-ckpt,eager-varlen-ckpt

dry=0 out=${OUT:-} only="" wheels=.gpu-wheels
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; shift ;;
    --out) out=$2; shift 2 ;;
    --steps) only=$2; shift 2 ;;
    --wheels) wheels=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "check.sh: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done
if [ -n "$only" ]; then
  for s in ${only//,/ }; do
    [ -n "${BUDGET[$s]:-}" ] || { echo "check.sh: unknown step '$s'; choose from: ${STEPS[*]}" >&2; exit 2; }
  done
  picked=(setup); for s in "${STEPS[@]:1}"; do [[ ",$only," == *",$s,"* ]] && picked+=("$s"); done
  STEPS=("${picked[@]}")
fi
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-work.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ "$dry" = 1 ]; then PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
else PY=${PYTHON:-python3}; fi
command -v "$PY" >/dev/null || { echo "check.sh: no Python at '$PY'; set PYTHON" >&2; exit 2; }
if [ "$dry" = 0 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "check.sh: torch sees no CUDA GPU on this machine; run this on the GPU machine, or run" >&2
  echo "  'bash infra/gpu/check.sh --dry-run' to check the wiring on CPU" >&2
  exit 2
fi

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# the image's own pytest plugins (xdist, cov, benchmark, ...) may not fit the carried pytest; so
# the steps' pytest also drops pyproject's addopts (`-o addopts=`), whose `-n auto` needs xdist
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
if [ "$dry" = 1 ]; then
  # the steps run in the emulated image that setup links (only its + the carried packages)
  SITE=$work/image RUN=("$PY" -S)
else
  SITE=${GPU_CHECK_SITE:-/tmp/site} RUN=("$PY")
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
TINY=$work/tiny

# ---------------------------------------------------------------- steps: exit 0 pass, 77 skip;
# the last line written to $REASON (else the log's last line) is the verdict's reason

pytest_summary() { grep -E '(passed|failed|error|skipped|deselected|collected)' "$1" | tail -1 | sed 's/=//g; s/^ *//'; }
pytest_passed() {  # on the GPU a run where every test skipped proves nothing
  pytest_summary "$LOG" >"$REASON"
  grep -q passed "$REASON" || { echo "no test passed: $(cat "$REASON")" >"$REASON"; return 1; }
}

step_setup() {
  ls "$wheels"/*.whl >/dev/null 2>&1 || { echo "no wheels in $wheels: run 'bash infra/gpu/prepare.sh' before, and carry $wheels" >"$REASON"; return 1; }
  local n; n=$(ls "$wheels"/*.whl | wc -l)
  if [ "$dry" = 1 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site312" \
      --python-version 3.12 --implementation cp --only-binary=:all: \
      $(for k in 39 35 34 31 28 27 24 17; do echo --platform manylinux_2_${k}_x86_64; done) \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 "$wheels"/*.whl
    echo "the $n wheels install for cp312 (into a scratch dir)"
    "$PY" infra/gpu/imports.py --emulate "$SITE" || { echo "an import fails in the emulated GPU image (log)" >"$REASON"; return 1; }
    echo "(dry) $n wheels install for cp312; the steps' imports resolve in the emulated GPU image" >"$REASON"
    return 0
  fi
  nvidia-smi || true
  "$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, torch.cuda.get_device_name())'
  local stamp=$SITE/.gpu-check-wheels list; mkdir -p "$SITE"
  list=$(cd "$wheels" && ls -- *.whl)
  if [ "$list" != "$(cat "$stamp" 2>/dev/null)" ]; then   # a warm machine's second call skips this
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$wheels"/*.whl
    echo "$list" >"$stamp"
  fi
  "$PY" infra/gpu/imports.py || { echo "an import fails after installing the $n wheels (log)" >"$REASON"; return 1; }
  echo "$n wheels in $SITE; $("$PY" -c 'import torch; print(torch.cuda.get_device_name(), "torch", torch.__version__)')" >"$REASON"
}

step_gpu_tests() {
  local args=(-m pytest -q -o addopts= -p no:cacheprovider -p pytest_timeout -m gpu tests/test_trainer_gpu.py
              tests/test_trainer_launch.py)
  if [ "$dry" = 1 ]; then
    "${RUN[@]}" "${args[@]}" --collect-only || return 1
    echo "no GPU; wiring checked: $(pytest_summary "$LOG")" >"$REASON"; return 77
  fi
  "${RUN[@]}" "${args[@]}" && pytest_passed
}

step_deepspeed() {
  local args=(-m pytest -q -o addopts= -p no:cacheprovider -p pytest_timeout tests/test_trainer_deepspeed.py
              -k zero_matches_torch_engine)
  if [ "$dry" = 1 ]; then
    SWE_RLVR_TEST_DEVICE=cuda "${RUN[@]}" "${args[@]}" --collect-only || return 1
    echo "no GPU; wiring checked: $(pytest_summary "$LOG")" >"$REASON"; return 77
  fi
  SWE_RLVR_TEST_DEVICE=cuda "${RUN[@]}" "${args[@]}" && pytest_passed
}

step_bench() {
  if [ "$dry" = 1 ]; then
    "${RUN[@]}" -c "import sys; sys.path.insert(0, '.'); import bench.trainer as b
a = b.parse_args(['--gpu', '--rounds', '3', '--variants', '$BENCH_VARIANTS'])
print([b.parse_variant(v) for v in a.variants.split(',')])" || return 1
    echo "no GPU; wiring checked: bench/trainer.py --gpu arguments and 4 variants parse" >"$REASON"; return 77
  fi
  "${RUN[@]}" bench/trainer.py --gpu --rounds 3 --variants "$BENCH_VARIANTS" || return 1
  grep -E '^(eager|compile)-' "$LOG" | sed -E 's/^([a-z-]+) +tok\/s +([0-9]+) +MFU % median +([0-9.]+).*/\1 MFU \3% (\2 tok\/s)/; s/^([a-z-]+) +out of memory.*/\1 out of memory/' \
    | paste -sd';' | sed 's/;/; /g' >"$REASON"
  [ -s "$REASON" ] || { echo "bench/trainer.py printed no variant line (log)" >"$REASON"; return 1; }
}

step_engine() {
  if [ "$dry" = 1 ]; then
    "${RUN[@]}" infra/gpu/engine_check.py --model "$TINY" --device cpu --batch 4 --new-tokens 16
  else
    "${RUN[@]}" infra/gpu/engine_check.py --model "$TINY" --device cuda --profile
  fi
}

step_e2e() {
  if [ "$dry" = 1 ]; then
    "${RUN[@]}" infra/gpu/e2e_check.py --model "$TINY" --device cpu --work "$work/e2e" --new-tokens 16 \
      --wheels "$wheels"
  else
    "${RUN[@]}" infra/gpu/e2e_check.py --model "$TINY" --device cuda --work "$work/e2e" --wheels "$wheels"
  fi
}

export -f pytest_summary pytest_passed step_setup step_gpu_tests step_deepspeed step_bench step_engine step_e2e
export dry wheels work SITE TINY BENCH_VARIANTS ROOT PY
export RUN_STR="${RUN[*]}"

# ---------------------------------------------------------------- the run
passed=0 failed=0 skipped=0 budget=0 start=$(date +%s)
: >"$out/summary.txt"
for s in "${STEPS[@]}"; do
  if [ "$dry" = 1 ]; then b=${DRY_BUDGET[$s]}; else b=${BUDGET[$s]}; fi
  budget=$((budget + b))
done
echo "gpu-check$([ "$dry" = 1 ] && echo ' (dry run)'): steps ${STEPS[*]}; budget ${budget}s; logs in $out"
for s in "${STEPS[@]}"; do
  if [ "$dry" = 1 ]; then b=${DRY_BUDGET[$s]}; else b=${BUDGET[$s]}; fi
  LOG=$out/$s.log REASON=$work/$s.reason
  t0=$(date +%s) rc=0
  LOG=$LOG REASON=$REASON timeout -k 10 "$b" bash -c 'read -ra RUN <<<"$RUN_STR"; set -eo pipefail; step_'"${s//-/_}" >"$LOG" 2>&1 || rc=$?
  dt=$(($(date +%s) - t0))
  reason=$( [ -s "$REASON" ] && tail -1 "$REASON" || grep -v '^[[:space:]]*$' "$LOG" | tail -1 | cut -c1-200 )
  case $rc in
    0) verdict=PASS; passed=$((passed + 1)) ;;
    77) verdict=SKIP; skipped=$((skipped + 1)) ;;
    124|137) verdict=FAIL; failed=$((failed + 1)); reason="over its ${b}s budget (killed); last: $reason" ;;
    *) verdict=FAIL; failed=$((failed + 1)) ;;
  esac
  echo "$verdict $s (${dt}s): $reason" | tee -a "$out/summary.txt"
done
total=$(($(date +%s) - start))
echo "gpu-check: $passed passed, $failed failed, $skipped skipped in ${total}s (budget ${budget}s)" | tee -a "$out/summary.txt"
[ "$failed" = 0 ]
