#!/bin/bash
# One H200 job for the larger x stage of the tensor-core gate/up (kXStageBytes 64 -> 160 KB: up to
# 20 tokens at D = 4096 on tensor cores, one block per SM above 64 KB): build, selftest at 1/8/12/16/20
# tokens (every shape, format and layout, 2 seeds) and the edge cases, `sglang-smallm bench` of FP8
# and MXFP4 at 1/8/12/16 tokens, and SGLang's Triton FP8 peer (.peer/) at the same counts.
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R=$PWD
T=${TOKENS:-1,8,12,16}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
bash examples/h200_job.sh build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
cd /tmp
stamp selftest
timeout 120 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds 2 --tokens 1,8,12,16,20 > "$OUT/selftest_tokens.log" 2>&1; tail -1 "$OUT/selftest_tokens.log"
grep -E " (FAIL|fail)" "$OUT/selftest_tokens.log" | head -5
timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge.log" 2>&1; tail -1 "$OUT/selftest_edge.log"
stamp bench
B="--shapes qwen35-tp4,qwen35-tp8 --layouts row_major --tokens $T"
for f in fp8_block128 mxfp4; do timeout 80 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$f" $B --formats $f > "$OUT/bench_$f.log" 2>&1; done
stamp peer
cd "$R"; timeout 100 env OUT=$OUT/peer bash .peer/run.sh --tokens $T > "$OUT/peer.log" 2>&1
stamp done
for f in fp8_block128 mxfp4; do echo "== $f"; grep -E "kernel .* us" "$OUT/bench_$f.log" | \
  sed -E 's/ +/ /g; s/ row_major//; s/ distinct=[ 0-9.]+//; s/roofline.*//; s/fp8_block128 //; s/mxfp4 //; s/MB kernel//' ; done
grep -E "T= *[0-9]+ shipped +jit +full" "$OUT/peer.log" | sed -E 's/ +/ /g' | cut -c1-45
(cd "$OUT" && tar czf /tmp/smallm_logs.tgz . && rm -rf ./* && mv /tmp/smallm_logs.tgz .)  # one file comes back
