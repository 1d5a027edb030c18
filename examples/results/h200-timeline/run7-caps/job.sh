#!/bin/bash
# One H200 job for the H200 FP8 caps above 8 tokens: build, selftest at the token counts in question
# (FP8, Qwen3.5 TP4/TP8, 2 seeds), `sglang-smallm bench` and SGLang's Triton FP8 peer (.peer/, carry
# [".peer"]) at the same counts. Usage: TOKENS=9,10,11,12 bash examples/h200_caps_job.sh
source examples/h200_common.sh
T=${TOKENS:-9,10,11,12}
build
cd /tmp
stamp selftest
timeout 90 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds 2 --formats fp8_block128 \
  --shapes qwen35-tp4,qwen35-tp8 --tokens "$T" > "$OUT/selftest_caps.log" 2>&1; tail -1 "$OUT/selftest_caps.log"
stamp bench
timeout 90 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_fp8_block128" --shapes qwen35-tp4,qwen35-tp8 \
  --layouts row_major --tokens "$T" --formats fp8_block128 > "$OUT/bench_fp8_block128.log" 2>&1
stamp peer
cd "$R"; timeout 120 env OUT=$OUT/peer bash .peer/run.sh --tokens "$T" > "$OUT/peer.log" 2>&1
stamp done
bench_summary "$OUT/bench_fp8_block128.log"
peer_summary
pack
