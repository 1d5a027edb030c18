#!/bin/bash
# One H200 job for the latency trims found with the timeline harness (x copied to shared memory
# during the routing, routing by one warp for <= 32 pairs, h loaded in groups of pairs): build, a
# one-case smoke test, then each stage unless switched off: SELFTEST (moe, SEEDS seeds, default 5,
# and edge), TESTS=1 the GPU tests (within TESTS_TIMEOUT s, default 240), MEMCHECK=1 compute-sanitizer,
# TIMELINE (examples/timeline), BENCH (`sglang-smallm bench`, Qwen3.5 TP4/TP8 row-major: FP8 at
# TOKENS, MXFP4 at MXTOKENS), PEER=1 SGLang's Triton FP8 peer (.peer/, carry [".peer"]) at TOKENS.
# SELFTOKENS: the selftest also at these token counts (SELFSEEDS seeds, default SEEDS; SELFSHAPES, default every
# registered shape; names or D-E-K-I specs); BENCH_SHAPES: the bench's shapes (default Qwen3.5 TP4/TP8);
# MEMTOKENS: memcheck's token counts (default 1,8); MEMTIMEOUT its limit in s (default 120).
# BENCH_AB=1: also a package built from a baseline tree's hip/ (.ab/base, made as in
# h200_ab_job.sh; carry ".ab"), benched right after this tree's. NEW_ENVS (';'-separated settings, e.g.
# "SMALLM_GATEUP_TEAMS=2"): this tree benched again with each, at ENVTOKENS (default TOKENS), both formats.
# PEERTOKENS: the peer's token counts (default TOKENS). TLCASES: the timeline's cases, ';'-separated
# "fmt tokens I" (default "0 1 256;0 8 256;1 1 256;0 1 128").
source examples/h200_common.sh
T=${TOKENS-1,2,4,8}  # TOKENS= (empty): no FP8 bench
MT=${MXTOKENS-$T}
[ "${BENCH_AB:-0}" = 1 ] && tree_pkg "$R/.ab/base/hip" /tmp/basepkg "$OUT/base_build.log"
build
[ "${TIMELINE:-1}" = 1 ] && ( nvcc -std=c++17 -arch=sm_90a -O3 -DSMALLM_TIMELINE -Ihip examples/timeline/timeline.cu -o /tmp/timeline > "$OUT/timeline_build.log" 2>&1 ) &
cd /tmp
stamp smoke  # one case first: a launch error or a hang ends the job here
timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds 1 --shapes qwen35-tp4 --tokens 1 \
  --formats fp8_block128 --layouts row_major > "$OUT/smoke.log" 2>&1 || { tail -20 "$OUT/smoke.log"; pack; exit 11; }
if [ "${SELFTEST:-1}" = 1 ]; then
  stamp selftest
  timeout 200 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds "${SEEDS:-5}" > "$OUT/selftest_default.log" 2>&1
  tail -1 "$OUT/selftest_default.log"; grep -E " (FAIL|fail)" "$OUT/selftest_default.log" | head -5
  if [ -n "${SELFTOKENS:-}" ]; then
    timeout 200 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds "${SELFSEEDS:-${SEEDS:-5}}" --tokens "$SELFTOKENS" \
      --shapes "${SELFSHAPES:-qwen35-tp4,qwen35-tp8,minimax-m3,qwen3-235b-tp4}" > "$OUT/selftest_tokens.log" 2>&1
    tail -1 "$OUT/selftest_tokens.log"; grep -E " (FAIL|fail)" "$OUT/selftest_tokens.log" | head -5
  fi
  timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge.log" 2>&1; tail -1 "$OUT/selftest_edge.log"
fi
tests_stage
memcheck_stage sanitize_default.log "${MEMTIMEOUT:-120}"
if [ "${TIMELINE:-1}" = 1 ]; then
  stamp timeline
  wait
  IFS=';' read -ra tlcases <<< "${TLCASES:-0 1 256;0 8 256;1 1 256;0 1 128}"
  for c in "${tlcases[@]}"; do
    echo "## timeline $c"; timeout 60 /tmp/timeline $c 30 2>&1
  done > "$OUT/timeline.log"
fi
if [ "${BENCH:-1}" = 1 ]; then
  stamp bench
  wait  # the baseline package (BENCH_AB), the timeline build
  bench_formats "" "$T" "$MT"
  [ "${BENCH_AB:-0}" = 1 ] && bench_pkg _base /tmp/basepkg "$OUT/base_build.log" "$T" "$MT"
  IFS=';' read -ra envs <<< "${NEW_ENVS:-}"
  for ev in "${envs[@]}"; do bench_formats "_${ev// /,}" "${ENVTOKENS:-$T}" "${ENVTOKENS:-$MT}" $ev; done  # $ev unquoted: one word per variable
fi
peer_stage "${PEERTOKENS:-$T}"
stamp done
[ -e "$OUT/timeline.log" ] && grep -A14 "^## timeline ${tlcases[0]}" "$OUT/timeline.log" | cut -c1-80
ls "$OUT"/bench_*.log > /dev/null 2>&1 && bench_summary "$OUT"/bench_*.log
peer_summary
pack
