#!/bin/bash
# One H200 job for the tensor-core gate/up with bulk-copied weights (smallm_gateup_bulk_kernel, one
# block per SM beside the down kernel): build, numerics (selftest moe + edge, GPU tests incl. the
# SMALLM_MMA_BULK=0 child, memcheck), then `sglang-smallm bench` of FP8 and MXFP4 with the default
# beside SMALLM_MMA_BULK=0 (weights through registers; AB=0 skips it), per-kernel times, and
# (PEER=1) SGLang's Triton FP8 peer (.peer/ from ../shared/peer/prepare.sh). Logs under $OUT, tarred.
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R=$PWD
T=${TOKENS:-1,2,4,8}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ] || { echo "skipped: past $1 s"; false; }; }
bash examples/h200_job.sh build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
cd /tmp
stamp selftest
timeout 150 python3 -m sglang_smallm_plugin.cli selftest --what moe > "$OUT/selftest_default.log" 2>&1; tail -1 "$OUT/selftest_default.log"
grep -E " (FAIL|fail)" "$OUT/selftest_default.log" | head -5
timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge.log" 2>&1; tail -1 "$OUT/selftest_edge.log"
stamp gpu-tests
[ "${TESTS:-1}" = 1 ] && timeout 170 python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" > "$OUT/gpu_pytest.log" 2>&1; tail -1 "$OUT/gpu_pytest.log"
stamp memcheck
[ "${TESTS:-1}" = 1 ] && timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --what moe --seeds 1 --layouts row_major --shapes qwen35-tp4,qwen35-tp8,minimax-m3 --tokens 1,8 > "$OUT/sanitize_default.log" 2>&1
grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize_default.log"
stamp bench
B="--shapes qwen35-tp4,qwen35-tp8 --layouts row_major --tokens $T"
run() { timeout 90 env $2 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$1" $B --formats "$3" > "$OUT/bench_$1.log" 2>&1; }
run fp8_default "" fp8_block128
run mxfp4_default "" mxfp4
[ "${AB:-1}" = 1 ] && before 400 && run fp8_registers "SMALLM_MMA_BULK=0" fp8_block128
[ "${AB:-1}" = 1 ] && before 430 && run mxfp4_registers "SMALLM_MMA_BULK=0" mxfp4
stamp profile
before 450 && timeout 40 python3 "$R/examples/profile_kernels.py" qwen35-tp4 fp8_block128 1,8 > "$OUT/profile_tp4_fp8.log" 2>&1
stamp peer
cd "$R"; [ "${PEER:-1}" = 1 ] && before 470 && timeout 110 env OUT=$OUT/peer bash .peer/run.sh --tokens $T > "$OUT/peer.log" 2>&1
stamp done
for f in fp8_default fp8_registers mxfp4_default mxfp4_registers; do [ -e "$OUT/bench_$f.log" ] || continue; echo "== $f"; grep -E "kernel .* us" "$OUT/bench_$f.log" | \
  sed -E 's/ +/ /g; s/ row_major//; s/ distinct=[ 0-9.]+//; s/roofline.*//; s/fp8_block128 //; s/mxfp4 //; s/MB kernel//' ; done
grep -E "^T=" "$OUT/profile_tp4_fp8.log" | cut -c1-200
[ -e "$OUT/peer.log" ] && grep -E "T= *[0-9]+ shipped +jit +full" "$OUT/peer.log" | sed -E 's/ +/ /g' | cut -c1-45
(cd "$OUT" && tar czf /tmp/smallm_logs.tgz . && rm -rf ./* && mv /tmp/smallm_logs.tgz .)  # one file comes back
