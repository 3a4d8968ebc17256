#!/usr/bin/env bash
# The GPU kernels' PTX: src/gpu/kernels/kernels.cu compiled by clang's CUDA device compiler
# (no CUDA toolkit: -nocudainc -nocudalib), for sm_52 so that every GPU since Maxwell can load
# it. The PTX is committed and embedded in the library.
#
#   scripts/ptx.sh          regenerate src/gpu/kernels/kernels.ptx (make ptx)
#   scripts/ptx.sh check    fail if regenerating would change it (make check-ptx, in make test)
#
# Installs Debian's clang-14 when no clang is found (as root or with passwordless sudo).
# Environment: CLANG (default: clang-14, else clang).
set -euo pipefail
cd "$(dirname "$0")/.."
src=src/gpu/kernels/kernels.cu
ptx=src/gpu/kernels/kernels.ptx

log() { printf 'ptx: %s\n' "$*" >&2; }

find_clang() {
  for c in "${CLANG:-}" clang-14 clang; do
    if [ -n "$c" ] && command -v "$c" >/dev/null 2>&1; then echo "$c"; return 0; fi
  done
  return 1
}

if ! clang=$(find_clang); then
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
      log "need clang (Debian: clang-14) to compile the GPU kernels; not root and no passwordless sudo"
      exit 1
    fi
  fi
  log "installing clang-14"
  $sudo apt-get install -y -q clang-14 >/dev/null 2>&1 ||
    { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q clang-14 >/dev/null; }
  clang=$(find_clang) || { log "clang-14 did not install"; exit 1; }
fi

compile() { # OUT
  "$clang" -x cuda --cuda-device-only -nocudainc -nocudalib --cuda-gpu-arch=sm_52 -O2 -S "$src" -o "$1"
}

case "${1:-write}" in
  write)
    compile "$ptx"
    echo "ptx: wrote $ptx ($("$clang" --version | head -1))"
    ;;
  check)
    tmp=$(mktemp --suffix=.ptx)
    trap 'rm -f "$tmp"' EXIT
    compile "$tmp"
    if ! cmp -s "$tmp" "$ptx"; then
      log "$ptx does not match $src: run make ptx and commit it"
      diff -u "$ptx" "$tmp" | head -40 >&2
      exit 1
    fi
    echo "$ptx matches $src"
    ;;
  *) log "unknown mode $1 (write or check)"; exit 2 ;;
esac
