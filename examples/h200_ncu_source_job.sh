#!/bin/bash
# One H200 job: where the MoE op's kernels stall, summed (examples/ncu_stalls.sh) and per SASS
# instruction (ncu SourceCounters exported as CSV). Usage: bash examples/h200_ncu_source_job.sh
# Switches: CASES ("T shape format" items, ';'-separated) for the stall summaries, SRC ("T shape format
# kernel-regex" items, ';'-separated) for the per-instruction reports.
source examples/h200_common.sh
build
CASES=${CASES:-8 qwen35-tp4 mxfp4;8 qwen35-tp4 fp8_block128;1 qwen35-tp4 mxfp4}
SRC=${SRC:-8 qwen35-tp4 mxfp4 gateup_mma;8 qwen35-tp4 mxfp4 down_mma}
IFS=';' read -ra cs <<< "$CASES"
for c in "${cs[@]}"; do
  read -r t s f <<< "$c"; stamp "stalls $c"
  timeout 120 bash examples/ncu_stalls.sh "$t" "$s" "$f" > "$OUT/stalls_${f}_${s}_T$t.txt" 2>&1
done
IFS=';' read -ra ss <<< "$SRC"
for c in "${ss[@]}"; do
  read -r t s f k <<< "$c"; stamp "source $c"; n="src_${f}_${s}_T${t}_$k"
  timeout 150 ncu --clock-control none --kernel-name "regex:$k" --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --section LaunchStats \
    --import-source no -o "$OUT/$n" python3 examples/profile_one.py "$t" "$s" "$f" > "$OUT/$n.log" 2>&1
  ncu -i "$OUT/$n.ncu-rep" --page source --print-source sass --csv > "$OUT/$n.sass.csv" 2>> "$OUT/$n.log"
  ncu -i "$OUT/$n.ncu-rep" --page details > "$OUT/$n.details.txt" 2>> "$OUT/$n.log"
  gzip -f "$OUT/$n.sass.csv"
done
stamp done
for f in "$OUT"/stalls_*.txt; do echo "== $(basename "$f")"; grep -E "smallm_|gpu__time|issue_active|long_score|barrier|short_score|wait |math_pipe|lg_throttle|mio_throttle|no_instruction|not_selected" "$f" | head -40; done
pack
