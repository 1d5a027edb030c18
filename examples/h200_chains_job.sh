#!/bin/bash
# One H200 job for the tensor-core kernels' latency trims (linear weight addressing in the gate/up
# issue, independent MMA chains, unguarded steps when every warp has all of them): build, numerics
# (selftest moe + edge, GPU tests, MEMCHECK=1: compute-sanitizer), `sglang-smallm bench` of FP8 and
# MXFP4 (Qwen3.5 TP4/TP8, row-major), per-kernel times and (PEER=1) SGLang's Triton FP8 peer (.peer/
# from ../shared/peer/prepare.sh). Logs under $OUT, tarred at the end.
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R=$PWD
T=${TOKENS:-1,2,4,8}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
bash examples/h200_job.sh build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
cd /tmp
stamp selftest
timeout 150 python3 -m sglang_smallm_plugin.cli selftest --what moe > "$OUT/selftest_default.log" 2>&1; tail -1 "$OUT/selftest_default.log"
grep -E " (FAIL|fail)" "$OUT/selftest_default.log" | head -5
timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge.log" 2>&1; tail -1 "$OUT/selftest_edge.log"
stamp gpu-tests
[ "${TESTS:-1}" = 1 ] && timeout 170 python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" > "$OUT/gpu_pytest.log" 2>&1; tail -1 "$OUT/gpu_pytest.log"
stamp memcheck
[ "${MEMCHECK:-0}" = 1 ] && timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --what moe --seeds 1 --shapes qwen35-tp4,qwen35-tp8,minimax-m3 --tokens 1,8 > "$OUT/sanitize_default.log" 2>&1
[ -e "$OUT/sanitize_default.log" ] && grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize_default.log"
stamp bench
B="--shapes qwen35-tp4,qwen35-tp8 --layouts row_major --tokens $T"
for f in fp8_block128 mxfp4; do timeout 90 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$f" $B --formats $f > "$OUT/bench_$f.log" 2>&1; done
stamp profile
timeout 40 python3 "$R/examples/profile_kernels.py" qwen35-tp4 fp8_block128 1,8 > "$OUT/profile_tp4_fp8.log" 2>&1
timeout 40 python3 "$R/examples/profile_kernels.py" qwen35-tp4 mxfp4 1,8 > "$OUT/profile_tp4_mxfp4.log" 2>&1
stamp peer
cd "$R"; [ "${PEER:-0}" = 1 ] && timeout 110 env OUT=$OUT/peer bash .peer/run.sh --tokens $T > "$OUT/peer.log" 2>&1
stamp done
for f in fp8_block128 mxfp4; do echo "== $f"; grep -E "kernel .* us" "$OUT/bench_$f.log" | \
  sed -E 's/ +/ /g; s/ row_major//; s/ distinct=[ 0-9.]+//; s/roofline.*//; s/fp8_block128 //; s/mxfp4 //; s/MB kernel//' ; done
grep -hE "^T=" "$OUT"/profile_tp4_*.log | cut -c1-200
[ -e "$OUT/peer.log" ] && grep -E "T= *[0-9]+ shipped +jit +full" "$OUT/peer.log" | sed -E 's/ +/ /g' | cut -c1-45
(cd "$OUT" && tar czf /tmp/smallm_logs.tgz . && rm -rf ./* && mv /tmp/smallm_logs.tgz .)  # one file comes back
