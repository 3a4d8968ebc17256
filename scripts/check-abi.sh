#!/usr/bin/env bash
# Checks mxrt's C ABI against MXNet 1.9.1:
#  1. every function of ../shared/reference/abi-scope.txt (or $MXRT_ABI_SCOPE) is exported by
#     libmxrt.so;
#  2. include/mxrt.h and MXNet's own mxnet/c_api.h (from the mxnet==1.9.1 wheel, installed by
#     scripts/setup-mxnet.sh) compile together in both orders with -Werror, so every function in
#     both has the same prototype.
set -euo pipefail
cd "$(dirname "$0")/.."
lib="${MXRT_LIB:-target/release/libmxrt.so}"
scope="${MXRT_ABI_SCOPE:-../shared/reference/abi-scope.txt}"
[ -f "$lib" ] || { echo "check-abi: $lib not built" >&2; exit 1; }

exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
if [ -f "$scope" ]; then
  want=$(grep -v '^#' "$scope" | grep -v '^$' | sort -u)
  missing=$(comm -23 <(echo "$want") <(echo "$exported"))
  n=$(echo "$want" | wc -l)
  if [ -n "$missing" ]; then
    echo "check-abi: $(echo "$missing" | wc -l) of $n scope functions are not exported:" >&2
    echo "$missing" >&2
    exit 1
  fi
  echo "check-abi: all $n functions of $(basename "$scope") are exported"
else
  echo "check-abi: $scope not found, export check skipped" >&2
fi

mxnet_lib=$(scripts/setup-mxnet.sh | tail -n 1)
inc="$(dirname "$mxnet_lib")/include"
[ -f "$inc/mxnet/c_api.h" ] || { echo "check-abi: no c_api.h under $inc" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include "mxrt.h"\n#include <mxnet/c_api.h>\nint main(void) { return 0; }\n' > "$tmp/a.c"
printf '#include <mxnet/c_api.h>\n#include "mxrt.h"\nint main(void) { return 0; }\n' > "$tmp/b.c"
for f in a b; do
  cc -std=c11 -Wall -Wextra -Werror -Iinclude -I"$inc" -c "$tmp/$f.c" -o "$tmp/$f.o"
done
both=$(comm -12 <(grep -oE '^(const char \*|int) MX[A-Za-z0-9_]+\(' include/mxrt.h | grep -oE 'MX[A-Za-z0-9_]+' | sort -u) \
                <(grep -oE 'MXNET_DLL [a-z ]+\*? ?MX[A-Za-z0-9_]+\(' "$inc/mxnet/c_api.h" | grep -oE 'MX[A-Za-z0-9_]+' | sort -u) | wc -l)
echo "check-abi: mxrt.h and mxnet/c_api.h compile together in both orders ($both shared prototypes agree)"
