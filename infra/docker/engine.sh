#!/usr/bin/env bash
# Start a Docker engine for the docker sandbox backend, if none answers yet. Idempotent; run as root.
#
# Used by CI and `make test` before the docker-marked tests. It never fails the caller: when no
# engine can be had (no root, no apt, the kernel refuses), it says why and exits 0, and the docker
# tests then skip with that reason.
#
# What it does:
#   1. installs docker.io, debootstrap and docker-compose with apt if they are missing (root only);
#   2. if `docker info` already answers on the default socket (or $DOCKER_HOST), stops there;
#   3. otherwise starts dockerd in the background with its own data root, exec root, pidfile and
#      log under the state dir, and no iptables, IP forwarding or default bridge (containers run
#      with network_mode="none"; the engine needs no NAT), then waits for `docker info`.
#
# Environment:
#   SWE_RLVR_DOCKER_ROOT     state dir (default: $HOME/.cache/swe-rlvr/docker)
#   SWE_RLVR_DOCKER_STORAGE  force a storage driver, e.g. vfs where overlay2 cannot mount
#   SWE_RLVR_DOCKER_WAIT_S   how long to wait for the engine to answer (default: 60)
#
# Tested on Debian bookworm, kernel 6.x, cgroup v1 (hybrid): overlay2 on ext4 works, cgroupfs
# driver; memory, pids and CPU limits apply.
set -uo pipefail

ROOT=${SWE_RLVR_DOCKER_ROOT:-${HOME:-/root}/.cache/swe-rlvr/docker}
WAIT_S=${SWE_RLVR_DOCKER_WAIT_S:-60}
LOG="$ROOT/dockerd.log"
PIDFILE="$ROOT/dockerd.pid"

say() { echo "[docker-engine] $*"; }
give_up() {
  say "no Docker engine: $*"
  say "docker-marked tests will skip; fix the above and re-run infra/docker/engine.sh"
  exit 0
}
engine_answers() { command -v docker >/dev/null && timeout 10 docker info >/dev/null 2>&1; }

install_packages() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  # The team stack's test (tests/test_team_stack.py) needs a compose CLI: Debian's is v1.
  command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 \
    || missing+=(docker-compose)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    say "missing ${missing[*]} and cannot install them (needs root and apt-get)"
    return 0
  fi
  say "apt-get install ${missing[*]}"
  apt-get update -qq >/dev/null 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" \
    >/dev/null 2>&1 || say "apt-get install ${missing[*]} failed"
}

# The containerd socket lives under the exec root and must fit in a unix socket path (108 bytes).
pick_exec_root() {
  local exec_root="$ROOT/exec"
  if [ ${#exec_root} -gt 60 ]; then
    exec_root="/run/swe-rlvr-docker"
  fi
  echo "$exec_root"
}

# A pidfile left by a dockerd of ours that still runs but does not answer: wait for it, or clear it.
check_previous() {
  [ -f "$PIDFILE" ] || return 0
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    say "dockerd (pid $pid) from an earlier start is running; waiting for it to answer"
    wait_for_engine "$pid" && { say "engine ready (pid $pid)"; exit 0; }
    give_up "dockerd pid $pid runs but does not answer; see $LOG (stop it and re-run)"
  fi
  rm -f "$PIDFILE"
}

wait_for_engine() {
  local pid=$1 waited=0
  while [ "$waited" -lt "$WAIT_S" ]; do
    engine_answers && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 1
    waited=$((waited + 1))
  done
  return 1
}

start_dockerd() {
  local exec_root storage=()
  exec_root=$(pick_exec_root)
  mkdir -p "$ROOT/data" "$exec_root"
  [ -n "${SWE_RLVR_DOCKER_STORAGE:-}" ] && storage=(--storage-driver "$SWE_RLVR_DOCKER_STORAGE")
  say "starting dockerd (data root $ROOT/data, log $LOG)"
  # setsid: the engine outlives this shell and is not hit by a Ctrl-C sent to the caller's group.
  setsid nohup dockerd \
    --data-root "$ROOT/data" --exec-root "$exec_root" --pidfile "$PIDFILE" \
    --iptables=false --ip-forward=false --bridge=none "${storage[@]}" \
    >>"$LOG" 2>&1 </dev/null &
  local pid=$!
  if wait_for_engine "$pid"; then
    say "engine ready (dockerd pid $pid; storage driver $(docker info -f '{{.Driver}}' 2>/dev/null);" \
        "cgroup v$(docker info -f '{{.CgroupVersion}}' 2>/dev/null))"
    exit 0
  fi
  kill -0 "$pid" 2>/dev/null && kill "$pid"
  tail -n 15 "$LOG" | sed 's/^/[docker-engine]   /'
  give_up "dockerd did not answer within ${WAIT_S}s (log above, full log in $LOG)"
}

main() {
  install_packages
  if engine_answers; then
    say "engine already answers ($(docker info -f '{{.ServerVersion}}, {{.Driver}}' 2>/dev/null))"
    exit 0
  fi
  command -v docker >/dev/null || give_up "the docker CLI is not installed (apt-get install docker.io)"
  [ -n "${DOCKER_HOST:-}" ] && give_up "DOCKER_HOST=$DOCKER_HOST does not answer; start that engine"
  [ "$(id -u)" = 0 ] || give_up "not root, so dockerd cannot be started here"
  command -v dockerd >/dev/null || give_up "dockerd is not installed (apt-get install docker.io)"
  mkdir -p "$ROOT"
  check_previous
  start_dockerd
}

main "$@"
