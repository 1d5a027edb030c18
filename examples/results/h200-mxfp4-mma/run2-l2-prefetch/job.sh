#!/bin/bash
# One H200 job for the L2 prefetches of the tensor-core gate/up kernel (SMALLM_L2_PREFETCH, bit 0:
# W2 for the down kernel, bit 1: the block's later W13 jobs): build, numerics (selftest moe + edge,
# GPU tests incl. the SMALLM_L2_PREFETCH=0 child), then `sglang-smallm bench` of FP8 and MXFP4 at
# SMALLM_L2_PREFETCH=3 (default), 1, 2 and 0 in the same run, per-kernel times, and (PEER=1) SGLang's
# Triton FP8 peer (.peer/ from ../shared/peer/prepare.sh). Logs under $OUT, tarred at the end.
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
stamp bench
B="--shapes qwen35-tp4,qwen35-tp8 --layouts row_major --tokens $T"
run() { timeout 90 env SMALLM_L2_PREFETCH=$2 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$1_pf$2" $B --formats "$1" > "$OUT/bench_$1_pf$2.log" 2>&1; }
for pf in ${PF:-3 0 1 2}; do for f in mxfp4 fp8_block128; do before 500 && run $f $pf; done; done
stamp profile
before 520 && timeout 40 python3 "$R/examples/profile_kernels.py" qwen35-tp4 fp8_block128 1,8 > "$OUT/profile_tp4_fp8.log" 2>&1
stamp peer
cd "$R"; [ "${PEER:-0}" = 1 ] && before 470 && timeout 120 env OUT=$OUT/peer bash .peer/run.sh --tokens $T > "$OUT/peer.log" 2>&1
stamp done
for f in "$OUT"/bench_*.log; do echo "== $(basename $f .log)"; grep -E "kernel .* us" "$f" | \
  sed -E 's/ +/ /g; s/ row_major//; s/ distinct=[ 0-9.]+//; s/roofline.*//; s/fp8_block128 //; s/mxfp4 //; s/MB kernel//' ; done
grep -E "^T=" "$OUT/profile_tp4_fp8.log" | cut -c1-200
[ -e "$OUT/peer.log" ] && grep -E "T= *[0-9]+ shipped +jit +full" "$OUT/peer.log" | sed -E 's/ +/ /g' | cut -c1-45
(cd "$OUT" && tar czf /tmp/smallm_logs.tgz . && rm -rf ./* && mv /tmp/smallm_logs.tgz .)  # one file comes back
