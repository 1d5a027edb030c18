#!/bin/bash
# Builds .sglgpu/ (git-ignored) for examples/h200_sglang_layer_job.sh: the pure-Python wheels that
# SGLang 0.5.23's FusedMoE layer and quantization stack import beyond what the H200 image and the
# peer's .peer/ (../shared/peer/prepare.sh, run it first) carry. The list in wheels.txt was found by
# importing the layer harness on this machine with only the H200 image's packages, the peer's wheels
# and these on the path (python -S, a site-packages of links), adding the next missing one each time.
set -eu
top=$(git rev-parse --show-toplevel); P=$top/.sglgpu
[ -d "$top/.peer" ] || { echo "no .peer/ in $top: run ../shared/peer/prepare.sh there first"; exit 2; }
rm -rf "$P"; mkdir -p "$P"
while read -r spec; do
  [ -n "$spec" ] && pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py -d "$P" "$spec"
done < "$(dirname "$0")/wheels.txt"
ls "$P"; du -sh "$P"
