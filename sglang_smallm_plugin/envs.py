"""Environment switches, read at call time (so tests and A/B runs can flip them)."""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Switch:
    name: str
    default: str
    meaning: str

    def get(self) -> str:
        return os.environ.get(self.name, self.default)

    def enabled(self) -> bool:
        return self.get().strip().lower() not in ("0", "false", "no", "off", "")


KERNELS = Switch("SGLANG_ROCM_SMALLM_MOE", "1",
                 "0 sends every MoE call and sort to the fallback SGLang would use without the plugin")
TRACE = Switch("SGLANG_SMALLM_TRACE", "0", "1 logs every pluggy hook call of the plugin manager")
REFERENCE = Switch("SGLANG_SMALLM_REFERENCE", "0",
                   "1 lets the pure-torch reference provider serve GPU tensors (debugging only: slow)")
BUILD = Switch("SGLANG_SMALLM_BUILD", "auto",
               "install-time kernel build: auto (build when torch has CUDA/ROCm), 1 (must build), 0 (skip)")
ARCH = Switch("SGLANG_SMALLM_ARCH", "", "override the build target (e.g. gfx950, gfx942, sm_90a)")
LOG_ALL_RANKS = Switch("SGLANG_SMALLM_LOG_ALL_RANKS", "0", "1 logs path decisions on every rank, not only rank 0")

KERNEL_VARIANT = Switch("SMALLM_KERNEL_VARIANT", "",
                        "experiment (read once by the kernel launcher): unset = CUDA FP8 1, else 0; "
                        "0 pipelined, 1 no pipelining 3 blocks/SM, 2 4 blocks/SM (CUDA only), "
                        "3 warp-sized items (FP8 with I <= 512 on sm_90, every format on gfx950; "
                        "other calls run the default), 4 variant 1 with phase 1 on tensor cores (FP8, CUDA); "
                        "3 and 4 measured no faster on H200")
TICKET_BATCH = Switch("SMALLM_TICKET_BATCH", "", "experiment (variant 3): items claimed per ticket, default 1")
X_PREFETCH = Switch("SMALLM_X_PREFETCH", "1",
                    "experiment (kernel launcher): 0 turns off copying the next item's activations early")

ALL = (KERNELS, TRACE, REFERENCE, BUILD, ARCH, LOG_ALL_RANKS, KERNEL_VARIANT, X_PREFETCH, TICKET_BATCH)
