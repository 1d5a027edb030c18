#!/bin/bash
# One H200 job for FP8 past I = 256 on the tensor-core down (jobs split along I, down_mma_split): build,
# then each stage unless switched off. SELFTEST: `selftest` FP8 at SPLIT_SHAPES (default Qwen3-235B-like,
# Qwen3.5's D/E/K at I = 384, and an I = 512 shape), both layouts, SPLIT_TOKENS, SEEDS seeds (default 2).
# BENCH: `bench` FP8 row-major at BENCH_SHAPES (default the I = 384 ones) and BENCH_TOKENS (default
# SPLIT_TOKENS), the package's default, then
# the same with the down forced onto CUDA cores (SMALLM_MMA_DOWN=0, the kernel these shapes took before;
# CUDADOWN=0 leaves that one out).
# PEER=1: SGLang's Triton FP8 peer (.peer/run.sh, carry ".peer") at Qwen3.5's D/E/K with I = 384 (PEER_ARGS
# replaces "--inter 384 --budget-s 180", e.g. "--inter 512 --budget-s 60"; until "h200-s42" run 6 it could
# not), the bench's tokens. TESTS=1: the GPU test file. MEMCHECK=1: compute-sanitizer memcheck over the
# FP8 selftest at MEMTOKENS (default 2,12) on SPLIT_SHAPES. Logs under $OUT, packed into one file; a short table last.
# (Runs 1-2 of examples/results "h200-s40" ran this job with its own copies of the bench, memcheck and peer
# stages, whose logs were bench_split, bench_cudadown and peer.log; it now calls h200_common.sh's, whose
# bench logs are bench_fp8_block128_split and bench_fp8_block128_cudadown.)
source examples/h200_common.sh
SHAPES=${SPLIT_SHAPES:-qwen3-235b-tp4,D4096-E513-K11-I384-S1,D2048-E64-K8-I512}
T=${SPLIT_TOKENS:-1,2,3,4,6,8,12,16,20}
BT=${BENCH_TOKENS:-$T}
build
cd /tmp
if [ "${SELFTEST:-1}" = 1 ]; then
  stamp selftest
  timeout 240 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds "${SEEDS:-2}" --formats fp8_block128 \
    --shapes "$SHAPES" --tokens "$T" > "$OUT/selftest_split.log" 2>&1
  tail -1 "$OUT/selftest_split.log"; grep -E " (FAIL|fail)" "$OUT/selftest_split.log" | head -5
fi
tests_stage
MEMSHAPES=$SHAPES MEMFORMATS=fp8_block128 MEMTOKENS=${MEMTOKENS:-2,12} memcheck_stage sanitize_split.log "${MEMTIMEOUT:-150}"
if [ "${BENCH:-1}" = 1 ]; then
  stamp bench
  export BENCH_SHAPES=${BENCH_SHAPES:-D4096-E513-K11-I384-S1,qwen3-235b-tp4}
  bench_formats _split "$BT" ""
  [ "${CUDADOWN:-1}" = 1 ] && bench_formats _cudadown "$BT" "" SMALLM_MMA_DOWN=0
fi
PEER_ARGS=${PEER_ARGS:-"--inter 384 --budget-s 180"} peer_stage "$BT"
stamp done
ls "$OUT"/bench_*.log > /dev/null 2>&1 && bench_summary "$OUT"/bench_*.log
peer_summary
pack
