#!/bin/bash
# One H200 job for the split of calls whose x is over the tensor-core gate/up's f16 stage (over 20
# tokens at D = 4096): build; the selftest at its default token counts and caps (MXFP4's H200 cap, 48,
# now runs as three tensor-core calls) and the edge cases; `sglang-smallm bench` at SPLITTOKENS with the
# split and with SMALLM_MMA_SPLIT=0 (the CUDA-core kernels it replaces), FP8 and MXFP4, in one job; the
# GPU tests of the split; compute-sanitizer memcheck on the split at MEMTOKENS; PEER=1 SGLang's Triton
# FP8 peer (.peer/run.sh, carry ".peer") at SPLITTOKENS, for the FP8 caps above 20 tokens. Stages in
# that order, so that a job cut short keeps the first ones.
source examples/h200_common.sh
ST=${SPLITTOKENS:-21,32,48}
build
cd /tmp
stamp selftest
timeout 150 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds "${SEEDS:-5}" > "$OUT/selftest_default.log" 2>&1
tail -1 "$OUT/selftest_default.log"; grep -E " (FAIL|fail)" "$OUT/selftest_default.log" | head -5
timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge.log" 2>&1; tail -1 "$OUT/selftest_edge.log"
stamp bench
bench_formats _split "$ST" "$ST"
bench_formats _cudacores "$ST" "$ST" SMALLM_MMA_SPLIT=0
stamp gpu-tests
timeout 120 python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" -k "SMALLM_MMA_SPLIT" > "$OUT/gpu_pytest.log" 2>&1
tail -1 "$OUT/gpu_pytest.log"
stamp memcheck
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
  selftest --what moe --seeds 1 --shapes qwen35-tp4,qwen35-tp8 --tokens "${MEMTOKENS:-41}" > "$OUT/sanitize.log" 2>&1
grep -E "selftest:|ERROR SUMMARY" "$OUT/sanitize.log"
peer_stage "$ST"
stamp done
bench_summary "$OUT"/bench_*.log
peer_summary
pack
