#!/bin/bash
# Token caps for Qwen3.5-397B-A17B measured on this machine (an MI355X, say), against what SGLang runs here
# without the plugin (SGLang as shipped, with its own gfx950 small-M kernel where enabled): `sglang-smallm bench
# --write-caps` over every token count 1..64 (TOKENS to change), both layouts (SGLang's AITER path serves the
# shuffled one), then the line that serves with them. README: "Token caps measured on your machine".
# Usage: bash examples/calibrate_qwen35_mi355x.sh tp4|tp8 fp8|mxfp4 [FILE]   (takes minutes: two layouts x 64 counts)
set -euo pipefail
TP=${1:-tp4}; FMT=${2:-fp8}
case "$TP" in tp4|tp8) ;; *) echo "first argument: tp4 or tp8" >&2; exit 2 ;; esac
case "$FMT" in fp8) F=fp8_block128; RECIPE=launch_qwen35_mi355x.sh ;;
  mxfp4) F=mxfp4; RECIPE=launch_qwen35_mxfp4_mi355x.sh ;;
  *) echo "second argument: fp8 or mxfp4" >&2; exit 2 ;; esac
FILE=${3:-caps_qwen35_${TP}_${FMT}.json}
export SGLANG_USE_AITER=1
sglang-smallm bench --shapes "qwen35-$TP" --formats "$F" --layouts row_major,shuffle16x16 \
  --tokens "${TOKENS:-$(seq -s, 1 64)}" --out "${OUT:-bench_caps_${TP}_${FMT}}" --write-caps "$FILE"
echo "serve with: SGLANG_SMALLM_CAPS_FILE=$(realpath "$FILE") bash examples/$RECIPE $TP"
