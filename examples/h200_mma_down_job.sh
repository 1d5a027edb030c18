#!/bin/bash
# One H200 job for the FP8 down projection on tensor cores (smallm_down_mma_kernel) and the gate/up
# job loop that issues the first weights before staging x: build, numerics (selftest moe + edge, GPU
# tests, memcheck), then `sglang-smallm bench` of the default beside SMALLM_MMA_DOWN=0 (the previous
# CUDA-core down; AB=0 skips it), per-kernel times, SGLang's Triton FP8 peer (.peer/ from
# ../shared/peer/prepare.sh) and (FLOOR=1) ../shared/peer/readfloor.py, all in this job. Logs under $OUT, tarred at the end.
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R=$PWD
T=${TOKENS:-1,2,3,4,6,8,12,16}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ] || { echo "skipped: past $1 s"; false; }; }
bash examples/h200_job.sh build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
cd /tmp
stamp selftest
timeout 120 python3 -m sglang_smallm_plugin.cli selftest --what moe > "$OUT/selftest_default.log" 2>&1; tail -1 "$OUT/selftest_default.log"
grep -E " (FAIL|fail)" "$OUT/selftest_default.log" | head -5
timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge.log" 2>&1; tail -1 "$OUT/selftest_edge.log"
stamp gpu-tests
timeout 150 python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" > "$OUT/gpu_pytest.log" 2>&1; tail -1 "$OUT/gpu_pytest.log"
stamp memcheck
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --what moe --seeds 1 --shapes qwen35-tp4,qwen35-tp8,minimax-m3 --tokens 1,8 > "$OUT/sanitize_default.log" 2>&1
grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize_default.log"
stamp bench
B="--shapes qwen35-tp4,qwen35-tp8 --layouts row_major --tokens $T"
run() { timeout 100 env $2 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$1" $B --formats "$3" > "$OUT/bench_$1.log" 2>&1; }
run fp8_default "" fp8_block128
[ "${AB:-1}" = 1 ] && run fp8_cudacore_down "SMALLM_MMA_DOWN=0" fp8_block128
before 360 && run mxfp4_default "" mxfp4
stamp profile
before 380 && timeout 60 python3 "$R/examples/profile_kernels.py" qwen35-tp4 fp8_block128 1,8 > "$OUT/profile_tp4.log" 2>&1
stamp peer
cd "$R"; before 420 && timeout 120 env OUT=$OUT/peer bash .peer/run.sh --tokens $T > "$OUT/peer.log" 2>&1
stamp readfloor
[ "${FLOOR:-0}" = 1 ] && before 430 && timeout 130 python3 .peer/readfloor.py > "$OUT/readfloor.log" 2>&1
stamp done
[ -s "$OUT/readfloor.log" ] && tail -14 "$OUT/readfloor.log"
for f in fp8_default fp8_cudacore_down mxfp4_default; do [ -e "$OUT/bench_$f.log" ] || continue; echo "== $f"; grep -E "kernel .* us" "$OUT/bench_$f.log" | \
  sed -E 's/ +/ /g; s/ row_major//; s/ distinct=[ 0-9.]+//; s/roofline.*//; s/fp8_block128 //; s/mxfp4 //' ; done
grep -E "^T=" "$OUT/profile_tp4.log" | cut -c1-200
grep -E "T= *[0-9]+ shipped +jit +full" "$OUT/peer.log" | sed -E 's/ +/ /g' | cut -c1-45
(cd "$OUT" && tar czf /tmp/smallm_logs.tgz . && rm -rf ./* && mv /tmp/smallm_logs.tgz .)  # one file comes back
