#!/bin/bash
# Stall reasons, instruction count and DRAM bytes of the MoE op's kernels at T tokens (ncu metrics,
# one launch of each kernel after two warm-up calls). Usage: bash examples/ncu_stalls.sh T [shape [format]]
T=${1:-1}; SHAPE=${2:-qwen35-tp4}; FMT=${3:-fp8_block128}
S=smsp__average_warps_issue_stalled
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum
M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in long_scoreboard barrier short_scoreboard wait math_pipe_throttle lg_throttle mio_throttle not_selected \
         selected no_instruction membar dispatch_stall tex_throttle drain sleeping branch_resolving; do
  M=$M,${S}_${r}_per_issue_active.ratio
done
ncu --clock-control none --kernel-name regex:smallm --launch-skip 4 --launch-count 4 --metrics "$M" \
  python3 "$(dirname "$0")/profile_one.py" "$T" "$SHAPE" "$FMT" 2>&1 | grep -E "smallm_|gpu__|dram__|sm__|smsp__" \
  | sed -E 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//; s/ +/ /g'
