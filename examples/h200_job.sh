#!/bin/bash
# One H200 job: build the package for sm_90a, run the GPU tests / selftest, the layer benchmark,
# compute-sanitizer, and (when .peer/ was prepared by ../shared/peer/prepare.sh) the SGLang Triton
# peer and the read floor, all in the same run. Logs go to $OUT. Usage: bash examples/h200_job.sh [stages]
# stages (comma list): build,selftest,bench,sanitize,peer,floor,sortcheck,sortsanitize,sortbench
# (default: all). sortbench times SGLang's moe_align_block_size from .peer/'s SGLang copy.
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
STAGES=${1:-build,selftest,bench,sanitize,peer,floor,sortcheck,sortsanitize,sortbench}
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
if has sortcheck; then
  stamp sortcheck
  (cd /tmp && python3 -m sglang_smallm_plugin.cli selftest --what sort ${SORTCHECK_ARGS:-}) 2>&1 | tee "$OUT/sortcheck.log" | tail -60
  (cd /tmp && python3 -m pytest -q -p no:cacheprovider "$OLDPWD/tests/test_kernel_gpu.py" -k sort) 2>&1 | tail -3 | tee -a "$OUT/sortcheck.log"
fi
if has sortsanitize; then
  stamp sortsanitize
  (cd /tmp && timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -c "
from sglang_smallm_plugin import sort_selftest as s
cases = [(513, 11, 5, 32, 'aiter', 'invalid', 0, True, 'compact'), (129, 5, 51, 32, 'aiter', 'hot4', 0, True, 'distributed'),
         (129, 5, 51, 16, 'triton', 'invalid', 0, False, 'distributed'), (513, 11, 2, 16, 'triton', 'random', 0, False, 'compact')]
for E, K, T, bs, f, r, seed, fused, path in cases:
    print(s.check_sort_case(E, K, T, bs, f, r, seed, 'cuda', fused=fused, path=path))
") 2>&1 | tail -12 | tee "$OUT/sortsanitize.log"
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
if has sortbench; then
  stamp sortbench
  if [ ! -d /tmp/sg ] && [ -d .peer ]; then  # the SGLang copy of ../shared/peer (as .peer/run.sh sets it up)
    mkdir -p /tmp/sg && tar xzf .peer/sglang.tgz -C /tmp/sg
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .peer/whl/*.whl
  fi
  (cd /tmp && PYTHONPATH=/tmp/site:/tmp/sg:$OLDPWD/.peer/stubs SGLANG_JIT_CACHE_DIR=/tmp/jitcache \
     python3 -m sglang_smallm_plugin.cli bench --sort) 2>&1 | tee "$OUT/sortbench.log" | tail -60
fi
stamp done
