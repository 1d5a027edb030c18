#!/bin/bash
# One H200 job for the two-kernel MoE (variant 5) beside the default: build, GPU tests, selftest of
# the default and of variant 5, memcheck of variant 5, `sglang-smallm bench` per variant, SGLang's
# Triton FP8 peer and the read floor (.peer/ from ../shared/peer/prepare.sh). Logs under $OUT.
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R=$PWD
T=${TOKENS:-1,2,3,4,8}
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
bash examples/h200_job.sh build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
cd /tmp
stamp gpu-tests
timeout 240 python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" > "$OUT/gpu_pytest.log" 2>&1; tail -1 "$OUT/gpu_pytest.log"
stamp selftest
timeout 120 python3 -m sglang_smallm_plugin.cli selftest > "$OUT/selftest_default.log" 2>&1; tail -1 "$OUT/selftest_default.log"
SMALLM_KERNEL_VARIANT=5 timeout 120 python3 -m sglang_smallm_plugin.cli selftest > "$OUT/selftest_v5.log" 2>&1; tail -1 "$OUT/selftest_v5.log"
stamp memcheck
SMALLM_KERNEL_VARIANT=5 timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --seeds 1 --shapes qwen35-tp8,minimax-m3 --tokens 1,8 > "$OUT/sanitize_v5.log" 2>&1; tail -1 "$OUT/sanitize_v5.log"
stamp bench
B="--shapes qwen35-tp4,qwen35-tp8 --layouts row_major --tokens $T"
run() { local tag=$1; shift; env "$@" python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_$tag" $B \
  > "$OUT/bench_$tag.log" 2>&1; }
run fp8_default --formats fp8_block128
run fp8_v5 SMALLM_KERNEL_VARIANT=5 --formats fp8_block128
run mxfp4_v0 SMALLM_KERNEL_VARIANT=0 --formats mxfp4
run mxfp4_v5 SMALLM_KERNEL_VARIANT=5 --formats mxfp4
stamp peer
cd "$R"; OUT=$OUT/peer bash .peer/run.sh --tokens $T > "$OUT/peer.log" 2>&1
python3 .peer/readfloor.py > "$OUT/readfloor.log" 2>&1
stamp done
for f in fp8_default fp8_v5 mxfp4_v0 mxfp4_v5; do echo "== $f"; grep -E "kernel .* us" "$OUT/bench_$f.log" | \
  sed -E 's/ +/ /g; s/ row_major//; s/ distinct=[ 0-9.]+//; s/roofline.*//' ; done
grep -E "T= *[0-9]+ shipped +(jit|triton) +full" "$OUT/peer.log" | sed -E 's/ +/ /g' | cut -c1-60
