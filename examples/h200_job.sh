#!/bin/bash
# One H200 job: build the package for sm_90a, run the GPU tests / selftest, the layer benchmark,
# compute-sanitizer, and (when .peer/ was prepared by ../shared/peer/prepare.sh) the SGLang Triton
# peer and the read floor, all in the same run. Logs go to $OUT. Usage: bash examples/h200_job.sh [stages]
# stages (comma list): build,selftest,bench,sanitize,peer,floor  (default: all)
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
STAGES=${1:-build,selftest,bench,sanitize,peer,floor}
has() { [[ ",$STAGES," == *",$1,"* ]]; }
export PYTHONUNBUFFERED=1
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$OUT/device.txt"
if has build; then
  stamp build
  MAX_JOBS=8 SGLANG_SMALLM_BUILD=1 python3 -m pip install -q --no-build-isolation --no-deps --no-index . >"$OUT/build.log" 2>&1 \
    || { tail -50 "$OUT/build.log"; exit 10; }
  grep -iE "spill|warning" "$OUT/build.log" | head -20
  cd /tmp && python3 -c "import sglang_smallm_plugin.kernels as k; print(k.load_compiled())"; cd - >/dev/null
fi
if has selftest; then
  stamp selftest
  (cd /tmp && python3 -m sglang_smallm_plugin.cli selftest ${SELFTEST_ARGS:-}) 2>&1 | tee "$OUT/selftest.log"
fi
if has sanitize; then
  stamp sanitize
  (cd /tmp && timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli selftest \
      --seeds 1 --shapes qwen35-tp8 --tokens 1,8 ) 2>&1 | tail -15 | tee "$OUT/sanitize.log"
fi
if has bench; then
  stamp bench
  (cd /tmp && python3 -m sglang_smallm_plugin.cli bench --out "$OUT" ${BENCH_ARGS:-}) 2>&1 | tee "$OUT/bench.log"
fi
if has peer && [ -d .peer ]; then
  stamp peer
  OUT=$OUT/peer bash .peer/run.sh ${PEER_ARGS:-} >"$OUT/peer.log" 2>&1; tail -30 "$OUT/peer.log"
fi
if has floor && [ -d .peer ]; then
  stamp floor
  python3 .peer/readfloor.py 2>&1 | tee "$OUT/readfloor.log"
fi
stamp done
