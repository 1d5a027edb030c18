#!/bin/bash
# One short H200 job: build, then the GPU test of the down forced to its two-job ring (SMALLM_DOWN_RING=2).
source examples/h200_common.sh
build
cd /tmp && timeout 150 python3 -m pytest -q -p no:cacheprovider "$R/tests/test_kernel_gpu.py" -k "DOWN_RING" > "$OUT/gpu_pytest_ring.log" 2>&1; tail -3 "$OUT/gpu_pytest_ring.log"
pack
