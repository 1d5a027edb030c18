#!/bin/bash
# H200 job: build the timeline harness (examples/timeline/timeline.cu) and print where the time of
# one call goes, for the fused launch (SMALLM_FUSED=1) and the two launches, FP8 and MXFP4.
# Usage: bash examples/timeline/run.sh ["FMT T I" ...]  (default: the Qwen3.5 cases below)
source examples/h200_common.sh
stamp build
nvcc -std=c++17 -arch=sm_90a -O3 -DSMALLM_TIMELINE -Ihip examples/timeline/timeline.cu -o /tmp/timeline > "$OUT/build.log" 2>&1 \
  || { tail -20 "$OUT/build.log"; exit 10; }
stamp run
CASES=("$@"); [ ${#CASES[@]} = 0 ] && CASES=("0 1 256" "0 8 256" "1 1 256" "0 1 128")
for c in "${CASES[@]}"; do
  for fused in 1 0; do
    echo "## SMALLM_FUSED=$fused timeline $c"
    SMALLM_FUSED=$fused timeout 60 /tmp/timeline $c 30 2>&1
  done
done | tee "$OUT/timeline.log"
stamp done
pack
