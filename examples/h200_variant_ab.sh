#!/bin/bash
# A/B of MoE kernel variants on one H200 in one job: build, numerics of the candidate
# (selftest + memcheck), then `sglang-smallm bench` once per variant (SMALLM_KERNEL_VARIANT).
# Usage: OUT=/tmp/o bash examples/h200_variant_ab.sh CANDIDATE BASELINE [bench args...]
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
CAND=${1:-3}; BASE=${2:-1}; shift 2 || true
BENCH=${*:---shapes qwen35-tp4,qwen35-tp8 --formats fp8_block128 --tokens 1,2,3,4,8,16}
export PYTHONUNBUFFERED=1
bash examples/h200_job.sh build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
cd /tmp
SMALLM_KERNEL_VARIANT=$CAND python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds ${SEEDS:-2} --tokens 1,3,8,48 \
  > "$OUT/selftest_v$CAND.log" 2>&1; tail -2 "$OUT/selftest_v$CAND.log"
SMALLM_KERNEL_VARIANT=$CAND timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --what moe --seeds 1 --shapes qwen35-tp8 --tokens 1,8 > "$OUT/sanitize_v$CAND.log" 2>&1; tail -2 "$OUT/sanitize_v$CAND.log"
for v in $BASE $CAND; do
  SMALLM_KERNEL_VARIANT=$v python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_v$v" $BENCH > "$OUT/bench_v$v.log" 2>&1
done
for v in $BASE $CAND; do echo "== variant $v"; grep -E "kernel .* us" "$OUT/bench_v$v.log" | sed -E 's/ +/ /g' | cut -c1-150; done
