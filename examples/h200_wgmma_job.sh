#!/bin/bash
# One H200 job for examples/wgmma/wgmma_gateup_probe.cu (the FP8 gate/up on wgmma, weights straight into
# the A operand's registers): build it with nvcc for sm_90a (ptxas report in build.log), run it at
# TOKENS (default 1,4,8,12,16,20) once per RUNS entry MODE:PREFETCH[:DEPTH[:XPREP[:XSUB[:SHUFFLE[:RING[:TMA]]]]]]
# (default "0:0", the probe as described; its header explains PROBE_MODE, PROBE_PREFETCH, PROBE_DEPTH,
# PROBE_XPREP, PROBE_XSUB, PROBE_SHUFFLE, PROBE_TMA; RING n > 0 sets PROBE_RING=1 PROBE_STAGES=n), and with
# TIMELINE=1 the package's own kernels through the timeline harness (examples/timeline, FP8, TP4 and TP8
# at TLTOKENS, default 8,16,20), whose "gate/up job 5+ done" max is the committed gate/up's end to set
# beside the probe. PROBE_TIMEOUT: seconds per probe run (default 60; a run takes ~10).
# Example (the diagnostics prepared after run 1):
#   RUNS="0:0 1:0 2:0 3:0 0:0:2:1 0:1 0:0:3 0:1:3:1 0:0" TOKENS=1,8,16,20 TIMELINE=1
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
if [ "${TIMELINE:-0}" = 1 ]; then
  ( nvcc -std=c++17 -arch=sm_90a -O3 -DSMALLM_TIMELINE -Ihip examples/timeline/timeline.cu -o /tmp/timeline \
      > "$OUT/timeline_build.log" 2>&1 ) &
fi
nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -Xptxas -v examples/wgmma/wgmma_gateup_probe.cu -o /tmp/wgp \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 10; }
for run in ${RUNS:-0:0}; do
  IFS=: read -r mode pf depth xp xs sh rg tm <<< "$run"; depth=${depth:-2}; xp=${xp:-0}; xs=${xs:-0}; sh=${sh:-0}; rg=${rg:-0}; tm=${tm:-0}
  stamp "probe mode $mode prefetch $pf depth $depth xprep $xp xsub $xs shuffle $sh ring $rg tma $tm"
  log="$OUT/probe_m${mode}_p${pf}_d${depth}_x${xp}.log"; [ "$xs" = 1 ] && log="${log%.log}_s1.log"
  [ "$sh" = 1 ] && log="${log%.log}_w1.log"
  [ "$rg" != 0 ] && log="${log%.log}_r${rg}.log"
  [ "$tm" = 1 ] && log="${log%.log}_t1.log"
  [ -e "$log" ] && log="${log%.log}_again.log"
  PROBE_MODE=$mode PROBE_PREFETCH=$pf PROBE_DEPTH=$depth PROBE_XPREP=$xp PROBE_XSUB=$xs PROBE_SHUFFLE=$sh PROBE_RING=$([ "$rg" != 0 ] && echo 1 || echo 0) PROBE_STAGES=$rg PROBE_TMA=$tm timeout "${PROBE_TIMEOUT:-60}" /tmp/wgp "${TOKENS:-1,4,8,12,16,20}" > "$log" 2>&1
  echo "probe rc=$?" >> "$log"
done
if [ "${TIMELINE:-0}" = 1 ]; then
  wait
  stamp timeline
  for I in 256 128; do for T in $(echo "${TLTOKENS:-8,16,20}" | tr , ' '); do
    echo "== FP8 T=$T I=$I" >> "$OUT/timeline.log"
    timeout 60 /tmp/timeline 0 "$T" "$I" 20 >> "$OUT/timeline.log" 2>&1
  done; done
  grep -E "^== |event time|gate/up job 5\+ done" "$OUT/timeline.log"
fi
stamp done
for f in "$OUT"/probe_*.log; do echo "== $(basename "$f" .log)"; grep -E "^(device|fragment|ALL|SOME|probe rc)" "$f"; done
python3 examples/wgmma/summarize.py "$OUT"/probe_*.log  # per (shape, T): each setting's gate/up us (x W13 floor)
