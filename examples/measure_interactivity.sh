#!/bin/bash
# Interactivity (output tokens/s per user) at concurrency 1 and 4 against a running server.
# Usage: bash examples/measure_interactivity.sh [port]   -- run once with kernels on, once off.
set -euo pipefail
PORT=${1:-30000}
for C in 1 4; do
  python -m sglang.benchmark.serving --backend sglang --port "$PORT" --dataset-name random \
    --random-input-len 1024 --random-output-len 512 --random-range-ratio 1.0 \
    --num-prompts $(( C * 8 )) --max-concurrency "$C" --output-file "interactivity_c${C}.jsonl"
  echo "concurrency $C: see 'Output token throughput' / concurrency and 'Median TPOT' above (tokens/s/user = 1000 / TPOT ms)"
done
