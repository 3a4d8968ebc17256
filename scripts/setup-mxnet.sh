#!/usr/bin/env bash
# Create (or reuse) a Python venv holding the reference MXNet 1.9.1 wheel and print the absolute
# path of its libmxnet.so as the last (and only) line on stdout. Progress goes to stderr.
#
#   MXNET_VENV   venv location (default: <repo>/.venv-mxnet, git-ignored)
#   PYTHON       interpreter used to create the venv (default: python3)
#
# Idempotent: an existing venv with mxnet 1.9.1 is reused; only missing pieces are installed.
set -euo pipefail

log() { printf 'setup-mxnet: %s\n' "$*" >&2; }
die() { printf 'setup-mxnet: ERROR: %s\n' "$*" >&2; exit 1; }

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MXNET_VENV:-$repo/.venv-mxnet}"
python="${PYTHON:-python3}"
want_version="1.9.1"

apt_updated=0
apt_install() {
  # Install Debian packages when we are allowed to (root or passwordless sudo).
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo="sudo -n"
    else
      die "need Debian packages '$*' but not root and no passwordless sudo; install them and rerun"
    fi
  fi
  command -v apt-get >/dev/null 2>&1 || die "need packages '$*' but apt-get is not available"
  if [ "$apt_updated" -eq 0 ]; then
    log "apt-get update"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
    apt_updated=1
  fi
  log "apt-get install $*"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 \
    || die "apt-get install $* failed"
}

command -v "$python" >/dev/null 2>&1 || die "'$python' not found (set PYTHON=...)"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 7) else 1)' \
  || die "$python is older than 3.7"

# 1. The venv. Debian's system python needs python3-venv for ensurepip.
if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    pyver="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    apt_install "python${pyver}-venv" || apt_install python3-venv
  fi
  log "creating venv at $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv" >&2 || die "python -m venv $venv failed"
fi
vpy="$venv/bin/python"

# 2. The wheel. Checked through package metadata only (importing mxnet takes seconds).
have_version="$("$vpy" - <<'PY' 2>/dev/null || true
try:
    from importlib.metadata import version
    print(version("mxnet"))
except Exception:
    pass
PY
)"
if [ "$have_version" != "$want_version" ]; then
  log "pip install mxnet==$want_version 'numpy<1.24' (have: '${have_version:-none}')"
  "$vpy" -m pip install --disable-pip-version-check -q "mxnet==$want_version" "numpy<1.24" >&2 \
    || die "pip install mxnet==$want_version failed"
else
  log "mxnet $have_version already installed in $venv"
fi

# pytest drives the Python test suite (tests/python).
if ! "$vpy" -c 'import pytest' >/dev/null 2>&1; then
  log "pip install pytest"
  "$vpy" -m pip install --disable-pip-version-check -q "pytest>=7" >&2 || die "pip install pytest failed"
fi

lib="$("$vpy" - <<'PY'
import importlib.util, os
spec = importlib.util.find_spec("mxnet")
path = os.path.join(list(spec.submodule_search_locations)[0], "libmxnet.so")
print(os.path.realpath(path))
PY
)" || die "cannot locate the mxnet package in $venv"
[ -f "$lib" ] || die "libmxnet.so not found at $lib"

# 3. Shared libraries the wheel does not bundle (it ships libopenblas and libgfortran.so.3, but
#    needs the system's libgomp, libquadmath and libstdc++).
missing="$(ldd "$lib" 2>/dev/null | awk '/=> not found/ {print $1}' || true)"
if [ -n "$missing" ]; then
  pkgs=()
  for so in $missing; do
    case "$so" in
      libgomp.so.*) pkgs+=(libgomp1) ;;
      libquadmath.so.*) pkgs+=(libquadmath0) ;;
      libstdc++.so.*) pkgs+=(libstdc++6) ;;
      libgcc_s.so.*) pkgs+=(libgcc-s1) ;;
      libgfortran.so.5) pkgs+=(libgfortran5) ;;
      *) die "libmxnet.so needs $so and this script does not know which package provides it" ;;
    esac
  done
  log "missing shared libraries: $(echo $missing)"
  apt_install "${pkgs[@]}"
  still="$(ldd "$lib" 2>/dev/null | awk '/=> not found/ {print $1}' || true)"
  [ -z "$still" ] || die "still missing after install: $(echo $still)"
fi

# 4. Smoke test: load the library and ask its version through the C API.
got="$("$vpy" - "$lib" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
v = ctypes.c_int(0)
if lib.MXGetVersion(ctypes.byref(v)) != 0:
    sys.exit("MXGetVersion failed")
print(v.value)
PY
)" || die "loading $lib failed"
[ "$got" = "10901" ] || die "MXGetVersion returned '$got', expected 10901"
log "ok: $lib (MXGetVersion = $got)"

printf '%s\n' "$lib"
