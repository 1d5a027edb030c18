#!/bin/bash
# Qwen3.5-397B-A17B-FP8 on MI355X with the small-M MoE kernels (sglang-smallm-plugin installed).
# Usage: bash examples/launch_qwen35_mi355x.sh tp4|tp8 [on|off] [extra sglang args]
#   on  (default): --moe-runner-backend smallm, kernels enabled
#   off          : same launch, SGLANG_ROCM_SMALLM_MOE=0 -> every MoE call takes AITER (A/B baseline)
# SGLANG_SMALLM_CAPS_FILE (examples/calibrate_qwen35_mi355x.sh writes one) sets caps measured on this machine.
set -euo pipefail
TP=${1:-tp4}; MODE=${2:-on}; shift $(( $# > 2 ? 2 : $# ))
case "$TP" in tp4) TPN=4 ;; tp8) TPN=8 ;; *) echo "first argument: tp4 or tp8" >&2; exit 2 ;; esac
MODEL=${MODEL:-Qwen/Qwen3.5-397B-A17B-FP8}
export SGLANG_USE_AITER=1
[ "$MODE" = off ] && export SGLANG_ROCM_SMALLM_MOE=0
sglang-smallm doctor --inter $(( 1024 / TPN )) >&2 || true
exec python -m sglang.launch_server --model-path "$MODEL" --tp "$TPN" --trust-remote-code \
  --moe-runner-backend smallm --port ${PORT:-30000} "$@"
