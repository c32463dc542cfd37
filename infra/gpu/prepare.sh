#!/usr/bin/env bash
# Fetch, here, the wheels the GPU checks need on the GPU machine (Python 3.12, manylinux
# x86_64, no registry there): every line of infra/gpu/wheels.txt into .gpu-wheels/ (git-ignored),
# DeepSpeed built from its sdist as a py3-none-any wheel. Idempotent: a wheel already in the
# folder is kept, one no longer listed is removed (two versions of one package stop the install).
# Fails when the folder exceeds the size that can travel with the working tree.
#
#   bash infra/gpu/prepare.sh [--dir DIR] [--max-mb N]      (defaults: .gpu-wheels, 45)
#
# Then carry the folder to the GPU machine and run infra/gpu/check.sh there (see README, GPUs).
set -euo pipefail
cd "$(dirname "$0")/../.."

dir=.gpu-wheels
max_mb=${GPU_WHEELS_MAX_MB:-45}
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --max-mb) max_mb=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "prepare.sh: unknown argument '$1'; use --dir DIR or --max-mb N" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "prepare.sh: $PY not found; run 'make setup' first (or set PYTHON)" >&2; exit 1; }
mkdir -p "$dir"

PLATFORMS=()
for n in 39 35 34 31 28 27 24 17; do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform linux_x86_64)

# name==version lines of wheels.txt, comments and blanks dropped
mapfile -t wanted < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' infra/gpu/wheels.txt | grep -v '^$')

wheel_stem() {  # pydantic-core==2.50.5 -> pydantic_core-2.50.5 (the wheel file's name start)
  local name=${1%%==*} version=${1##*==}
  echo "$(echo "$name" | tr 'A-Z' 'a-z' | sed -E 's/[-_.]+/_/g')-$version"
}
have() {  # is a wheel for this name==version in the folder? (names compared case-insensitively)
  local stem; stem=$(wheel_stem "$1")
  ls "$dir" 2>/dev/null | tr 'A-Z' 'a-z' | grep -q "^${stem}-.*\.whl$"
}

missing=()
for req in "${wanted[@]}"; do
  [ "${req%%==*}" = deepspeed ] && continue
  have "$req" || missing+=("$req")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[prepare] downloading ${#missing[@]} wheels for cp312 manylinux x86_64"
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" -d "$dir" "${missing[@]}" 2> >(grep -v "is ignored: it is neither" >&2) \
    || { echo "prepare.sh: pip could not fetch one of: ${missing[*]} (no cp312 manylinux x86_64 wheel of that version?); pick another version in infra/gpu/wheels.txt" >&2; exit 1; }
fi

ds=$(printf '%s\n' "${wanted[@]}" | grep '^deepspeed==' || true)
if [ -n "$ds" ] && ! have "$ds"; then
  echo "[prepare] building $ds as a py3-none-any wheel (DS_BUILD_OPS=0: ops compile on first use)"
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation --no-binary deepspeed \
    -w "$build" "$ds" >"$build/log" 2>&1 \
    || { tail -20 "$build/log" >&2; echo "prepare.sh: building $ds failed (log above); it needs torch, setuptools and wheel in $PY" >&2; exit 1; }
  cp "$build"/deepspeed-*.whl "$dir"/
fi

# prune wheels no longer listed
keep=$(for req in "${wanted[@]}"; do wheel_stem "$req"; done)
for f in "$dir"/*.whl; do
  stem=$(basename "$f" | tr 'A-Z' 'a-z' | cut -d- -f1-2)
  if ! grep -qx "$stem" <<<"$keep"; then echo "[prepare] removing $(basename "$f") (not in wheels.txt)"; rm -f "$f"; fi
done

count=$(ls "$dir"/*.whl | wc -l)
kib=$(du -sk "$dir" | cut -f1)
echo "[prepare] $dir: $count wheels, $((kib / 1024)) MiB (limit ${max_mb} MiB; the whole working tree that travels must stay under 64 MiB)"
echo "[prepare] left out: torch, transformers, pyarrow, numpy and the rest of infra/gpu/image-packages.txt (already on the GPU image);"
echo "[prepare]   vllm (GBs with its own CUDA torch: does not fit, so its GPU path stays unproven);"
echo "[prepare]   prefect, mlflow (the end-to-end check calls the stage libraries without them)"
if [ "$count" -ne "${#wanted[@]}" ]; then
  echo "prepare.sh: $dir holds $count wheels but wheels.txt lists ${#wanted[@]}; delete $dir and rerun" >&2; exit 1
fi
if [ "$kib" -gt $((max_mb * 1024)) ]; then
  echo "prepare.sh: $dir is $((kib / 1024)) MiB, over the ${max_mb} MiB limit; drop wheels from infra/gpu/wheels.txt" >&2; exit 1
fi
