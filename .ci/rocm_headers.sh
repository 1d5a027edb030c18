#!/bin/bash
# The HIP runtime headers of a ROCm that a ROCm torch 2.x can be compiled against, unpacked (no install,
# no root) into .rocm-headers/ at the repository root, for the CPU test that type-checks the hipified op
# file against torch's own headers hipified as a ROCm torch ships them
# (tests/test_kernel_compile.py::test_rocm_install_build_op_file_compiles_against_rocm_torch_headers).
# Debian bookworm's libamdhip64-dev (ROCm 5.2, what .ci/run installs for the other HIP checks) is too old
# for torch 2.14's headers (no hipUserObject_t); Debian trixie's (ROCm 5.7) has what they use. The two
# packages are fetched from Debian's pool by name and checked against the SHA256 in trixie's index.
# Usage: .ci/rocm_headers.sh  -> prints the include directory; exit 1 with the reason if it cannot.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dest=$top/.rocm-headers
if [ -f "$dest/usr/include/hip/hip_runtime_api.h" ] && [ -f "$dest/usr/include/hsa/hsa.h" ]; then
  echo "$dest/usr/include"; exit 0
fi
pool=${SMALLM_DEBIAN_POOL:-http://deb.debian.org/debian/pool/main}
debs=(
  "r/rocm-hipamd/libamdhip64-dev_5.7.1-6+deb13u1_amd64.deb 471242c9d89ce6aca57b2dc75eabbeb872d787f70d3b92144c58bb444e6256a1"
  "r/rocr-runtime/libhsa-runtime-dev_6.1.2-3_amd64.deb 210550164784b6f12067b6cfd8a9386f6855d12a5fdd768b14839c85c35e48c0"
)
command -v dpkg-deb >/dev/null || { echo "rocm_headers: dpkg-deb is needed to unpack the .deb files" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fetch() {  # fetch URL FILE: curl where there is one, else Python's urllib
  if command -v curl >/dev/null; then curl -sSfL --max-time 120 -o "$2" "$1"
  else python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2"; fi
}
for entry in "${debs[@]}"; do
  path=${entry% *}; sum=${entry#* }; file=$tmp/$(basename "$path")
  fetch "$pool/$path" "$file" \
    || { echo "rocm_headers: could not fetch $pool/$path (superseded in trixie? take the new name and SHA256 from trixie's Packages index)" >&2; exit 1; }
  echo "$sum  $file" | sha256sum -c --quiet - || { echo "rocm_headers: SHA256 mismatch for $path" >&2; exit 1; }
  dpkg-deb -x "$file" "$tmp/root"
done
rm -rf "$dest"; mkdir -p "$dest/usr"; cp -r "$tmp/root/usr/include" "$dest/usr/"
echo "$dest/usr/include"
