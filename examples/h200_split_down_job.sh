#!/bin/bash
# One H200 job for FP8 past I = 256 on the tensor-core down (jobs split along I, down_mma_split): build,
# then each stage unless switched off. SELFTEST: `selftest` FP8 at SPLIT_SHAPES (default Qwen3-235B-like,
# Qwen3.5's D/E/K at I = 384, and an I = 512 shape), both layouts, SPLIT_TOKENS, 2 seeds. BENCH: `bench`
# FP8 row-major at BENCH_SHAPES (default the I = 384 ones) and SPLIT_TOKENS, the package's default, then
# the same with the down forced onto CUDA cores (SMALLM_MMA_DOWN=0, the kernel these shapes took before).
# PEER=1: SGLang's Triton FP8 peer (.peer/run.sh, carry ".peer") at Qwen3.5's D/E/K with I = 384, the same
# tokens. TESTS=1: the GPU test file. MEMCHECK=1: compute-sanitizer memcheck over the selftest at
# MEMTOKENS (default 2,12) on SPLIT_SHAPES. Logs under $OUT, packed into one file; a short table last.
source examples/h200_common.sh
SHAPES=${SPLIT_SHAPES:-qwen3-235b-tp4,D4096-E513-K11-I384-S1,D2048-E64-K8-I512}
T=${SPLIT_TOKENS:-1,2,3,4,6,8,12,16,20}
build
cd /tmp
if [ "${SELFTEST:-1}" = 1 ]; then
  stamp selftest
  timeout 240 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds 2 --formats fp8_block128 \
    --shapes "$SHAPES" --tokens "$T" > "$OUT/selftest_split.log" 2>&1
  tail -1 "$OUT/selftest_split.log"; grep -E " (FAIL|fail)" "$OUT/selftest_split.log" | head -5
fi
tests_stage
if [ "${MEMCHECK:-0}" = 1 ]; then
  stamp memcheck
  timeout "${MEMTIMEOUT:-150}" compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
    selftest --what moe --seeds 1 --formats fp8_block128 --shapes "$SHAPES" --tokens "${MEMTOKENS:-2,12}" > "$OUT/sanitize_split.log" 2>&1
  grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize_split.log"
fi
if [ "${BENCH:-1}" = 1 ]; then
  stamp bench
  B="--shapes ${BENCH_SHAPES:-D4096-E513-K11-I384-S1,qwen3-235b-tp4} --layouts row_major --formats fp8_block128 --tokens $T"
  timeout 150 python3 -m sglang_smallm_plugin.cli bench $B --out "$OUT/bench_split" > "$OUT/bench_split.log" 2>&1
  timeout 150 env SMALLM_MMA_DOWN=0 python3 -m sglang_smallm_plugin.cli bench $B --out "$OUT/bench_cudadown" > "$OUT/bench_cudadown.log" 2>&1
fi
if [ "${PEER:-0}" = 1 ]; then
  stamp peer
  (cd "$R" && timeout 220 env OUT=$OUT/peer bash .peer/run.sh --inter 384 --tokens "$T" --budget-s 200 > "$OUT/peer.log" 2>&1)
fi
stamp done
ls "$OUT"/bench_*.log > /dev/null 2>&1 && bench_summary "$OUT"/bench_*.log
peer_summary
pack
