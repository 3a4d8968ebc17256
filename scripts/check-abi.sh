#!/usr/bin/env bash
# Checks mxrt's C ABI against MXNet 1.9.1:
#  1. every function of scripts/abi-scope.txt (or $MXRT_ABI_SCOPE) is exported by libmxrt.so
#     and by MXNet 1.9.1's libmxnet.so (so the list names only real MXNet functions);
#  2. include/mxrt.h and MXNet's own mxnet/c_api.h (from the mxnet==1.9.1 wheel, installed by
#     scripts/setup-mxnet.sh) compile together in both orders with -Werror, so every function in
#     both has the same prototype; likewise mxnet/c_predict_api.h;
#  3. the MXRT_* constants of include/mxrt.h have MXNet's values: scripts/check-constants.cc
#     static_asserts them against the enums of MXNet's C++ headers (when a C++ compiler is
#     installed), scripts/check-constants.py compares the profiler codes with MXNet's Python package.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="${MXRT_LIB:-target/release/libmxrt.so}"
scope="${MXRT_ABI_SCOPE:-scripts/abi-scope.txt}"
[ -f "$lib" ] || { echo "check-abi: $lib not built" >&2; exit 1; }
[ -f "$scope" ] || { echo "check-abi: $scope not found" >&2; exit 1; }

mxnet_lib=$(scripts/setup-mxnet.sh | tail -n 1)
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
mxnet_exported=$(nm -D --defined-only "$mxnet_lib" | awk '{print $3}' | sort -u)
want=$(grep -v '^[[:space:]]*#' "$scope" | tr -d '[:blank:]' | grep -v '^$' | sort -u)
n=$(echo "$want" | wc -l)
unknown=$(comm -23 <(echo "$want") <(echo "$mxnet_exported"))
if [ -n "$unknown" ]; then
  echo "check-abi: $(echo "$unknown" | wc -l) names of $scope are not exports of MXNet's libmxnet.so:" >&2
  echo "$unknown" >&2
  exit 1
fi
missing=$(comm -23 <(echo "$want") <(echo "$exported"))
if [ -n "$missing" ]; then
  echo "check-abi: $(echo "$missing" | wc -l) of $n scope functions are not exported:" >&2
  echo "$missing" >&2
  exit 1
fi
echo "check-abi: all $n functions of $scope are exported (and are MXNet 1.9.1 exports)"

# 1b. the library needs no static TLS: it is loaded late, with dlopen, into processes (Python)
# whose loader may have no static TLS space left for it
if readelf -dW "$lib" | grep -q 'STATIC_TLS'; then
  echo "check-abi: $lib is marked STATIC_TLS (an initial-exec thread-local; dlopen may refuse it)" >&2
  exit 1
fi
echo "check-abi: no static TLS (loads with dlopen at any point)"

inc="$(dirname "$mxnet_lib")/include"
[ -f "$inc/mxnet/c_api.h" ] || { echo "check-abi: no c_api.h under $inc" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include "mxrt.h"\n#include <mxnet/c_api.h>\nint main(void) { return 0; }\n' > "$tmp/a.c"
printf '#include <mxnet/c_api.h>\n#include "mxrt.h"\nint main(void) { return 0; }\n' > "$tmp/b.c"
for f in a b; do
  cc -std=c11 -Wall -Wextra -Werror -Iinclude -I"$inc" -c "$tmp/$f.c" -o "$tmp/$f.o"
done
# MXNet's c_predict_api.h needs <stdint.h> and <stdbool.h> before it in C; with c_api.h too
printf '#include "mxrt.h"\n#include <mxnet/c_predict_api.h>\nint main(void) { return 0; }\n' > "$tmp/c.c"
printf '#include <stdint.h>\n#include <stdbool.h>\n#include <mxnet/c_api.h>\n#include <mxnet/c_predict_api.h>\n#include "mxrt.h"\nint main(void) { return 0; }\n' > "$tmp/d.c"
for f in c d; do
  cc -std=c11 -Wall -Wextra -Werror -Iinclude -I"$inc" -c "$tmp/$f.c" -o "$tmp/$f.o"
done
pred=$(comm -12 <(grep -oE '^(const char \*|int) MX[A-Za-z0-9_]+\(' include/mxrt.h | grep -oE 'MX[A-Za-z0-9_]+' | sort -u) \
                <(grep -oE 'MXNET_DLL [a-z ]+\*? ?MX[A-Za-z0-9_]+\(' "$inc/mxnet/c_predict_api.h" | grep -oE 'MX[A-Za-z0-9_]+' | sort -u) | wc -l)
echo "check-abi: mxrt.h and mxnet/c_predict_api.h compile together ($pred shared prototypes agree)"
both=$(comm -12 <(grep -oE '^(const char \*|int) MX[A-Za-z0-9_]+\(' include/mxrt.h | grep -oE 'MX[A-Za-z0-9_]+' | sort -u) \
                <(grep -oE 'MXNET_DLL [a-z ]+\*? ?MX[A-Za-z0-9_]+\(' "$inc/mxnet/c_api.h" | grep -oE 'MX[A-Za-z0-9_]+' | sort -u) | wc -l)
echo "check-abi: mxrt.h and mxnet/c_api.h compile together in both orders ($both shared prototypes agree)"

# 3. the constants' values
cxx="${CXX:-c++}"
if command -v "$cxx" >/dev/null; then
  # MXNet's headers without its optional BLAS and CUDA dependencies.
  "$cxx" -std=c++17 -fsyntax-only -DMSHADOW_USE_MKL=0 -DMSHADOW_USE_CBLAS=0 -DMSHADOW_USE_CUDA=0 \
    -Iinclude -I"$inc" scripts/check-constants.cc
  n_cxx=$(grep -c '^SAME(MXRT_' scripts/check-constants.cc)
else
  echo "check-abi: no C++ compiler ($cxx): constants not checked against MXNet's C++ headers" >&2
  n_cxx=0
fi
n_py=$(python3 scripts/check-constants.py include/mxrt.h "$(dirname "$mxnet_lib")/profiler.py")
echo "check-abi: MXRT_* constants equal MXNet's ($n_cxx against its C++ headers, $n_py against its Python package)"
