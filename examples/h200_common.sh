#!/bin/bash
# Sourced by the H200 job scripts written from the seventh session on (older ones keep their own
# copy of this preamble: they are the recorded commands of their runs). Gives $OUT, $R, stamp, the
# build, and the summaries printed last. Usage inside a job: source examples/h200_common.sh; build
set -u
OUT=${OUT:-/tmp/smallm_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
R=$PWD
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

build() {  # the package for sm_90a (examples/h200_job.sh build); exits the job on failure. Skipped where this
  # machine already built the same sources (a second job in one call, or a warm machine): /tmp/smallm_built.sha
  local sha; sha=$(cd "$R" && find setup.py pyproject.toml hip sglang_smallm_plugin -type f ! -name "*.so" ! -path "*__pycache__*" ! -path "*/hip_src/*" | sort | xargs cat | sha1sum | cut -c1-40)
  if [ "$(cat /tmp/smallm_built.sha 2>/dev/null)" = "$sha" ] && (cd /tmp && python3 -c "import sglang_smallm_plugin._C") 2>/dev/null; then
    echo "build: the same sources are already built on this machine ($sha)" > "$OUT/job.log"; return 0
  fi
  bash "$R/examples/h200_job.sh" build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
  echo "$sha" > /tmp/smallm_built.sha
}

bench_formats() {  # bench_formats SUFFIX FP8_TOKENS MXFP4_TOKENS [VAR=value...]: `sglang-smallm bench`,
  # BENCH_SHAPES (default Qwen3.5 TP4/TP8) row-major, FP8 then MXFP4 (a format with no token counts not
  # at all), into $OUT/bench_<format>SUFFIX{,.log}; VAR=value for both. BENCH_FALLBACK=1 also times the
  # fallback (SGLang's FusedMoE with the kernels off; SGLang must be importable): off by default, as the
  # jobs before it ran, SGLang's peer (../shared/peer) being the H200 comparison
  local sfx=$1 ft=$2 mt=$3; shift 3
  local B="--shapes ${BENCH_SHAPES:-qwen35-tp4,qwen35-tp8} --layouts row_major"
  [ "${BENCH_FALLBACK:-0}" = 1 ] || B="$B --no-fallback"
  # --foreground: the bench stays in the job's process group, so a timeout around the whole job (the device
  # command's) stops it too; a plain inner timeout makes its own group, and "h200-s47" run 7's bench went on
  # timing into the next job after the job around it had been stopped
  [ -n "$ft" ] && timeout --foreground 240 env "$@" python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_fp8_block128$sfx" $B --tokens "$ft" \
    --formats fp8_block128 > "$OUT/bench_fp8_block128$sfx.log" 2>&1
  [ -n "$mt" ] && timeout --foreground 200 env "$@" python3 -m sglang_smallm_plugin.cli bench --out "$OUT/bench_mxfp4$sfx" $B --tokens "$mt" \
    --formats mxfp4 > "$OUT/bench_mxfp4$sfx.log" 2>&1
  return 0
}

tree_pkg() {  # tree_pkg HIPDIR TARGET LOG [JOBS]: in the background, this tree's package with HIPDIR as its
  # hip/, built for sm_90a into TARGET (pip --target; put it first on PYTHONPATH to use it), log in LOG
  local src=/tmp/src_$(basename "$2")
  ( rm -rf "$src" && mkdir -p "$src" && cp -r "$R"/pyproject.toml "$R"/setup.py "$R"/sglang_smallm_plugin "$R"/README.md "$src"/ \
    && cp -r "$1" "$src"/hip && cd "$src" && MAX_JOBS=${4:-8} SGLANG_SMALLM_BUILD=1 python3 -m pip install -q \
    --no-build-isolation --no-deps --no-index --target "$2" . > "$3" 2>&1 ) &
}

bench_pkg() {  # bench_pkg SUFFIX TARGET LOG FP8_TOKENS MXFP4_TOKENS: bench_formats with tree_pkg's TARGET
  # package, or the tail of its build LOG where it did not build
  if [ -d "$2/sglang_smallm_plugin" ]; then bench_formats "$1" "$4" "$5" PYTHONPATH="$2"; else tail -5 "$3"; fi
}

bench_summary() {  # bench_summary LOG...: one line per (shape, T): kernel us, floor, x floor
  for f in "$@"; do echo "== $(basename "$f" .log)"; grep -E "kernel .* us" "$f" | \
    sed -E 's/ +/ /g; s/ row_major//; s/ distinct=[ 0-9.]+//; s/roofline.*//; s/fp8_block128 //; s/mxfp4 //; s/MB kernel//'; done
}

memcheck_stage() {  # memcheck_stage LOG LIMIT_S: with MEMCHECK=1, compute-sanitizer memcheck over `selftest --what moe`
  # (one seed, both layouts) at MEMTOKENS (default 1,8), MEMSHAPES (default Qwen3.5 TP4 and TP8 and the
  # MiniMax-M3-like shape) and MEMFORMATS (default both)
  [ "${MEMCHECK:-0}" = 1 ] || return 0
  stamp memcheck
  timeout --foreground "$2" compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m sglang_smallm_plugin.cli \
    selftest --what moe --seeds 1 --shapes "${MEMSHAPES:-qwen35-tp4,qwen35-tp8,minimax-m3}" \
    --formats "${MEMFORMATS:-fp8_block128,mxfp4}" --tokens "${MEMTOKENS:-1,8}" > "$OUT/$1" 2>&1
  grep -E "selftest:|ERROR SUMMARY" "$OUT/$1"
}

tests_stage() {  # with TESTS=1, the GPU test file (tests/test_kernel_gpu.py) within TESTS_TIMEOUT s (default 240)
  [ "${TESTS:-0}" = 1 ] || return 0
  stamp gpu-tests
  timeout --foreground "${TESTS_TIMEOUT:-240}" python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" > "$OUT/gpu_pytest.log" 2>&1
  tail -1 "$OUT/gpu_pytest.log"
}

peer_stage() {  # peer_stage TOKENS: with PEER=1, SGLang's Triton FP8 peer (.peer/run.sh, carry ".peer") at TOKENS,
  # with PEER_ARGS (more of run.sh's options, e.g. "--inter 384 --budget-s 180") where given
  [ "${PEER:-0}" = 1 ] || return 0
  stamp peer
  # shellcheck disable=SC2086  # PEER_ARGS: one word per option
  (cd "$R" && timeout --foreground 200 env OUT=$OUT/peer bash .peer/run.sh --tokens "$1" ${PEER_ARGS:-} > "$OUT/peer.log" 2>&1)
}

peer_summary() {  # SGLang's Triton FP8 peer (.peer/run.sh), shipped config, per T
  [ -e "$OUT/peer.log" ] && grep -E "T= *[0-9]+ shipped +jit +full" "$OUT/peer.log" | sed -E 's/ +/ /g' | cut -c1-45
}

sglang_env() {  # SGLang 0.5.23's Python code into /tmp/sg and its pure-Python imports into /tmp/sgsite, from the
  # carried .peer/ (../shared/peer/prepare.sh) and .sglgpu/ (examples/sglang_gpu/prepare.sh); then SGLang
  # imports with PYTHONPATH=$SG_PATH (sgl_kernel: our import-only stub, whose moe_align_block_size is SGLang's
  # JIT build of that op, built with this machine's nvcc into SGLANG_JIT_CACHE_DIR). Log: $OUT/sglang_env.log
  [ -d "$R/.peer" ] && [ -d "$R/.sglgpu" ] || { echo "carry .peer and .sglgpu"; return 2; }
  mkdir -p /tmp/sg && tar xzf "$R/.peer/sglang.tgz" -C /tmp/sg
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sgsite \
    "$R"/.peer/whl/*.whl "$R"/.sglgpu/*.whl > "$OUT/sglang_env.log" 2>&1 || { tail -5 "$OUT/sglang_env.log"; return 12; }
  python3 -c 'import importlib.metadata as m, sys; from packaging.version import Version
sys.exit(0 if Version(m.version("typing_extensions")) >= Version("4.14.1") else 1)' || \
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sgsite \
    "$R"/.peer/whl_te/*.whl >> "$OUT/sglang_env.log" 2>&1
  export SGLANG_JIT_CACHE_DIR=${SGLANG_JIT_CACHE_DIR:-/tmp/jitcache}
  if [ -z "${CUDA_HOME:-}" ]; then  # as ../shared/peer/run.sh finds it
    local c
    for c in "$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")" /usr/local/cuda /usr/local/cuda-13.0; do
      if [ -e "$c/lib64/libcudart.so" ] && [ -x "$c/bin/nvcc" ]; then export CUDA_HOME=$c; break; fi
    done
  fi
  echo "CUDA_HOME=${CUDA_HOME:-unset}" >> "$OUT/sglang_env.log"
  return 0
}
SG_PATH=/tmp/sgsite:/tmp/sg:$R/examples/sglang_gpu/stubs

pack() {  # everything under $OUT into one file (one file comes back)
  (cd "$OUT" && tar czf /tmp/smallm_logs.tgz . && rm -rf ./* && mv /tmp/smallm_logs.tgz .)
}
