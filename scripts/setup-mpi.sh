#!/usr/bin/env bash
# Makes sure the build can use MPI for the distributed kvstore (cargo feature `dist`): Open MPI's
# headers and launcher and libclang (the mpi crate's build runs bindgen). Installs Debian's
# libopenmpi-dev, openmpi-bin and libclang-dev when any is missing (as root or with passwordless
# sudo). Idempotent and quiet when everything is there.
set -euo pipefail

log() { printf 'setup-mpi: %s\n' "$*" >&2; }

have_mpi() { command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; }
have_clang() {
  ls /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/*/libclang*.so* >/dev/null 2>&1
}

if have_mpi && have_clang; then
  exit 0
fi

pkgs="libopenmpi-dev openmpi-bin libclang-dev"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  else
    log "need Debian packages '$pkgs' (MPI and libclang for the dist feature), but not root and no passwordless sudo: install them, or build without MPI with FEATURES="
    exit 1
  fi
fi
command -v apt-get >/dev/null 2>&1 || { log "need $pkgs but apt-get is not available"; exit 1; }
log "installing $pkgs"
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get install -y -q $pkgs >/dev/null 2>&1; then
  $sudo apt-get update -q >/dev/null 2>&1 || true
  $sudo apt-get install -y -q $pkgs >/dev/null || { log "apt-get install $pkgs failed"; exit 1; }
fi
have_mpi || { log "mpicc/mpirun still missing after installing $pkgs"; exit 1; }
