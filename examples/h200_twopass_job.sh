#!/bin/bash
# One H200 job for the default MoE kernels (variant 5 on CUDA) beside the block kernel: build, GPU
# tests, selftest of both, memcheck of the default, `sglang-smallm bench` per variant, SGLang's
# Triton FP8 peer and the read floor (.peer/ from ../shared/peer/prepare.sh). Logs under $OUT; the
# device returns at most 8 files, so tar $OUT before it ends.
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R=$PWD
T=${TOKENS:-1,2,3,4,8}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ] || { echo "skipped: past $1 s"; false; }; }  # leave time to tar
bash examples/h200_job.sh build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
cd /tmp
stamp bench
B="--shapes qwen35-tp4,qwen35-tp8 --layouts row_major --tokens $T"
# run TAG "VAR=value ..." FORMAT: one bench with those switches (an empty string: the defaults)
run() { timeout 100 env $2 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$1" $B --formats "$3" > "$OUT/bench_$1.log" 2>&1; }
run fp8_default "" fp8_block128
run fp8_block "SMALLM_KERNEL_VARIANT=1" fp8_block128
run mxfp4_default "" mxfp4
run mxfp4_block "SMALLM_KERNEL_VARIANT=0" mxfp4
stamp peer
cd "$R"; timeout 150 env OUT=$OUT/peer bash .peer/run.sh --tokens $T > "$OUT/peer.log" 2>&1
timeout 130 python3 .peer/readfloor.py > "$OUT/readfloor.log" 2>&1
cd /tmp
stamp gpu-tests
timeout ${TEST_S:-170} python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" > "$OUT/gpu_pytest.log" 2>&1; tail -1 "$OUT/gpu_pytest.log"
stamp selftest
before 420 && timeout 120 python3 -m sglang_smallm_plugin.cli selftest --what moe > "$OUT/selftest_default.log" 2>&1; tail -1 "$OUT/selftest_default.log"
stamp memcheck
before 440 && timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --what moe --seeds 1 --shapes qwen35-tp8,minimax-m3 --tokens 1,8 > "$OUT/sanitize_default.log" 2>&1
grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize_default.log"
stamp done
for f in fp8_default fp8_block mxfp4_default mxfp4_block; do echo "== $f"; grep -E "kernel .* us" "$OUT/bench_$f.log" | \
  sed -E 's/ +/ /g; s/ row_major//; s/ distinct=[ 0-9.]+//; s/roofline.*//' ; done
grep -E "T= *[0-9]+ shipped +(jit|triton) +full" "$OUT/peer.log" | sed -E 's/ +/ /g' | cut -c1-60
(cd "$OUT" && tar czf /tmp/smallm_logs.tgz . && rm -rf ./* && mv /tmp/smallm_logs.tgz .)  # one file comes back
