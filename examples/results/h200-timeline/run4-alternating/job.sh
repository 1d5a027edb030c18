#!/bin/bash
# One H200 job for the latency trims found with the timeline harness (x copied to shared memory at
# kernel entry, routing by one warp for <= 32 pairs, h loaded in groups of pairs): build, a one-case
# smoke test, selftest moe (SEEDS seeds, default 5) and edge, optional GPU tests (TESTS=1) and
# compute-sanitizer (MEMCHECK=1), the timeline (examples/timeline), `sglang-smallm bench` of FP8 and
# MXFP4 (Qwen3.5 TP4/TP8, row-major), and (PEER=1) SGLang's
# Triton FP8 peer (.peer/) at the same token counts. Carry [".peer"] for PEER=1.
source examples/h200_common.sh
T=${TOKENS:-1,2,4,8}
build
( nvcc -std=c++17 -arch=sm_90a -O3 -DSMALLM_TIMELINE -Ihip examples/timeline/timeline.cu -o /tmp/timeline > "$OUT/timeline_build.log" 2>&1 ) &
cd /tmp
stamp smoke  # one case first: a launch error or a hang ends the job here
timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds 1 --shapes qwen35-tp4 --tokens 1 \
  --formats fp8_block128 --layouts row_major > "$OUT/smoke.log" 2>&1 || { tail -20 "$OUT/smoke.log"; pack; exit 11; }
stamp selftest
timeout 200 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds "${SEEDS:-5}" > "$OUT/selftest_default.log" 2>&1
tail -1 "$OUT/selftest_default.log"; grep -E " (FAIL|fail)" "$OUT/selftest_default.log" | head -5
timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge.log" 2>&1; tail -1 "$OUT/selftest_edge.log"
if [ "${TESTS:-0}" = 1 ]; then
  stamp gpu-tests
  timeout 240 python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" > "$OUT/gpu_pytest.log" 2>&1; tail -1 "$OUT/gpu_pytest.log"
fi
if [ "${MEMCHECK:-0}" = 1 ]; then
  stamp memcheck
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
    selftest --what moe --seeds 1 --shapes qwen35-tp4,qwen35-tp8,minimax-m3 --tokens 1,8 > "$OUT/sanitize_default.log" 2>&1
  grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize_default.log"
fi
stamp timeline
wait
for c in "0 1 256" "0 8 256" "1 1 256" "0 1 128"; do
  echo "## timeline $c"; timeout 60 /tmp/timeline $c 30 2>&1
done > "$OUT/timeline.log"
stamp bench
B="--shapes qwen35-tp4,qwen35-tp8 --layouts row_major --tokens $T"
for f in ${FORMATS:-fp8_block128 mxfp4}; do
  timeout 100 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$f" $B --formats $f > "$OUT/bench_$f.log" 2>&1
done
if [ "${PEER:-0}" = 1 ]; then
  stamp peer
  cd "$R"; timeout 120 env OUT=$OUT/peer bash .peer/run.sh --tokens $T > "$OUT/peer.log" 2>&1
fi
stamp done
grep -A14 "^## timeline 0 1 256" "$OUT/timeline.log" | cut -c1-80
bench_summary "$OUT"/bench_*.log
peer_summary
pack
