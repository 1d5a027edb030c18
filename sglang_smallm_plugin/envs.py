"""Environment switches, read at call time (so tests and A/B runs can flip them), each with the values it
takes: a value outside them is refused by `check()` (the runner at startup, the CLI's GPU commands) and
shown by `doctor`, never read as something else (the launcher reads the A/B switches by their first
character or leading digits, so SMALLM_MMA=false would have meant on there and off here)."""

import os
from dataclasses import dataclass
from typing import Optional

BOOL = ("0", "1", "true", "false", "yes", "no", "on", "off")  # read here, in Python
ZERO_ONE = ("0", "1")  # read by the kernel launcher: off where the value starts with 0
COUNT = "a whole number >= 0"  # read by the kernel launcher with atoi
CAPS_PATH = "a caps file"  # a path to a file `sglang-smallm bench --write-caps` wrote (measured_caps.py checks it)


@dataclass(frozen=True)
class Switch:
    name: str
    default: str
    meaning: str
    # the values it takes, case and surrounding blanks aside (None: any text; COUNT: a whole number >= 0);
    # "" among them where setting it empty means the default
    accepts: Optional[object] = None

    def get(self) -> str:
        return os.environ.get(self.name, self.default)

    def enabled(self) -> bool:
        return self.get().strip().lower() not in ("0", "false", "no", "off", "")

    def problem(self) -> str:
        """'' where the switch is unset or set to a value it takes, else what is wrong and the fix."""
        raw = os.environ.get(self.name)
        if raw is None or self.accepts is None:
            return ""
        v = raw.strip().lower()
        if self.accepts == CAPS_PATH:
            from . import measured_caps  # the package's module: envs is read alone only by setup.py, for BUILD

            return measured_caps.file_problem(raw.strip()) if raw.strip() else ""
        if self.accepts == COUNT:
            if v == "" or v.isdigit():
                return ""
            takes = COUNT
        else:
            if v in self.accepts:
                return ""
            takes = ", ".join(repr(a) for a in self.accepts)
        unset = f"unset it for its default ({self.default!r})" if self.default else "unset it"
        return f"{self.name}={raw!r} is not a value it takes ({takes}). Fix: set one of those, or {unset}"


KERNELS = Switch("SGLANG_ROCM_SMALLM_MOE", "1",
                 "0 sends every MoE call and sort to the fallback SGLang would use without the plugin", accepts=BOOL)
TRACE = Switch("SGLANG_SMALLM_TRACE", "0", "1 logs every pluggy hook call of the plugin manager", accepts=BOOL)
REFERENCE = Switch("SGLANG_SMALLM_REFERENCE", "0",
                   "1 lets the pure-torch reference provider serve GPU tensors (debugging only: slow)", accepts=BOOL)
BUILD = Switch("SGLANG_SMALLM_BUILD", "auto",
               "install-time kernel build: auto (build when torch has CUDA/ROCm), 1 (must build), 0 (skip)",
               accepts=("auto", "1", "0", "false", "no", "off"))
ARCH = Switch("SGLANG_SMALLM_ARCH", "", "override the build target (e.g. gfx950, gfx942, sm_90a)")
LOG_ALL_RANKS = Switch("SGLANG_SMALLM_LOG_ALL_RANKS", "0", "1 logs path decisions on every rank, not only rank 0",
                       accepts=BOOL)
MAX_TOKENS = Switch("SGLANG_SMALLM_MAX_TOKENS", "",
                    "N lowers every token cap to N: the kernel takes calls of at most N tokens (0: none), the rest "
                    "the fallback; it never raises a cap. The caps were measured against the Triton configurations "
                    "SGLang ships; with a tuned configuration of your own for the fallback set it lower (on the H200 "
                    "the kernel was faster than a tuned one up to 19 tokens at Qwen3.5 TP4, 24 at TP8, 8 at I=384)",
                    accepts=COUNT)
CAPS_FILE = Switch("SGLANG_SMALLM_CAPS_FILE", "",
                   "a file of token caps measured on this machine (`sglang-smallm bench --write-caps FILE`): for each "
                   "shape it lists, its cap replaces the built-in one (raised or lowered); other shapes keep theirs. A "
                   "file that cannot be read, or one measured on another arch, fails the startup", accepts=CAPS_PATH)

KERNEL_VARIANT = Switch("SMALLM_KERNEL_VARIANT", "",
                        "A/B switch (read once by the kernel launcher; kernels.VARIANTS lists them; doctor and selftest "
                        "print which one runs): unset = CUDA 5 (two streaming kernels) where it fits, else the block "
                        "kernel; gfx950 0. 1 forces the one-launch block kernel on CUDA, 5 the two streaming kernels on "
                        "gfx950 (not its default there: unmeasured on AMD)", accepts=("", "0", "1", "5"))
MMA = Switch("SMALLM_MMA", "1",
             "A/B switch (CUDA, variant 5): 0 computes FP8 and MXFP4 gate/up and down on CUDA cores, not tensor cores",
             accepts=ZERO_ONE)
MMA_DOWN = Switch("SMALLM_MMA_DOWN", "1",
                  "A/B switch (CUDA, variant 5): 0 computes the down projection on CUDA cores while gate/up stays on tensor cores",
                  accepts=ZERO_ONE)
PDL = Switch("SMALLM_PDL", "1",
             "A/B switch (CUDA, variant 5): 0 launches the down kernel without programmatic dependent launch",
             accepts=ZERO_ONE)
GATEUP_PDL = Switch("SMALLM_GATEUP_PDL", "1",
                    "A/B switch (CUDA, tensor-core gate/up): 0 launches the gate/up kernel stream-ordered instead of "
                    "as a programmatic dependent of the kernel before it", accepts=ZERO_ONE)
X_PREFETCH = Switch("SMALLM_X_PREFETCH", "1",
                    "experiment (kernel launcher): 0 turns off copying the next item's activations early",
                    accepts=ZERO_ONE)

GATEUP_TEAMS = Switch("SMALLM_GATEUP_TEAMS", "",
                      "A/B switch (CUDA, tensor-core gate/up): 1 or 2 teams of 256 threads per block; unset: 2 "
                      "for FP8 row-major with kJ = 8 (2048 < D <= 4096) from 2 tokens (kFp8TeamsMinTokens), "
                      "and when two one-team blocks would pass the 196 KB shared-memory carveout, else 1",
                      accepts=("", "1", "2"))
DOWN_TEAMS = Switch("SMALLM_DOWN_TEAMS", "",
                    "A/B switch (CUDA, tensor-core down): 1 or 2 teams of 256 threads per block; unset: 2 "
                    "from 22 token-slot pairs where I <= 256 (kDownTeamsNarrowMinPairs); where I is wider, from 2 tokens "
                    "and 10 pairs (kDownTeamsWideMinPairs), but from 33 (kDownTeamsMinPairs) where a one-team grid "
                    "gives each block one row-block (SMs < D/16 <= 2 SMs: D = 4096 on the H200) unless FP8 jobs are split "
                    "along I (I > 256); where D/16 <= SMs (D <= 2048 on the H200) and I >= 256, from 10 pairs "
                    "(kDownTeamsFewBlocksMinInter); else 1", accepts=("", "1", "2"))
GATEUP_PER_SM = Switch("SMALLM_GATEUP_PER_SM", "",
                       "A/B switch (CUDA, tensor-core gate/up): at most n blocks a SM in its grid (with "
                       "SMALLM_GATEUP_TEAMS=1, SMALLM_DOWN_TEAMS=1 and SMALLM_DOWN_PER_SM=1 the down's blocks run beside it: "
                       "slower in every cell measured, examples/results \"h200-s38\" run 2); unset or 0: as many as "
                       "are resident", accepts=COUNT)
DOWN_PER_SM = Switch("SMALLM_DOWN_PER_SM", "",
                     "A/B switch (CUDA, tensor-core down): at most n blocks a SM in its grid, more only where a "
                     "block's y would not fit its shared memory; unset or 0: as many as are resident", accepts=COUNT)
DOWN_LO8 = Switch("SMALLM_DOWN_LO8", "",
                  "A/B switch (CUDA, tensor-core down): 0 stages h's lo half as f16 (4 bytes a value with hi; where that "
                  "does not fit, the down runs on CUDA cores), 1 as e5m2 (3 bytes); unset: f16 where it fits and (FP8) "
                  "its block stays within the 196 KB shared-memory carveout, else e5m2", accepts=("", "0", "1"))
DOWN_RING = Switch("SMALLM_DOWN_RING", "",
                   "A/B switch (CUDA, tensor-core down): 2 keeps two jobs' weights in flight per warp also where I "
                   "takes at most two chunks (MXFP4 then also scales in f16 relative to the largest of 128 values instead "
                   "of per block in fp32); unset: three there (MXFP4 to I=256, FP8 to 128), else two (FP8 over I=256: "
                   "jobs split along I in parts of four chunks, where the switch does not apply)", accepts=("", "2"))
MMA_SPLIT = Switch("SMALLM_MMA_SPLIT", "1",
                   "A/B switch (CUDA, variant 5): 0 runs calls whose x is over the tensor-core gate/up's f16 stage "
                   "(over 20 tokens at D=4096), or whose token-slot pairs are over the 320 of the tensor-core "
                   "kernels' routing, on CUDA cores instead of as several tensor-core calls of fewer tokens",
                   accepts=ZERO_ONE)
MMA_SPLIT_TOKENS = Switch("SMALLM_MMA_SPLIT_TOKENS", "",
                          "A/B switch (CUDA, variant 5): N > 0 runs calls of more than N tokens as tensor-core calls of at "
                          "most N (near-equal parts), also where one call would fit; unset: split only where x or the pairs "
                          "do not fit (SMALLM_MMA_SPLIT). At 10 it was slower at 19 tokens and at TP8 and for MXFP4, "
                          "1-1.7 % faster only at FP8 TP4 20 (\"h200-ab15\" run 1, \"h200-s36\" run 1)", accepts=COUNT)
MMA_SPLIT_DOWN = Switch("SMALLM_MMA_SPLIT_DOWN", "1",
                        "A/B switch (CUDA, variant 5): 0 runs a tensor-core call whose down's staged h and y would not fit "
                        "a block (D=2048, I=256, top-10 from 26 tokens on the H200) with that down on CUDA cores, instead "
                        "of as calls of fewer tokens whose down does (26-27 % slower at 26-32 tokens, \"h200-s46\" run 1; 21-79 "
                        "% slower in every cell of run 2 it changes). Inside the H200's FP8 caps only calls with 16 slots "
                        "take the split (e.g. D=4096, I=256 at 15-20 tokens); MXFP4 calls (kernel-only on CUDA) from as "
                        "few as 8 tokens, by shape", accepts=ZERO_ONE)
GATEUP_TMA = Switch("SMALLM_GATEUP_TMA", "0",
                    "experiment (CUDA sm_90a, FP8 row-major, tensor-core calls): 1 runs the gate/up as TMA tiles of W13 "
                    "on wgmma (hip/smallm_gateup_tma.h: up to 20 tokens and 320 token-slot pairs, D a multiple of 512), "
                    "its FP8 sums promoted to fp32 per 128-wide K block, then a kernel summing its K slices into h (unpadded "
                    "layers only: a layer SGLang padded for AITER runs the mma.sync kernels); 2 the "
                    "same promoting per 32-k step; 3 the whole MoE in one kernel (gate/up as 2, then each expert's down "
                    "as soon as its h is whole; up to 10 tokens and I=256, else as 2); 0 the mma.sync gate/up (the "
                    "default). Not for serving: 2 was 0-23 % slower end to end, 3 1.8-2.9x slower, 1 over the 1e-3 "
                    "tolerance in the wide_scales edge case (examples/results \"h200-tma\")",
                    accepts=("0", "1", "2", "3"))
# The gfx950 build emulated on a CPU (`selftest --emulate`, sglang_smallm_plugin/emulated.py, hip/smallm_emu.h).
EMULATE = Switch("SGLANG_SMALLM_EMULATE", "0",
                 "development only: 1 registers the gfx950 build emulated on this CPU as a kernel provider, so that "
                 "SGLang's layer on CPU tensors runs the calls gfx950's gate admits through the kernels' gfx950 code "
                 "(very slow; never on a GPU)", accepts=BOOL)
EMU_CUS = Switch("SMALLM_EMU_CUS", "4",
                 "the emulated gfx950's compute units (2 resident blocks each, the rest dispatched as blocks end), "
                 "which size the kernels' grids there (`selftest --emulate`); the outputs do not depend on it",
                 accepts=COUNT)
EMU_ORDER = Switch("SMALLM_EMU_ORDER", "forward",
                   "the order in which the emulation resumes a block's threads between barriers and dispatches blocks: "
                   "`reverse` runs the last wave and lane first and dispatches the last block first (outputs must not "
                   "change; a missing barrier between waves, or a block waiting on a later one, would show)",
                   accepts=("", "forward", "reverse"))
EMU_TIMEOUT_S = Switch("SMALLM_EMU_TIMEOUT_S", "600",
                       "seconds an emulated launch may run before it is failed (a lane spinning for good)", accepts=COUNT)
EMU_CXX = Switch("SMALLM_EMU_CXX", "", "the host clang++ (>= 16) that builds the emulation; default: the first "
                 "clang++ on PATH")
EMU_BUILD_DIR = Switch("SMALLM_EMU_BUILD_DIR", "", "where the emulation is built (one folder per source tree, the 8 last used kept); "
                       "default ~/.cache/sglang-smallm/emu")
EMU_FAULT = Switch("SMALLM_EMU_FAULT", "0",
                   "tests only: 1-4 build the emulation with a deliberate fault that the checks must catch (a wrong "
                   "lane in ds_bpermute, swapped fp4 nibbles, 32-lane waves, barriers that do not wait)",
                   accepts=("", "0", "1", "2", "3", "4"))
ALL = (KERNELS, TRACE, REFERENCE, BUILD, ARCH, LOG_ALL_RANKS, MAX_TOKENS, CAPS_FILE, KERNEL_VARIANT, MMA, MMA_DOWN, PDL, GATEUP_PDL, X_PREFETCH,
       GATEUP_TEAMS, DOWN_TEAMS, GATEUP_PER_SM, DOWN_PER_SM, DOWN_LO8, DOWN_RING, MMA_SPLIT, MMA_SPLIT_TOKENS,
       MMA_SPLIT_DOWN, GATEUP_TMA, EMULATE, EMU_CUS, EMU_ORDER, EMU_TIMEOUT_S, EMU_CXX, EMU_BUILD_DIR, EMU_FAULT)


def takes_text(sw: Switch) -> str:
    """The values a switch takes, for the README's table."""
    if sw.accepts is None:
        return "any"
    if sw.accepts == COUNT:
        return "0, 1, 2, ..."
    if sw.accepts == CAPS_PATH:
        return "a file path"
    return ", ".join(f"`{a}`" if a else "empty" for a in sw.accepts)


def problems(switches=ALL) -> list:
    """Each set switch's problem (Switch.problem), in the order of `switches`."""
    return [p for p in (sw.problem() for sw in switches) if p]


def check(switches=ALL) -> None:
    """Raise ValueError naming every switch set to a value it does not take (with the fix)."""
    found = problems(switches)
    if found:
        raise ValueError("sglang-smallm: " + " ".join(found))


def markdown_table(switches=ALL) -> str:
    """The README's table of switches (between its `switches` markers; tests/test_readme.py keeps them equal)."""
    rows = ["| variable | default | takes | what it does |", "|---|---|---|---|"]
    for sw in switches:
        default = f"`{sw.default}`" if sw.default else "unset"
        rows.append(f"| `{sw.name}` | {default} | {takes_text(sw)} | {sw.meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m sglang_smallm_plugin.envs prints the README's table
    print(markdown_table())
