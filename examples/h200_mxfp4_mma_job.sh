#!/bin/bash
# One H200 job for MXFP4 on tensor cores (smallm_gateup_mma_kernel / smallm_down_mma_kernel with
# Fmt = kMxfp4): build, numerics (selftest moe + edge incl. wide_scales, GPU tests, memcheck), then
# `sglang-smallm bench` of MXFP4 beside SMALLM_MMA=0 (the CUDA-core path it replaces; AB=0 skips it)
# with the MXFP4 read floor and roofline of the same run, FP8 (its kernels were regenerated from the
# shared templates) and per-kernel times. Logs under $OUT, tarred at the end.
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R=$PWD
T=${TOKENS:-1,2,4,8,16,48}
TF=${FP8_TOKENS:-1,2,4,8}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ] || { echo "skipped: past $1 s"; false; }; }
bash examples/h200_job.sh build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
cd /tmp
stamp selftest
timeout 150 python3 -m sglang_smallm_plugin.cli selftest --what moe > "$OUT/selftest_default.log" 2>&1; tail -1 "$OUT/selftest_default.log"
grep -E " (FAIL|fail)" "$OUT/selftest_default.log" | head -5
timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge.log" 2>&1; tail -1 "$OUT/selftest_edge.log"
grep -E "FAIL|wide_scales" "$OUT/selftest_edge.log" | cut -c1-110
stamp gpu-tests
[ "${TESTS:-1}" = 1 ] && timeout 150 python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" > "$OUT/gpu_pytest.log" 2>&1; tail -1 "$OUT/gpu_pytest.log"
stamp memcheck
[ "${TESTS:-1}" = 1 ] && timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --what moe --seeds 1 --formats mxfp4 --shapes qwen35-tp4,qwen35-tp8,minimax-m3 --tokens 1,8 > "$OUT/sanitize_mxfp4.log" 2>&1
grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize_mxfp4.log"
stamp bench
B="--shapes qwen35-tp4,qwen35-tp8 --layouts row_major"
run() { timeout 120 env $2 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$1" $B --formats "$3" --tokens "$4" > "$OUT/bench_$1.log" 2>&1; }
run mxfp4_default "" mxfp4 "$T"
[ "${AB:-1}" = 1 ] && before 420 && run mxfp4_cudacore "SMALLM_MMA=0" mxfp4 "$T"
before 480 && run fp8_default "" fp8_block128 "$TF"
stamp profile
before 520 && timeout 50 python3 "$R/examples/profile_kernels.py" qwen35-tp4 mxfp4 1,8 > "$OUT/profile_tp4_mxfp4.log" 2>&1
stamp done
for f in mxfp4_default mxfp4_cudacore fp8_default; do [ -e "$OUT/bench_$f.log" ] || continue; echo "== $f"; grep -E "kernel .* us" "$OUT/bench_$f.log" | \
  sed -E 's/ +/ /g; s/ row_major//; s/ distinct=[ 0-9.]+//; s/roofline.*//; s/fp8_block128 //; s/mxfp4 //' ; done
grep -E "^T=" "$OUT/profile_tp4_mxfp4.log" | cut -c1-200
(cd "$OUT" && tar czf /tmp/smallm_logs.tgz . && rm -rf ./* && mv /tmp/smallm_logs.tgz .)  # one file comes back
