#!/bin/bash
# One H200 job for the FP8 gate/up by TMA tiles on wgmma (hip/smallm_gateup_tma.h, SMALLM_GATEUP_TMA=1
# or 2): the package built for sm_90a; for each switch value in MODES (default "1 2"), `sglang-smallm
# selftest` (moe: every shape, SELFTEST_FORMATS, both layouts, SEEDS seeds at TOKENS; the TMA kernel
# takes the FP8 row-major calls, the rest run as before) and its edge cases; compute-sanitizer memcheck
# at MEMTOKENS with MEMMODE (default 2); `sglang-smallm bench` FP8 Qwen3.5 TP4/TP8 row-major at
# BENCH_TOKENS with the switch 0, then each of MODES (ROUNDS=2: all of them twice);
# with PROBE=1 (default) also the wgmma probe with PROBE_TMA=1 (the package's TMA gate/up alone beside
# the W13 read floor, tokens 1,2,4,8,16,20: examples/wgmma). The package's commands run from /tmp (from the checkout, python
# would import its uncompiled sglang_smallm_plugin/). Summary last; every log packed into one file.
# BENCH_MODES (default "0 $MODES") are the benched values, SELFTEST=0 skips the selftests, MEMCHECK=0
# the memcheck. ("h200-tma" run 4 ran entries MODE:J, J a jobs-per-warpgroup switch measured and
# dropped: examples/results.) QUICK=MODE runs one short selftest with that mode first and stops the
# job where it fails or hangs (90 s). TIMELINE="1 8" also builds examples/timeline with
# -DSMALLM_TIMELINE and prints, per token count and each of TLMODES (default "0 3"), where one call's
# time goes block by block (the one-kernel MoE marks its gate/up jobs as kernel "first", its down steps
# as kernel "down").
# Example: PROBE=0 bash examples/h200_tma_job.sh   (no carry needed)
source examples/h200_common.sh
T=${TOKENS:-1,3,8,13,20}
BT=${BENCH_TOKENS:-1,2,4,8,12,16,20}
if [ "${PROBE:-1}" = 1 ]; then
  ( nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 examples/wgmma/wgmma_gateup_probe.cu -o /tmp/wgp \
      > "$OUT/probe_build.log" 2>&1 ) &
fi
if [ -n "${TIMELINE:-}" ]; then  # the timeline harness (examples/timeline), built beside the package
  ( nvcc -std=c++17 -arch=sm_90a -O3 -DSMALLM_TIMELINE -DSMALLM_BUILD_ARCH=\"sm_90a\" -Ihip examples/timeline/timeline.cu -o /tmp/timeline \
      > "$OUT/timeline_build.log" 2>&1 ) &
fi
stamp build
build
wait
if [ -n "${TIMELINE:-}" ] && [ -x /tmp/timeline ]; then  # TIMELINE="T..." at I = 256, each TLMODES value
  stamp timeline
  for t in $TIMELINE; do for m in ${TLMODES:-0 3}; do
    SMALLM_GATEUP_TMA=$m timeout 60 /tmp/timeline 0 "$t" 256 20 > "$OUT/timeline_m${m}_t$t.log" 2>&1
  done; done
fi
if [ "${PROBE:-1}" = 1 ] && [ -x /tmp/wgp ]; then
  stamp probe
  PROBE_TMA=1 timeout 40 /tmp/wgp 1,2,4,8,16,20 > "$OUT/probe_tma.log" 2>&1
fi
cd /tmp
MODES=${MODES:-1 2}
# an entry MODE:VAR=VALUE also sets VAR (log tag MODE_VALUE)
envs_of() { local m=${1%%:*}; [ "$m" != "$1" ] && echo "SMALLM_GATEUP_TMA=$m ${1#*:}" || echo "SMALLM_GATEUP_TMA=$1"; }
tag_of() { local m=${1%%:*}; [ "$m" != "$1" ] && echo "${m}_${1##*=}" || echo "$1"; }
if [ -n "${QUICK:-}" ]; then  # QUICK=MODE: one short selftest first (a hang costs 90 s, not the job)
  stamp quick
  timeout 90 env $(envs_of "$QUICK") python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds 1 \
    --shapes qwen35-tp4 --formats fp8_block128 --layouts row_major --tokens 1,8 > "$OUT/quick.log" 2>&1
  rc=$?; tail -6 "$OUT/quick.log"; echo "quick rc=$rc"
  [ $rc = 0 ] || { pack; exit 13; }
fi
stamp selftest
for e in $MODES; do
  [ "${SELFTEST:-1}" = 1 ] || break
  m=$(tag_of "$e")
  timeout 300 env $(envs_of "$e") python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds "${SEEDS:-2}" \
    --formats "${SELFTEST_FORMATS:-fp8_block128,mxfp4}" --tokens "$T" > "$OUT/selftest_moe_tma$m.log" 2>&1
  timeout 60 env $(envs_of "$e") python3 -m sglang_smallm_plugin.cli selftest --what edge \
    --formats "${SELFTEST_FORMATS:-fp8_block128,mxfp4}" > "$OUT/selftest_edge_tma$m.log" 2>&1
done
stamp bench
runs="${BENCH_MODES:-0 $MODES}"; [ "${ROUNDS:-1}" = 2 ] && runs="$runs $runs"
logs=""
for e in $runs; do
  m=$(tag_of "$e")
  log="$OUT/bench_m$m.log"; [ -e "$log" ] && log="$OUT/bench_m${m}_r2.log"
  timeout 150 env $(envs_of "$e") python3 -m sglang_smallm_plugin.cli bench --out "${log%.log}" \
    --shapes qwen35-tp4,qwen35-tp8 --layouts row_major --formats fp8_block128 --tokens "$BT" > "$log" 2>&1
  logs="$logs $log"
done
stamp memcheck
[ "${MEMCHECK:-1}" = 1 ] && env $(envs_of "${MEMMODE:-2}") timeout "${MEMCHECK_TIMEOUT:-150}" compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --what moe --seeds 1 --shapes qwen35-tp4,minimax-m3 --formats fp8_block128 --layouts row_major \
  --tokens "${MEMTOKENS:-1,8}" > "$OUT/sanitize_tma.log" 2>&1
stamp done
for e in $MODES; do
  [ "${SELFTEST:-1}" = 1 ] || break
  m=$(tag_of "$e")
  echo "== $(envs_of "$e")"; tail -1 "$OUT/selftest_moe_tma$m.log"; grep -E " (FAIL|fail)" "$OUT/selftest_moe_tma$m.log" | head -5
  grep -E "FAIL|edge cases:" "$OUT/selftest_edge_tma$m.log" | cut -c1-120
  grep -E "row_major" "$OUT/selftest_moe_tma$m.log" | awk '{print $6}' | sort -g | tail -1 | sed 's/^/  worst row-major FP8 error: /'
done
[ -e "$OUT/sanitize_tma.log" ] && grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize_tma.log"
[ -e "$OUT/probe_tma.log" ] && { echo "== probe, PROBE_TMA=1"; grep -E "^(TP|ALL|SOME)" "$OUT/probe_tma.log"; }
for f in "$OUT"/timeline_m*.log; do [ -e "$f" ] && { echo "== $(basename "$f" .log)"; cat "$f"; }; done
python3 "$R/examples/tma_bench_table.py" $logs
pack
