#!/bin/bash
# One H200 job for examples/grouped/grouped_probe.cu (one-launch MoE probes, FP8 row-major, 1-4 tokens:
# A per-expert groups, B one grid-wide counter; examples/results "h200-ab16") beside the committed
# kernels: the package is built in the background while the probe compiles (against hip/) and runs,
# then `sglang-smallm bench` FP8 at the same token counts (same job, same machine). GTOKENS: the probe's
# counts (default 1,2,3,4); BTOKENS: the bench's (default the same); the probe's own switches
# (PROBE_KERNEL, PROBE_MODE, PROBE_LOADER: its header) pass through the environment. BENCH=0 skips the bench.
source examples/h200_common.sh
GT=${GTOKENS:-1,2,3,4}; BT=${BTOKENS:-$GT}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$OUT/device.txt"
stamp build-bg
( bash "$R/examples/h200_job.sh" build > "$OUT/job.log" 2>&1; echo "rc=$?" >> "$OUT/job.log" ) &
bpid=$!
stamp probe
nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I"$R/hip" -Xptxas -v "$R/examples/grouped/grouped_probe.cu" -o /tmp/gp \
  > "$OUT/probe_build.log" 2>&1 || { tail -20 "$OUT/probe_build.log"; }
grep -A2 -E "grouped_kernel|onelaunch_kernel" "$OUT/probe_build.log" | grep -E "registers|spill" | head -4
timeout 120 /tmp/gp "$GT" > "$OUT/probe.log" 2>&1; echo "probe rc=$?" >> "$OUT/probe.log"
wait $bpid
stamp bench
tail -1 "$OUT/job.log"
if [ "${BENCH:-1}" = 1 ]; then
  (cd /tmp && timeout 150 python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_fp8" --shapes qwen35-tp4,qwen35-tp8 \
    --layouts row_major --tokens "$BT" --formats fp8_block128 > "$OUT/bench_fp8.log" 2>&1)
fi
stamp done
cat "$OUT/probe.log"
[ -e "$OUT/bench_fp8.log" ] && bench_summary "$OUT/bench_fp8.log"
pack
