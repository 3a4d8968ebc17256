#!/bin/sh
# Installs mxrt into a temporary DESTDIR, then builds and runs a C example through pkg-config
# against that install, and checks the SONAME links. Installs pkg-config if it is missing.
set -eu
cd "$(dirname "$0")/.."
if ! command -v pkg-config >/dev/null 2>&1; then
  echo "test-install: installing pkg-config"
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq pkg-config) >/dev/null
  else
    echo "test-install: pkg-config missing and not root" >&2; exit 1
  fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s install DESTDIR="$tmp" PREFIX=/opt/mxrt >/dev/null
lib="$tmp/opt/mxrt/lib"
soname=$(readelf -d "$lib/libmxrt.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -e "$lib/$soname" ] || { echo "test-install: bad SONAME '$soname'" >&2; exit 1; }
export PKG_CONFIG_PATH="$lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$tmp"
flags=$(pkg-config --cflags --libs mxrt)
cc -std=c11 -Wall -Wextra -Werror -pthread c_examples/engine_basics.c -o "$tmp/engine_basics" $flags
LD_LIBRARY_PATH="$lib" "$tmp/engine_basics" >/dev/null
echo "test-install: installed $(ls "$lib" | tr '\n' ' ')(SONAME $soname); pkg-config build ran OK"
