#!/bin/bash
# amd/Qwen3.5-397B-A17B-MXFP4 (Quark W4A4 MXFP4) on MI355X through smallm; fallback is AITER.
# Usage: bash examples/launch_qwen35_mxfp4_mi355x.sh tp4|tp8 [on|off] [extra sglang args]
# SGLANG_SMALLM_CAPS_FILE (examples/calibrate_qwen35_mi355x.sh writes one) sets caps measured on this machine.
set -euo pipefail
TP=${1:-tp4}; MODE=${2:-on}; shift $(( $# > 2 ? 2 : $# ))
case "$TP" in tp4) TPN=4 ;; tp8) TPN=8 ;; *) echo "first argument: tp4 or tp8" >&2; exit 2 ;; esac
export SGLANG_USE_AITER=1
[ "$MODE" = off ] && export SGLANG_ROCM_SMALLM_MOE=0
exec python -m sglang.launch_server --model-path "${MODEL:-amd/Qwen3.5-397B-A17B-MXFP4}" --tp "$TPN" \
  --trust-remote-code --moe-runner-backend smallm --port ${PORT:-30000} "$@"
