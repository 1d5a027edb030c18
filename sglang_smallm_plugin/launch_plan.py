"""What the kernel launcher (hip/smallm_moe.hip) runs for a call, mirrored in Python for logs, `doctor` and
`bench` (it never picks a kernel; the launcher does): the kernel variants, the constants of the headers the choices
read (tests/test_kernel_plan.py reads them back from hip/), the tensor-core stages' sizes, the calls a call is
split into, the teams and rings each kernel takes, and `kernel_plan`, the sentence the logs print. kernels.py
re-exports it (kernels.kernel_plan and the rest)."""

import re
from typing import Optional

import torch

from .calls import FP8_BLOCK128, MXFP4, ROW_MAJOR
from .gate import MAX_PAIRS

MIN_ROWS2 = 8  # fewest output rows per phase-2 item (hip/smallm_args.h kMinRows2)


# What the launcher (hip/smallm_moe.hip) runs for each SMALLM_KERNEL_VARIANT value; measured on the
# H200 in examples/results (sections named in brackets).
VARIANTS = {
    "": "default: CUDA two streaming kernels (variant 5) for every shape they take, else the block kernel "
        "(FP8 variant 1, MXFP4 variant 0); gfx950 the pipelined block kernel (variant 0) [h200-twopass]",
    "0": "block kernel, cross-item pipelining, 2 blocks/SM (the gfx950 default; CUDA MXFP4 shapes variant 5 "
         "does not take)",
    "1": "block kernel, no pipelining, 3 blocks/SM (CUDA; the FP8 default before variant 5) [h200-experiments]",
    "2": "removed (block kernel with 4 blocks/SM: spills, slower) [h200-variants]; the launcher runs the default",
    "3": "removed (warp-sized items: slower) [h200-warp-kernel]; the launcher runs the default",
    "4": "removed (block kernel with phase 1 on tensor cores: not faster) [h200-mma-phase1]; "
         "the launcher runs the default",
    "5": "two streaming kernels: gate/up, then down + slot sum (programmatic dependent launch on sm_90); "
         "FP8 and MXFP4 on CUDA run both on tensor cores where x and h fit their f16 stages "
         "[h200-twopass, h200-mma-down, h200-timeline, h200-ab, h200-ab2, h200-ab3]",
}


def variant_note() -> str:
    """Which MoE kernel variant the launcher will run (SMALLM_KERNEL_VARIANT, an A/B switch)."""
    from . import envs

    v = envs.KERNEL_VARIANT.get().strip()
    what = VARIANTS.get(v, "not a variant: the launcher ignores it and runs the default")
    return f"kernel variant: {'SMALLM_KERNEL_VARIANT=' + v if v else 'unset'} ({what})"


# What the launcher runs for one call, mirrored for logs and `doctor` only (it never picks a kernel):
# hip/smallm_moe.hip smallm_moe_launch / launch_twopass and the fits helpers of
# hip/smallm_moe_twopass.h. tests/test_kernel_plan.py reads these constants from the headers.
THREADS = 256                     # kThreads
WARPS = THREADS // 32             # kWarps: warps of a team
X_STAGE_BYTES = 160 * 1024        # kXStageBytes: x as f16 for the tensor-core gate/up
DOWN_MMA_SMEM_BYTES = 207 * 1024  # kDownMmaSmemBytes: the tensor-core down's y, 2^e, weights and h (hi + lo)
DOWN_MMA_ROWS = 16                # kDownMmaRows: output rows per row-block of the tensor-core down
MAX_YS_MMA_BYTES = 32 * 1024      # kMaxYsMmaBytes: its launcher adds blocks until a block's y fits
DOWN_MMA_CHUNKS = 4               # kDownMmaChunks: I <= step * 4 for the tensor-core down's whole jobs
DOWN_SPLIT_CHUNKS = 8             # kDownSplitChunks: FP8 I <= step * 8 with its jobs split along I
DOWN_LO16_CARVEOUT_BYTES = 196 * 1024  # kDownLo16CarveoutBytes: h's lo half as f16 while the block stays within
MMA_MAX_PAIRS = 320               # kMmaMaxPairs: pairs of a tensor-core call (more are split)
MMA_ROUTING_BYTES = 10624         # sizeof(MmaRouting) (hip/smallm_moe_twopass.h), the tensor-core down's static shared memory
H200_SMS = 132                    # the SM count kernel_plan assumes where no CUDA device says otherwise
TWO_BLOCK_CARVEOUT_BYTES = 196 * 1024  # kTwoBlockCarveoutBytes (hip/smallm_moe.hip)
BLOCK_RESERVED_SMEM_BYTES = 1024       # kBlockReservedSmemBytes
# The tensor-core down in two teams per block from these pairs (down_teams_rule):
DOWN_TEAMS_NARROW_MAX_INTER = 256      # kDownTeamsNarrowMaxInter: for I up to this,
DOWN_TEAMS_NARROW_MIN_PAIRS = 22       # kDownTeamsNarrowMinPairs: from here;
DOWN_TEAMS_MIN_PAIRS = 33              # kDownTeamsMinPairs: wider I where one-team blocks hold one row-block each,
DOWN_TEAMS_WIDE_MIN_PAIRS = 10         # kDownTeamsWideMinPairs: else from 2 tokens and at least this many pairs,
DOWN_TEAMS_FEW_BLOCKS_MIN_INTER = 256  # kDownTeamsFewBlocksMinInter: and from this I, where D / 16 <= SMs, from that many pairs

FP8_TEAMS_MIN_TOKENS = 2               # kFp8TeamsMinTokens: FP8 row-major gate/up with kJ = 8 in two teams from here
# The FP8 gate/up by TMA tiles on wgmma (hip/smallm_gateup_tma.h; SMALLM_GATEUP_TMA=1, sm_90a builds)
TMA_SLICE = 512                        # kTmaSlice: K per job
TMA_WARPGROUPS = 2                     # kTmaWarpgroups: per block
TMA_MAX_TOKENS = 20                    # kTmaMaxTokens
TMA_MAX_PAIRS = 320                    # kTmaMaxPairs
TMA_FUSED_MAX_TOKENS = 10              # kTmaFusedMaxTokens: the one-kernel MoE (SMALLM_GATEUP_TMA=3)
TMA_FUSED_MAX_INTER = 256              # kTmaFusedMaxInter
# The one-team tensor-core gate/up's static shared memory as ptxas reports it for sm_90a (the
# launcher reads it from the kernel; this mirror only words the log line): its routing (whose expert map
# also holds the cross-warp sums once the routing is built) and the barrier of x's bulk copy (8 bytes,
# padded to the routing's 128-byte alignment). The per-token scales follow x in its dynamic memory.
GATEUP_STATIC_SMEM_BYTES = 19712


def gateup_x_stage_bytes(T: int, D: int) -> int:
    """hip/smallm_moe_twopass.h gateup_x_stage_bytes: bytes of x staged as f16 by the tensor-core gate/up."""
    return T * D * 2


def gateup_mma_smem_bytes(T: int, D: int) -> int:
    """hip/smallm_moe_twopass.h gateup_mma_smem_bytes: the tensor-core gate/up's dynamic shared memory,
    x as f16, then a 4-byte scale per token (16-byte padded)."""
    return gateup_x_stage_bytes(T, D) + (T * 4 + 15) // 16 * 16


def _mma_step_values(fmt: str) -> int:
    """mma_step_values<Fmt>: values of K per tensor-core step (4 lanes x one 16-byte vector)."""
    return 4 * (32 if fmt == MXFP4 else 16)


def _gateup_mma_fits(fmt: str, T: int, K: int, D: int) -> bool:
    """gateup_mma_fits<Fmt>: x fits the f16 stage, the pairs MMA_MAX_PAIRS, and every warp takes at
    most 8 steps."""
    step = _mma_step_values(fmt)
    return gateup_x_stage_bytes(T, D) <= X_STAGE_BYTES and T * K <= MMA_MAX_PAIRS and D % step == 0 and D // step <= 64


def _gateup_mma_kj(fmt: str, D: int) -> int:
    """The tensor-core gate/up's kJ (steps per warp and job): 4 where D takes at most 4 per warp, else 8."""
    return 4 if D // _mma_step_values(fmt) <= 4 * WARPS else 8


def _twopass_fits(fmt: str, D: int) -> bool:
    nv = D // 16 // (2 if fmt == MXFP4 else 1)
    per8, per4 = -(-nv * 8 // THREADS), -(-nv * 4 // THREADS)
    return per8 <= 8 or per4 <= 8


def down_mma_hstride(I: int, lo8: bool) -> int:
    """hip/smallm_moe_twopass.h down_mma_hstride: f16 values per staged h row of the tensor-core down,
    padded by 8 against bank conflicts where h's lo half is f16, not where it is e5m2."""
    return I if lo8 else I + 8


def down_mma_lo_row0(N: int) -> int:
    """hip/smallm_moe_twopass.h down_mma_lo_row0: MXFP4's first f16 lo row, the least >= N that is
    4 mod 8 (a pair's lo row 64 bytes from its hi row in bank offset)."""
    return N + ((4 - N) & 7)


def down_mma_stage_rows(fmt: str, N: int, lo8: bool) -> int:
    """hip/smallm_moe_twopass.h down_mma_stage_rows: f16 rows of the staged h (lo8: hi rows only)."""
    if lo8:
        return N
    return down_mma_lo_row0(N) + N if fmt == MXFP4 else 2 * N


def down_mma_smem_at(fmt: str, N: int, I: int, D: int, sms: int, lo_bytes: int) -> int:
    """hip/smallm_moe.hip down_mma_smem_at: the tensor-core down's dynamic shared memory at its
    smallest grid (one block per SM), with down_grid's rule (more blocks until a block's y fits);
    h staged as an f16 hi half and a lo half of lo_bytes (2: f16, 1: e5m2)."""
    nrb = D // DOWN_MMA_ROWS
    G = max(1, min(nrb, sms))

    def ys_bytes(g: int) -> int:
        return (-(-nrb // g) * N * DOWN_MMA_ROWS + 3) // 4 * 4 * 4

    while ys_bytes(G) > MAX_YS_MMA_BYTES and G < nrb:
        G += 1
    lo8 = lo_bytes == 1
    return (ys_bytes(G) + 2 * ((N + 3) // 4 * 4) * 4
            + down_mma_stage_rows(fmt, N, lo8) * down_mma_hstride(I, lo8) * 2 + (N * I if lo8 else 0))


def down_mma_lo_bytes(fmt: str, N: int, I: int, D: int, sms: int):
    """hip/smallm_moe.hip down_mma_lo_bytes: (bytes of h's lo half for the tensor-core down, 2 = f16,
    1 = e5m2, 0 = the down runs on CUDA cores; why, in words, where not the plain f16 stage)."""
    from . import envs

    f16, e5m2 = (down_mma_smem_at(fmt, N, I, D, sms, lo) for lo in (2, 1))
    f16_fits, e5m2_fits = f16 <= DOWN_MMA_SMEM_BYTES, e5m2 <= DOWN_MMA_SMEM_BYTES
    no_fit = (f"its staged h and y take {e5m2} B even with h's lo half as e5m2, over the {DOWN_MMA_SMEM_BYTES} B "
              "of a block")
    forced = envs.DOWN_LO8.get().strip()[:1]
    if forced == "0":
        if f16_fits:
            return 2, ""
        return 0, no_fit if not e5m2_fits else (f"its staged h and y take {f16} B with h's lo half as f16, over "
                                                f"the {DOWN_MMA_SMEM_BYTES} B of a block: SMALLM_DOWN_LO8=0")
    if forced == "1":
        return (1, "SMALLM_DOWN_LO8=1") if e5m2_fits else (0, no_fit)
    f16_block = f16 + MMA_ROUTING_BYTES + BLOCK_RESERVED_SMEM_BYTES
    if f16_fits and (fmt == MXFP4 or f16_block <= DOWN_LO16_CARVEOUT_BYTES):
        return 2, ""
    if not e5m2_fits:
        return 0, no_fit
    if not f16_fits:
        return 1, f"as f16 its stage would take {f16} B, over the {DOWN_MMA_SMEM_BYTES} B of a block"
    return 1, (f"as f16 its block would take {f16_block} B, past the {DOWN_LO16_CARVEOUT_BYTES // 1024} KB "
               "shared-memory carveout")


def _down_mma_chunks(fmt: str, I: int) -> int:
    """hip/smallm_moe_twopass.h down_mma_chunks: chunks of I (MMA steps) a tensor-core down job covers."""
    return -(-I // _mma_step_values(fmt))


def down_mma_split(fmt: str, I: int) -> bool:
    """hip/smallm_moe_twopass.h down_mma_split: FP8 over DOWN_MMA_CHUNKS chunks, its down jobs split
    along I into parts of up to DOWN_MMA_CHUNKS chunks (down_mma_parts)."""
    return fmt == FP8_BLOCK128 and _down_mma_chunks(fmt, I) > DOWN_MMA_CHUNKS


def _down_mma_most_chunks(fmt: str) -> int:
    """The most chunks of I the tensor-core down covers: FP8 DOWN_SPLIT_CHUNKS (split), MXFP4 DOWN_MMA_CHUNKS."""
    return DOWN_SPLIT_CHUNKS if fmt == FP8_BLOCK128 else DOWN_MMA_CHUNKS


def down_mma_takes(fmt: str, I: int) -> bool:
    """hip/smallm_moe_twopass.h down_mma_takes: I the tensor-core down covers (_down_mma_most_chunks)."""
    return I % 128 == 0 and _down_mma_chunks(fmt, I) <= _down_mma_most_chunks(fmt)


def down_mma_ring_chunks(fmt: str, I: int) -> int:
    """hip/smallm_moe_twopass.h down_mma_ring_chunks: chunks of I a tensor-core down job's loads hold, 2
    (three jobs' W2 in flight per warp) where I takes at most two, else DOWN_MMA_CHUNKS (two jobs; split
    jobs' parts too)."""
    return 2 if _down_mma_chunks(fmt, I) <= 2 else DOWN_MMA_CHUNKS


def down_mma_parts(fmt: str, I: int) -> list:
    """The values of I in each part of a split job (down_mma_split; the kernel's nparts parts of kCh =
    DOWN_MMA_CHUNKS chunks, the last holding what is left), e.g. FP8 I = 384: [256, 128]; [I] unsplit."""
    if not down_mma_split(fmt, I):
        return [I]
    part = DOWN_MMA_CHUNKS * _mma_step_values(fmt)
    return [min(part, I - p) for p in range(0, I, part)]


def _device_sms() -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return H200_SMS


def gateup_tma_grid(D: int, sms: int) -> int:
    """hip/smallm_moe.hip gateup_tma_grid: the most blocks, up to one per SM, whose warpgroups are a
    multiple of the K slices (each warpgroup's jobs in one slice); 0 where none."""
    S = D // TMA_SLICE
    return next((g for g in range(sms, 0, -1) if (TMA_WARPGROUPS * g) % S == 0), 0)


def gateup_tma_why_not(arch: str, fmt: str, layout: str, T: int, K: int, D: int, I: int, sms: int,
                       build: Optional[str] = None) -> str:
    """hip/smallm_moe.hip gateup_tma_fits, in words: "" where the launcher takes the TMA gate/up. arch is
    the device's (sm_90 on an H200), build the kernels' (the loaded extension's where None); the
    driver's tensor-map encoder, which the launcher also needs, is assumed."""
    from . import envs

    if envs.GATEUP_TMA.get().strip()[:1] not in ("1", "2", "3"):
        return "SMALLM_GATEUP_TMA unset"
    if build is None:
        from . import kernels  # the loaded extension's arch (tests stand one in through kernels)

        build = kernels.compiled_arch()
    if build != "sm_90a":
        return f"a {build or 'missing'} build (TMA gate/up: sm_90a builds only)"
    if not arch.startswith("sm_9"):
        return f"an {arch} device (TMA gate/up: compute capability 9.x only)"
    if fmt != FP8_BLOCK128 or layout != ROW_MAJOR:
        return f"{fmt} {layout} (TMA gate/up: FP8 row-major only)"
    if T > TMA_MAX_TOKENS or T * K > TMA_MAX_PAIRS:
        return f"{T} tokens / {T * K} pairs (TMA gate/up: at most {TMA_MAX_TOKENS} / {TMA_MAX_PAIRS})"
    if D % TMA_SLICE or I % 128:
        return f"D={D}, I={I} (TMA gate/up: D a multiple of {TMA_SLICE}, I of 128)"
    if gateup_tma_grid(D, sms) == 0:
        return f"no grid of at most {sms} blocks whose warpgroups divide into {D // TMA_SLICE} slices"
    return ""


def mma_split_tokens(fmt: str, T: int, K: int, D: int, most_tokens: int = 0) -> int:
    """hip/smallm_moe_twopass.h mma_split_tokens: tokens per part of a call whose x is over the
    tensor-core gate/up's f16 stage or whose pairs are over MMA_MAX_PAIRS (T in the fewest parts that
    fit, near-equal); 0 where D does not suit the tensor-core gate/up. most_tokens > 0 caps a part's
    tokens further (SMALLM_MMA_SPLIT_TOKENS)."""
    most = min(X_STAGE_BYTES // gateup_x_stage_bytes(1, D), MMA_MAX_PAIRS // max(K, 1))
    if most_tokens > 0:
        most = min(most, most_tokens)
    if T <= 0 or most < 1 or not _gateup_mma_fits(fmt, 1, K, D):
        return 0
    parts = -(-T // most)
    return -(-T // parts)


def down_fit_part(fmt: str, T: int, K: int, D: int, I: int, sms: int, part: int) -> int:
    """hip/smallm_moe.hip down_fit_part (unless SMALLM_MMA_SPLIT_DOWN=0): tokens per part (near-equal) where the
    tensor-core down's stage fits a block in every part: `part` where it already does at min(part, T)
    tokens, or where no count would; else the fewest parts of at most the most tokens that fit."""
    if not down_mma_takes(fmt, I):
        return part
    t = min(part, T)
    if down_mma_lo_bytes(fmt, t * K, I, D, sms)[0]:
        return part
    while t > 1:
        t -= 1
        if down_mma_lo_bytes(fmt, t * K, I, D, sms)[0]:
            parts = -(-T // t)
            return -(-T // parts)
    return part


def _split_tokens_setting() -> int:
    """SMALLM_MMA_SPLIT_TOKENS as the launcher reads it (atoi: a leading integer, else 0)."""
    from . import envs

    m = re.match(r"\s*[+-]?\d+", envs.MMA_SPLIT_TOKENS.get())
    return int(m.group(0)) if m else 0


def _split_down_on() -> bool:
    """SMALLM_MMA_SPLIT_DOWN as the launcher reads it (on unless it starts with 0), where the down may run
    on tensor cores at all (SMALLM_MMA_DOWN)."""
    from . import envs

    return not envs.MMA_SPLIT_DOWN.get().startswith("0") and envs.MMA_DOWN.enabled()


def _mma_over(T: int, K: int, D: int, fmt: str = FP8_BLOCK128) -> str:
    """Why a call does not fit one tensor-core call, in words (D's steps first, then x's stage)."""
    step = _mma_step_values(fmt)
    if D % step or D // step > 64:
        return f"D={D} is not 8 steps of {step} or fewer per warp"
    if gateup_x_stage_bytes(T, D) > X_STAGE_BYTES:
        return f"x as f16 is {gateup_x_stage_bytes(T, D)} B, over the {X_STAGE_BYTES} B stage"
    return f"{T * K} pairs, over the {MMA_MAX_PAIRS} of a tensor-core call"


def tma_fused_why_not(T: int, K: int, D: int, I: int, sms: int) -> str:
    """hip/smallm_moe.hip moe_tma_fits beyond gateup_tma_fits, in words: "" where SMALLM_GATEUP_TMA=3
    runs the whole MoE in one kernel (tokens, I, and the workspace's y and counters: tma_fused_y_words,
    tma_fused_sync_words in hip/smallm_gateup_tma.h)."""
    if D % TMA_SLICE or D < TMA_SLICE:
        return f"D={D} (a multiple of {TMA_SLICE})"
    if T > TMA_FUSED_MAX_TOKENS:
        return f"{T} tokens over {TMA_FUSED_MAX_TOKENS}"
    if I > TMA_FUSED_MAX_INTER:
        return f"I={I} over {TMA_FUSED_MAX_INTER}"
    P, nt2, rows = T * K, (T + 1) // 2, D // 64
    groups = max(1, gateup_tma_grid(D, sms) * TMA_WARPGROUPS // rows)
    if groups * T * D + P * I * 8 * nt2 // 4 + P * (I // 32) * 2 * nt2 > MAX_PAIRS * D:
        return f"its sums and h over the workspace's y at D={D}"
    if P * (I // 32) + P + rows + 1 > T * ((D + MIN_ROWS2 - 1) // MIN_ROWS2):
        return f"its counters over the workspace's at {T} tokens, D={D}"
    return ""


def down_teams_rule(I: int, D: int, K: int, sms: int, split: bool = False):
    """down_teams_min_pairs (hip/smallm_moe.hip): the pairs from which the tensor-core down runs two
    teams, and the rule's case in words (split: FP8 jobs split along I, down_mma_split)."""
    nrb = D // DOWN_MMA_ROWS
    if nrb <= sms and I >= DOWN_TEAMS_FEW_BLOCKS_MIN_INTER:
        return DOWN_TEAMS_WIDE_MIN_PAIRS, f"at I={I}, D={D}: a one-team grid would have one block a SM"
    if I <= DOWN_TEAMS_NARROW_MAX_INTER:
        return DOWN_TEAMS_NARROW_MIN_PAIRS, f"at I={I}"
    if split:
        return max(2 * K, DOWN_TEAMS_WIDE_MIN_PAIRS), f"at I={I}, jobs split along I: from 2 tokens"
    if sms < nrb <= 2 * sms:
        return DOWN_TEAMS_MIN_PAIRS, f"at I={I}, D={D}: one-team blocks would hold one row-block each"
    return max(2 * K, DOWN_TEAMS_WIDE_MIN_PAIRS), f"at I={I}, D={D}: from 2 tokens"


def _variant(arch: str) -> str:
    """The MoE kernel variant the launcher runs on this arch (SMALLM_KERNEL_VARIANT where it names one)."""
    from . import envs

    v = envs.KERNEL_VARIANT.get().strip()
    cuda = arch.startswith("sm_")
    return v if v in (("0", "1", "5") if cuda else ("0", "5")) else ("5" if cuda else "0")


def _split_part(fmt: str, T: int, K: int, D: int, I: int, sms: Optional[int] = None) -> int:
    """Tokens per part where the launcher runs a tensor-core call as consecutive calls (SMALLM_MMA_SPLIT,
    mma_split_tokens, and down_fit_part unless SMALLM_MMA_SPLIT_DOWN=0), else 0. For a call
    already on the tensor-core path (kernel_plan's checks)."""
    from . import envs

    if not envs.MMA_SPLIT.enabled():
        return 0
    part = mma_split_tokens(fmt, T, K, D, _split_tokens_setting())
    if part > 0 and _split_down_on():
        part = down_fit_part(fmt, T, K, D, I, sms or _device_sms(), part)
    return part if 0 < part < T else 0


def launch_token_parts(arch: str, fmt: str, T: int, K: int, D: int, I: int, sms: Optional[int] = None) -> list:
    """The token counts of the consecutive calls the launcher makes for one call of T tokens (each part
    reads the weights of its own tokens' experts; the bench's byte model counts them): [T] where it
    makes one. I and sms matter for the down-fit split (down_fit_part)."""
    from . import envs

    if not (arch.startswith("sm_") and _variant(arch) == "5" and _twopass_fits(fmt, D) and envs.MMA.enabled()):
        return [T]
    part = _split_part(fmt, T, K, D, I, sms)
    return [min(part, T - t0) for t0 in range(0, T, part)] if part else [T]


def kernel_plan(arch: str, fmt: str, T: int, K: int, D: int, I: int, sms: Optional[int] = None,
                layout: str = ROW_MAJOR, build: Optional[str] = None) -> str:
    """The kernels the launcher runs for a call of this shape, and why, in words (sms: the device's
    SM count; the current CUDA device's, else the H200's)."""
    from . import envs

    cuda = arch.startswith("sm_")
    variant = _variant(arch)
    block = f"block kernel (variant {variant})"
    if variant == "5" and not _twopass_fits(fmt, D):
        return f"block kernel (variant {1 if cuda and fmt == FP8_BLOCK128 else 0}): D={D} too wide for the two-pass gate/up"
    if variant != "5":
        return block
    if not (cuda and envs.MMA.enabled()):
        why = "no tensor-core path for this arch" if envs.MMA.enabled() else "SMALLM_MMA=0"
        return f"two-pass (variant 5): gate/up and down on CUDA cores ({why})"
    sms = sms or _device_sms()  # once, for every tensor-core choice below (and the split calls' plans)
    x_bytes, step = gateup_x_stage_bytes(T, D), _mma_step_values(fmt)
    forced_most = _split_tokens_setting()
    part = _split_part(fmt, T, K, D, I, sms)
    if part:
        parts = -(-T // part)
        most = min(T, mma_split_tokens(fmt, T, K, D, forced_most))  # the part without the down's rule
        why = (_mma_over(T, K, D, fmt) if not _gateup_mma_fits(fmt, T, K, D)
               else f"SMALLM_MMA_SPLIT_TOKENS={forced_most}" if most < T else "")
        if part < most:
            down_why = (f"the down's staged h and y at {most} tokens would not fit a block")
            why = f"{why}; {down_why}" if why else down_why
        return f"{parts} calls of at most {part} tokens ({why}), each " + kernel_plan(arch, fmt, part, K, D, I, sms, layout, build)
    if not _gateup_mma_fits(fmt, T, K, D):
        return (f"two-pass (variant 5): gate/up and down on CUDA cores ({_mma_over(T, K, D, fmt)}"
                f"{': SMALLM_MMA_SPLIT=0' if mma_split_tokens(fmt, T, K, D, forced_most) else ''})")
    forced = envs.GATEUP_TEAMS.get().strip()[:1]  # the launcher reads the first character
    tma_no = gateup_tma_why_not(arch, fmt, layout, T, K, D, I, sms, build)
    fused = not tma_no and envs.GATEUP_TMA.get().strip()[:1] == "3"
    fused_no = tma_fused_why_not(T, K, D, I, sms) if fused else ""
    if fused and not fused_no:
        return ("one kernel by TMA tiles on wgmma (SMALLM_GATEUP_TMA=3: experiment): the gate/up's FP8 sums to "
                "fp32 per 32-k step, each expert's down as soon as its h is whole, h as three e4m3 parts")
    if not tma_no:
        mode = envs.GATEUP_TMA.get().strip()[:1]
        if mode == "3":
            mode = f"3, {fused_no} for the one-kernel MoE, so as 2"
        gateup = (f"gate/up by TMA tiles on wgmma (SMALLM_GATEUP_TMA={mode}: experiment; FP8 sums to fp32 per "
                  f"{'128-wide K block' if mode == '1' else '32-k step'}), its K slices summed into h by a second kernel")
    elif forced in ("1", "2"):
        gateup = (f"gate/up on tensor cores ({forced} team{'s' if forced == '2' else ''} per block: "
                  f"SMALLM_GATEUP_TEAMS={forced})")
    elif 2 * (GATEUP_STATIC_SMEM_BYTES + gateup_mma_smem_bytes(T, D) + BLOCK_RESERVED_SMEM_BYTES) > TWO_BLOCK_CARVEOUT_BYTES:
        gateup = (f"gate/up on tensor cores (2 teams per block, x once per SM: two blocks of x {x_bytes} B would "
                  f"pass the {TWO_BLOCK_CARVEOUT_BYTES // 1024} KB shared-memory carveout)")
    elif (fmt == FP8_BLOCK128 and layout == ROW_MAJOR and _gateup_mma_kj(fmt, D) == 8
          and T >= FP8_TEAMS_MIN_TOKENS):
        gateup = (f"gate/up on tensor cores (2 teams per block: FP8 row-major, {T} tokens >= "
                  f"{FP8_TEAMS_MIN_TOKENS}, where its job loop settles each job's loads)")
    else:
        gateup = "gate/up on tensor cores"
    scales = ""
    if fmt == MXFP4:  # gateup_mma_job: lane scales where a warp holds four steps, chosen per job (deterministic)
        scales = ("; gate/up e8m0 per lane on fp32 sums for an expert with one pair, in f16 relative to a quad's "
                  "largest for more" if _gateup_mma_kj(fmt, D) == 4 else "; gate/up e8m0 in f16 relative to a quad's largest")
    lo_bytes, lo_why = down_mma_lo_bytes(fmt, T * K, I, D, sms)
    if not envs.MMA_DOWN.enabled():
        down = "down on CUDA cores (SMALLM_MMA_DOWN=0)"
    elif not down_mma_takes(fmt, I):
        over = f"over {step * _down_mma_most_chunks(fmt)}" if I % 128 == 0 else "not a multiple of 128"
        down = f"down on CUDA cores (I={I} {over})"
    elif lo_bytes == 0:
        down = f"down on CUDA cores ({lo_why})"
    else:
        split = down_mma_split(fmt, I)
        forced = envs.DOWN_TEAMS.get().strip()[:1]
        if forced in ("1", "2"):
            down = f"down on tensor cores ({forced} team{'s' if forced == '2' else ''} per block: SMALLM_DOWN_TEAMS={forced})"
        elif T * K >= (rule := down_teams_rule(I, D, K, sms, split))[0]:
            down = f"down on tensor cores (2 teams per block: {T * K} pairs >= {rule[0]} {rule[1]})"
        else:
            down = "down on tensor cores"
        if lo_bytes == 1:
            down += f", h's lo half as e5m2 ({lo_why})"
        two_chunks = down_mma_ring_chunks(fmt, I) == 2
        ring2 = two_chunks and envs.DOWN_RING.get().strip()[:1] == "2"  # (split jobs hold four chunks)
        if split:
            parts = down_mma_parts(fmt, I)
            down += f", each job in {len(parts)} parts along I ({' + '.join(map(str, parts))})"
        if ring2:
            down += ", two jobs' W2 in flight per warp (SMALLM_DOWN_RING=2)"
        if fmt == MXFP4:  # the kernel's chunks per job (kCh): two gives every MMA one e8m0 block (kBlockMma)
            down += (", each e8m0 block's scale on its MMA's fp32 sums" if two_chunks and not ring2
                     else ", e8m0 scales in f16 relative to the largest of 128 values")
    return f"two-pass (variant 5): {gateup}, {down}{scales}"
