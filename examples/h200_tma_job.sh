#!/bin/bash
# One H200 job for the FP8 gate/up by TMA tiles on wgmma (hip/smallm_gateup_tma.h, SMALLM_GATEUP_TMA=1):
# the package built for sm_90a; with the switch on, `sglang-smallm selftest` (moe: every shape, both
# formats and layouts, SEEDS seeds at TOKENS; the TMA kernel takes the FP8 row-major calls, the rest run
# as before) and its edge cases, compute-sanitizer memcheck at MEMTOKENS; `sglang-smallm bench` FP8
# Qwen3.5 TP4/TP8 row-major at BENCH_TOKENS with the switch off, then on (ROUNDS=2: off, on, off, on);
# with PROBE=1 (default) also the wgmma probe's TMA form with two and, where they fit, three stages
# (examples/wgmma, tokens 1,2,4,8). The package's commands run from /tmp (from the checkout, python
# would import its uncompiled sglang_smallm_plugin/). Summary last; every log packed into one file.
# Example: PROBE=0 bash examples/h200_tma_job.sh   (no carry needed)
source examples/h200_common.sh
T=${TOKENS:-1,3,8,13,20}
BT=${BENCH_TOKENS:-1,2,4,8,12,16,20}
if [ "${PROBE:-1}" = 1 ]; then
  ( nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 examples/wgmma/wgmma_gateup_probe.cu -o /tmp/wgp \
      > "$OUT/probe_build.log" 2>&1 ) &
fi
stamp build
build
wait
if [ "${PROBE:-1}" = 1 ] && [ -x /tmp/wgp ]; then
  stamp probe
  for st in 2 3; do
    PROBE_TMA=1 PROBE_STAGES=$st timeout 40 /tmp/wgp 1,2,4,8 > "$OUT/probe_tma_st$st.log" 2>&1
  done
fi
cd /tmp
stamp selftest
SMALLM_GATEUP_TMA=1 timeout 300 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds "${SEEDS:-2}" \
  --formats "${SELFTEST_FORMATS:-fp8_block128,mxfp4}" --tokens "$T" > "$OUT/selftest_moe_tma.log" 2>&1
stamp bench
runs="off on"; [ "${ROUNDS:-1}" = 2 ] && runs="off on off2 on2"
for run in $runs; do
  sw=0; [ "${run#on}" != "$run" ] && sw=1
  SMALLM_GATEUP_TMA=$sw timeout 150 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$run" \
    --shapes qwen35-tp4,qwen35-tp8 --layouts row_major --formats fp8_block128 --tokens "$BT" > "$OUT/bench_$run.log" 2>&1
done
SMALLM_GATEUP_TMA=1 timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge_tma.log" 2>&1
stamp memcheck
SMALLM_GATEUP_TMA=1 timeout "${MEMCHECK_TIMEOUT:-150}" compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --what moe --seeds 1 --shapes qwen35-tp4,minimax-m3 --formats fp8_block128 --layouts row_major \
  --tokens "${MEMTOKENS:-1,8}" > "$OUT/sanitize_tma.log" 2>&1
stamp done
tail -1 "$OUT/selftest_moe_tma.log"; grep -E " (FAIL|fail)" "$OUT/selftest_moe_tma.log" | head -5
tail -1 "$OUT/selftest_edge_tma.log"
grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize_tma.log"
grep -m3 -iE "kernel plan|gate/up by TMA" "$OUT/bench_on.log"
for f in "$OUT"/probe_tma_st*.log; do [ -e "$f" ] && { echo "== $(basename "$f")"; grep -E "^(TP|ALL|SOME)" "$f"; }; done
python3 "$R/examples/tma_bench_table.py" $(for run in $runs; do echo "$OUT/bench_$run.log"; done)
pack
