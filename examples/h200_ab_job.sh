#!/bin/bash
# One H200 job comparing the kernels of this tree with a baseline tree, side by side on one machine:
# the timeline harness (examples/timeline) built from both, run in turn (base, new, base, new) on
# the same cases; then the package built from this tree and its selftest. The baseline is a copy of
# hip/ and examples/timeline/ from an earlier commit, made here beforehand and carried:
#   mkdir -p .ab/base && git archive <commit> hip examples/timeline | tar -x -C .ab/base && git rev-parse <commit> > .ab/base/COMMIT
# and the device call takes carry [".ab"] (with ".peer" for PEER=1). Make it here, not in the device
# command: there `git archive HEAD` read a repository whose HEAD was the session's first commit, not the
# checkout's ("h200-ab13" run 4). The job prints .ab/base/COMMIT where it exists.
# Switches: CASES ("FMT T I" items, ';'-separated), ITERS, NEW_ENVS (';'-separated environment
# settings, e.g. "SMALLM_BULK_H=0" or "A=1 B=1": each one more column, this tree run with it), SELFTEST=1 (moe at
# SEEDS seeds and TOKENS (SELFTEST_TOKENS where set; empty: 1, 3, 8 and each cap), at SELFTEST_SHAPES and
# SELFTEST_FORMATS where set, and edge), TESTS=1 (the GPU test file, within TESTS_TIMEOUT s), MEMCHECK=1
# (compute-sanitizer on selftest at MEMTOKENS, default 1,8),
# BENCH=1 (`sglang-smallm bench` at TOKENS: FP8 and MXFP4 (at MXTOKENS, default TOKENS), BENCH_SHAPES (default Qwen3.5 TP4/TP8) row-major; BENCH_AB=1 also
# builds the package from the baseline's hip/ into /tmp/basepkg and benches it beside this tree's,
# and this tree with each of NEW_ENVS), PEER=1 (.peer/run.sh at TOKENS), LOADPATTERN=1
# (examples/loadpattern: the gate/up's weight loads alone, by access pattern), CONVBENCH=1
# (examples/convbench: e4m3 -> f16 conversions per clock, hardware vs integer decode), VARIANTS (names of
# more trees, each .ab/NAME/hip made like the baseline: each one more timeline column, e.g. the
# baseline plus one change of this tree, to see each change alone), BENCH_VARIANTS (names of such
# trees whose package is built and benched beside this tree's under BENCH=1), BENCH_ROUNDS=2 (every
# bench twice, in the same order).
source examples/h200_common.sh
BASE=${AB_BASE:-$R/.ab/base}
CASES=${CASES:-0 1 256;0 4 256;0 8 256;1 1 256;1 8 256;0 1 128;0 8 128;0 10 128}
T=${TOKENS:-1,3,4,8,10}
MT=${MXTOKENS-$T}  # the bench's MXFP4 token counts (MXTOKENS= : none)
[ -d "$BASE/hip" ] || { echo "no baseline at $BASE (see the header)"; exit 2; }
echo "baseline: $(cat "$BASE/COMMIT" 2>/dev/null || echo "unrecorded (no $BASE/COMMIT)")" | tee "$OUT/baseline.txt"
TLB="nvcc -std=c++17 -arch=sm_90a -O3 -DSMALLM_TIMELINE"
( $TLB -I"$BASE/hip" "$BASE/examples/timeline/timeline.cu" -o /tmp/timeline_base > "$OUT/timeline_base_build.log" 2>&1 ) &
( $TLB -Ihip examples/timeline/timeline.cu -o /tmp/timeline_new > "$OUT/timeline_new_build.log" 2>&1 ) &
read -ra variants <<< "${VARIANTS:-}"
for v in "${variants[@]}"; do
  [ -d "$R/.ab/$v/hip" ] || { echo "no variant tree at $R/.ab/$v"; exit 2; }
  ( $TLB -I"$R/.ab/$v/hip" examples/timeline/timeline.cu -o /tmp/timeline_$v > "$OUT/timeline_${v}_build.log" 2>&1 ) &
done
for v in ${BENCH_VARIANTS:-}; do  # a package per variant tree (its hip/ in this tree), benched like the baseline
  tree_pkg "$R/.ab/$v/hip" /tmp/pkg_$v "$OUT/${v}_build.log" 4
done
# the baseline package: this tree with the baseline's hip/
[ "${BENCH_AB:-0}" = 1 ] && tree_pkg "$BASE/hip" /tmp/basepkg "$OUT/base_build.log"
[ "${LOADPATTERN:-0}" = 1 ] && ( nvcc -std=c++17 -arch=sm_90a -O3 examples/loadpattern/loadpattern.cu -o /tmp/loadpattern > "$OUT/loadpattern_build.log" 2>&1 ) &
[ "${CONVBENCH:-0}" = 1 ] && ( nvcc -std=c++17 -arch=sm_90a -O3 examples/convbench/convbench.cu -o /tmp/convbench > "$OUT/convbench_build.log" 2>&1 ) &
build
wait
if [ "${LOADPATTERN:-0}" = 1 ]; then
  stamp loadpattern
  timeout 240 /tmp/loadpattern 200 > "$OUT/loadpattern.log" 2>&1
fi
if [ "${CONVBENCH:-0}" = 1 ]; then
  stamp convbench
  timeout 60 /tmp/convbench > "$OUT/convbench.log" 2>&1
fi
[ -x /tmp/timeline_base ] && [ -x /tmp/timeline_new ] || { tail -20 "$OUT"/timeline_*_build.log; pack; exit 12; }
stamp timeline
IFS=';' read -ra cs <<< "$CASES"
IFS=';' read -ra envs <<< "${NEW_ENVS:-}"
for c in "${cs[@]}"; do
  for round in 1 2; do
    for which in base new "${variants[@]}"; do
      [ -x /tmp/timeline_$which ] || continue
      echo "## $which round $round: $c"; timeout 60 /tmp/timeline_$which $c "${ITERS:-60}" 2>&1
    done
    for ev in "${envs[@]}"; do
      # one setting may name several variables ("A=1 B=1"): env gets them as words, labels use commas
      echo "## new[${ev// /,}] round $round: $c"; timeout 60 env $ev /tmp/timeline_new $c "${ITERS:-60}" 2>&1
    done
  done
done > "$OUT/timeline_ab.log"
cd /tmp
if [ "${SELFTEST:-1}" = 1 ]; then
  stamp selftest
  ST=${SELFTEST_TOKENS-$T}  # SELFTEST_TOKENS= (empty): selftest's own counts, 1, 3, 8 and each shape's cap
  timeout 240 python3 -m sglang_smallm_plugin.cli selftest --what moe --seeds "${SEEDS:-2}" ${ST:+--tokens "$ST"} \
    ${SELFTEST_SHAPES:+--shapes "$SELFTEST_SHAPES"} ${SELFTEST_FORMATS:+--formats "$SELFTEST_FORMATS"} \
    > "$OUT/selftest_moe.log" 2>&1
  tail -1 "$OUT/selftest_moe.log"; grep -E " (FAIL|fail)" "$OUT/selftest_moe.log" | head -5
  timeout 60 python3 -m sglang_smallm_plugin.cli selftest --what edge > "$OUT/selftest_edge.log" 2>&1; tail -1 "$OUT/selftest_edge.log"
fi
tests_stage
memcheck_stage sanitize.log 150
if [ "${BENCH:-0}" = 1 ]; then
  stamp bench
  bench_formats _new "$T" "$MT"
  if [ "${BENCH_AB:-0}" = 1 ]; then  # the baseline package through PYTHONPATH, ahead of the installed one
    bench_pkg _base /tmp/basepkg "$OUT/base_build.log" "$T" "$MT"
    for ev in "${envs[@]}"; do bench_formats "_new_${ev// /,}" "$T" "$MT" $ev; done  # $ev unquoted: one word per variable
  fi
  for v in ${BENCH_VARIANTS:-}; do bench_pkg "_$v" /tmp/pkg_$v "$OUT/${v}_build.log" "$T" "$MT"; done
  if [ "${BENCH_ROUNDS:-1}" = 2 ]; then  # the same again, in the same order (the spread between rounds)
    bench_formats _new_r2 "$T" "$MT"
    [ -d /tmp/basepkg/sglang_smallm_plugin ] && bench_formats _base_r2 "$T" "$MT" PYTHONPATH=/tmp/basepkg
    for v in ${BENCH_VARIANTS:-}; do [ -d /tmp/pkg_$v/sglang_smallm_plugin ] && bench_formats "_${v}_r2" "$T" "$MT" PYTHONPATH=/tmp/pkg_$v; done
  fi
fi
peer_stage "$T"
stamp done
# per case: event time per call (us, median incl. launch) of base and new, each round
python3 - "$OUT/timeline_ab.log" <<'EOF'
import re, sys, collections
t = collections.defaultdict(list); case = None
for line in open(sys.argv[1]):
    m = re.match(r"## (.+?) round \d+: (.*)", line)
    if m: case = (m.group(2), m.group(1)); continue
    m = re.search(r"event time per call ([0-9.]+) us", line)
    if m and case: t[case].append(float(m.group(1)))
names = list(dict.fromkeys(k[1] for k in t))
print("us per call (min of rounds; median of iterations incl. launch), and / base")
print(f"{'case (fmt T I)':16s}" + "".join(f"{n[:22]:>24s}" for n in names))
for c in dict.fromkeys(k[0] for k in t):
    b = min(t[(c, "base")]) if t[(c, "base")] else float("nan")
    row = "".join(f"{min(t[(c, n)]):12.1f} ({min(t[(c, n)]) / b:5.3f})   " if t[(c, n)] else f"{'-':>24s}" for n in names)
    print(f"{c:16s}{row}")
EOF
[ -e "$OUT/loadpattern.log" ] && cat "$OUT/loadpattern.log"
[ -e "$OUT/convbench.log" ] && cat "$OUT/convbench.log"
ls "$OUT"/bench_*.log > /dev/null 2>&1 && bench_summary "$OUT"/bench_*.log
peer_summary
pack
