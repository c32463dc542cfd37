#!/usr/bin/env bash
# Build the docker sandbox's base image, swe-rlvr/sandbox-base:bookworm, for instances that name no
# image of their own (the built-in suite). Cached and idempotent; run after infra/docker/engine.sh.
#
# No registry is needed: `debootstrap --variant=minbase bookworm` builds a root filesystem from the
# Debian mirror (python3 and `python`, python3-venv, python3-pytest, git, patch; coreutils brings
# `timeout`), the docs, man pages, locales and apt caches are deleted, and `docker import` turns
# the tarball into an image (about 160 MB). The tarball is kept under the state dir, so a later
# re-import (a fresh engine, a pruned image) takes seconds instead of the build's minutes (about
# 1-3 min on 2 cores, most of it downloading and unpacking packages).
#
# Like engine.sh it never fails the caller: without an engine or debootstrap it says why and
# exits 0, and the docker tests skip with that reason.
#
# Environment:
#   SWE_RLVR_DOCKER_ROOT     state dir (default: $HOME/.cache/swe-rlvr/docker)
#   SWE_RLVR_BASE_IMAGE      tag to build (default: swe-rlvr/sandbox-base:bookworm)
#   SWE_RLVR_BASE_PACKAGES   comma-separated packages to include (default: the sandbox's list
#                            below; infra/team/build.sh adds Postgres and bubblewrap for its image)
#   SWE_RLVR_DEBIAN_MIRROR   Debian mirror (default: http://deb.debian.org/debian)
#   SWE_RLVR_REBUILD=1       rebuild the rootfs tarball even if one is cached
set -uo pipefail

ROOT=${SWE_RLVR_DOCKER_ROOT:-${HOME:-/root}/.cache/swe-rlvr/docker}
TAG=${SWE_RLVR_BASE_IMAGE:-swe-rlvr/sandbox-base:bookworm}
MIRROR=${SWE_RLVR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=${SWE_RLVR_BASE_PACKAGES:-python3,python-is-python3,python3-venv,python3-pytest,git,patch}
TARBALL="$ROOT/images/$(echo "$TAG" | tr '/:' '__').tar"

say() { echo "[base-image] $*"; }
give_up() {
  say "not built: $*"
  say "docker-marked tests will skip; fix the above and re-run infra/docker/base-image.sh"
  exit 0
}

# Everything a sandbox never reads: package caches and lists, docs, man pages, translations, and
# the host's resolv.conf and hostname that debootstrap copies in (docker mounts its own). Full perl
# (~45 MB, pulled in by git for a few rarely used porcelain scripts) goes too; perl-base stays.
shrink_rootfs() {
  local rootfs=$1
  chroot "$rootfs" dpkg --purge --force-depends perl perl-modules-5.36 libperl5.36 liberror-perl \
    >/dev/null 2>&1 || say "warning: could not remove full perl from the image (kept)"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* "$rootfs"/tmp/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
    "$rootfs"/usr/share/locale/* "$rootfs"/usr/share/lintian "$rootfs"/debootstrap
  : >"$rootfs/etc/resolv.conf"
  echo sandbox >"$rootfs/etc/hostname"
}

build_tarball() {
  command -v debootstrap >/dev/null \
    || give_up "debootstrap is missing (run infra/docker/engine.sh as root)"
  [ "$(id -u)" = 0 ] || give_up "debootstrap needs root"
  local build="$ROOT/build" started=$SECONDS
  rm -rf "$build" && mkdir -p "$build" "$(dirname "$TARBALL")"
  say "debootstrap --variant=minbase bookworm (+ $PACKAGES) from $MIRROR"
  if ! debootstrap --variant=minbase --include="$PACKAGES" bookworm "$build/rootfs" "$MIRROR" \
      >"$build/debootstrap.log" 2>&1; then
    tail -n 10 "$build/debootstrap.log" | sed 's/^/[base-image]   /'
    give_up "debootstrap failed (log above; is $MIRROR reachable?)"
  fi
  shrink_rootfs "$build/rootfs"
  tar --numeric-owner -C "$build/rootfs" -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
  rm -rf "$build"
  say "rootfs tarball $(du -h "$TARBALL" | cut -f1) in $((SECONDS - started))s: $TARBALL"
}

import_tarball() {
  local started=$SECONDS
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'WORKDIR /' \
    --change 'CMD ["bash"]' \
    --message "swe-rlvr sandbox base: debootstrap minbase bookworm + $PACKAGES" \
    "$TARBALL" "$TAG" >/dev/null || give_up "docker import of $TARBALL failed"
  local size
  size=$(docker image inspect -f '{{.Size}}' "$TAG" | numfmt --to=iec)
  say "imported $TAG ($size) in $((SECONDS - started))s"
}

main() {
  timeout 10 docker info >/dev/null 2>&1 \
    || give_up "no Docker engine answers (run infra/docker/engine.sh)"
  if [ "${SWE_RLVR_REBUILD:-0}" != 1 ] && docker image inspect "$TAG" >/dev/null 2>&1; then
    say "$TAG is present (cached)"
    exit 0
  fi
  local started=$SECONDS
  if [ "${SWE_RLVR_REBUILD:-0}" = 1 ] || [ ! -s "$TARBALL" ]; then
    build_tarball
  else
    say "re-importing the cached rootfs $TARBALL"
  fi
  import_tarball
  say "done in $((SECONDS - started))s"
}

main "$@"
