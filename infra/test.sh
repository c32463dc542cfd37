#!/usr/bin/env bash
# The project's whole test run (what `make test` and CI execute), after infra/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -q "$@"
