#!/bin/bash
# One H200 job: `sglang-smallm bench` with its fallback column, i.e. SGLang 0.5.23's own FusedMoE built with
# --moe-runner-backend smallm and timed with SGLANG_ROCM_SMALLM_MOE=0 beside the kernel
# (sglang_integration/fallback_timing.py). SGLang from the carried .peer/ and .sglgpu/ as in
# h200_sglang_layer_job.sh (carry [".peer", ".sglgpu"]); sgl_kernel is an import-only stub but for
# moe_align_block_size, which SGLang's Triton runner calls from 65 token-slot pairs and which the stub runs
# by SGLang's own JIT build of the op, and moe_sum_reduce (from 33 tokens) by SGLang's Triton op of that sum
# (SMALLM_STUB_ALIGN=0: both raise, and the bench prints that reason;
# "h200-s43" run 1 ran before the stub had it). FB_SHAPES (default Qwen3.5 TP4/TP8), FB_TOKENS (FP8,
# default 1,2,4,5,8), FB_MXTOKENS (MXFP4, default 1,8, "-" for none; SGLang's Quark MXFP4 scheme does not run on CUDA,
# so a reason is expected). PEER=1 also runs SGLang's peer (.peer/run.sh) at FB_TOKENS, so the fallback's
# times can be read beside the peer's shipped configuration. FB_ENVS (';'-separated settings, e.g.
# "SMALLM_DOWN_TEAMS=1;SMALLM_DOWN_TEAMS=2"): each one more kernel-only bench with that setting, at
# FB_ENV_SHAPES (default FB_SHAPES), FB_ENV_TOKENS (FP8, default FB_TOKENS) and FB_ENV_MXTOKENS (MXFP4,
# default none). FB_CAPS=1: `bench --write-caps` (FP8, FB_SHAPES, row-major, at FB_CAPS_TOKENS, default
# FB_TOKENS) into $OUT/caps.json, then doctor with SGLANG_SMALLM_CAPS_FILE set to it for Qwen3.5 TP4.
# Logs under $OUT, packed; a short table last.
source examples/h200_common.sh
stamp build
build
stamp sglang-env
sglang_env || { pack; exit 12; }
cd /tmp
stamp bench
FS=${FB_SHAPES:-qwen35-tp4,qwen35-tp8}; FT=${FB_TOKENS:-1,2,4,5,8}
MT=${FB_MXTOKENS:-1,8}; [ "$MT" = - ] && MT=""
BENCH_SHAPES=$FS BENCH_FALLBACK=1 bench_formats _fallback "$FT" "$MT" PYTHONPATH="$SG_PATH"
IFS=';' read -ra envs <<< "${FB_ENVS:-}"
for ev in "${envs[@]}"; do  # $ev unquoted: one word per variable
  BENCH_SHAPES=${FB_ENV_SHAPES:-$FS} bench_formats "_${ev// /,}" "${FB_ENV_TOKENS:-$FT}" "${FB_ENV_MXTOKENS:-}" \
    PYTHONPATH="$SG_PATH" $ev
done
if [ "${FB_CAPS:-0}" = 1 ]; then
  stamp caps
  timeout --foreground 400 env PYTHONPATH="$SG_PATH" python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_caps" \
    --shapes "$FS" --layouts row_major --formats fp8_block128 --tokens "${FB_CAPS_TOKENS:-$FT}" \
    --write-caps "$OUT/caps.json" > "$OUT/caps.log" 2>&1
  SGLANG_SMALLM_CAPS_FILE="$OUT/caps.json" timeout 120 env PYTHONPATH="$SG_PATH" python3 -m sglang_smallm_plugin.cli \
    doctor --inter 256 > "$OUT/caps_doctor.log" 2>&1
fi
peer_stage "$FT"
stamp done
for f in "$OUT"/bench_*_fallback.log; do
  echo "== $(basename "$f" .log)"
  grep -E " fallback |fallback: no time|Traceback|Error" "$f" | sed -E 's/ +/ /g' | cut -c1-200 | head -24
done
bench_summary "$OUT"/bench_*.log
if [ -e "$OUT/caps.log" ]; then
  echo "== bench --write-caps"; grep -A6 "^token caps measured" "$OUT/caps.log" || tail -5 "$OUT/caps.log"
  grep -E "measured caps|token cap " "$OUT/caps_doctor.log" | cut -c1-200
fi
peer_summary
pack
