"""The eligibility gate: rules as data, each with a human-readable reason, plus the token caps.

A call goes to a compiled kernel only if every rule passes; otherwise it takes the fallback and
the first failing rule's reason is recorded (logged once per layer shape and path). `doctor`
prints the same rules and caps, so what users read is what runs. A cap measured on the serving machine
(SGLANG_SMALLM_CAPS_FILE, written by `sglang-smallm bench --write-caps`: measured_caps.py) replaces the
built-in one for exactly the shape it was measured for.
"""

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from . import envs, measured_caps
from .calls import FP8_BLOCK128, MXFP4, ROW_MAJOR, SHUFFLE16, MoeCall

# Limits compiled into the kernel (hip/smallm_args.h); keep in sync.
MAX_PAIRS = 768
MAX_EXPERTS = 1024
MAX_INTER = 1024
MAX_SLOTS = 16


@dataclass(frozen=True)
class Cap:
    arch: str              # device arch prefix: "gfx950", "sm_90"
    weight_format: str
    inter_max: Optional[int]  # applies when I <= inter_max (None: any I)
    tokens: int
    source: str
    hidden_max: Optional[int] = None  # applies when D <= hidden_max (None: any D)
    slots_max: Optional[int] = None   # applies when K <= slots_max (None: any K)


# The MI355X rows' source: upstream's crossovers were measured for SGLang's own gfx950 kernel, not this one.
UPSTREAM_MI355X = ("crossover vs AITER measured upstream on MI355X, for SGLang's own gfx950 kernel: "
                   "`sglang-smallm bench --write-caps` measures this one's on yours")

# Token caps: the largest token count sent to the kernel. Order matters: first match wins.
CAPS: Sequence[Cap] = (
    Cap("gfx950", FP8_BLOCK128, 128, 48, UPSTREAM_MI355X),
    Cap("gfx950", FP8_BLOCK128, 256, 20, UPSTREAM_MI355X),
    Cap("gfx950", FP8_BLOCK128, None, 16, "not measured: conservative"),
    # MXFP4 at I = 128 (Qwen3.5 TP8) is stored padded to 256 for AITER; upstream's crossover is that padded
    # layer's. The gate keys on the computed I (call.inter), and this row covers 128 too; this kernel reads only
    # I = 128's bytes of it (AITER is told the padding as well): the crossover at 128 itself was not measured.
    Cap("gfx950", MXFP4, 256, 40, UPSTREAM_MI355X),
    Cap("gfx950", MXFP4, None, 16, "not measured: conservative"),
    # H200, row-major weights (the Triton fallback's layout), against SGLang's Triton FP8 path as
    # shipped, both in one job (examples/results/README.md). Above 20 tokens at D=4096 x passes its
    # 160 KB stage and the launcher splits the call into tensor-core calls of <= 20 tokens. With I=256
    # faster at every count up to 28 ("h200-ab14" run 1: 20: 173.3 vs 191.2 us, 21: 176.7 vs 192.5,
    # 24: 196.7 vs 212.4, 26: 211.6 vs 233.3, 28: 233.7 vs 241.5, and 226.3 in run 3 with the tensor-core
    # kernels' smaller routing; "h200-ab15" run 6: 236.0 vs 243.5, run 5 level), level at 29-31 (run 4:
    # within 0.5 %) and slower at 32 (263.8 vs 258.1; run 4: 267.1 vs 260.8): the cap was 28 (since "h200-s47",
    # against SGLang's own FusedMoE, 33 at up to 11 slots; below).
    # With I=128 faster at every count measured up to 41 ("h200-ab8" runs 4-5: 100.6 vs 139.4 at 20,
    # 117.7 vs 143.4 at 21, 162.1 vs 183.8 at 32, 200.6 vs 219.6 at 40 (two calls of 20), 217.7 vs 224.8
    # at 41 (three calls)) and level at 44 and 48 (229.2 vs 229.9, 241.4 vs 242.8): the cap is 40, the
    # last count with two calls, 9 % ahead ("h200-ab14" run 1: 141.3 vs 182.4 at 32). The split calls
    # were measured at D=4096: a wider hidden size splits sooner (x's stage holds 160 KB), so there the
    # caps stay 20, the count measured before the split existed. Shapes not measured against the peer
    # do not use the kernel.
    # D <= 2048 (Qwen3-Next-80B-like: E=513, top-10) against SGLang's own FusedMoE with the kernels off (the
    # fallback the gate chooses against: `bench`'s fallback column, examples/results "h200-s43" runs 2-4, one
    # job per shape, us kernel vs fallback). The kernel is 1.8-2.5x its read floor there, against 1.26-1.77x at
    # D=4096, and the D=4096 caps would send it slower calls. I=128: faster at every count measured, 1-28
    # (28: 76.9 vs 93.2). I=256: faster at 1-20 (16: 88.8 vs 90.0, 20: 102.6 vs 105.0), 47 % slower at 28
    # (192.7 vs 131.3: at D=2048 x still fits its stage, so the call is not split, and the down's stage does
    # not fit a block, so it runs on CUDA cores). I=512: faster at 1 token (21.3 vs 24.0; 22.4 vs 23.9 in
    # run 2), slower from 2 (31.8 vs 30.2, 39.8 vs 38.4 at 3).
    # Since the forty-fourth session (the gate/up's kSettle at kJ = 4 and the down's two teams where its grid
    # has one block a SM: D=2048 4-15 % faster; "h200-s44" runs 2-3 against the same fallback): I=128 faster at
    # 1-40 (32: 77.0 vs 99.6, 36: 104.4 vs 106.1, 40: 102.4 vs 116.4; 41 and more not measured): 40, as at
    # D=4096. I=384 (until then I=512's cap) faster at 1-12 (12: 94.2 vs 98.5), slower from 13 (104.1 vs
    # 102.4): 12. I=512 faster at 1 token (16.9 vs 24.1), level at 2 (28.6 vs 28.5), faster at 3, level at
    # 4, slower from 6: still 1. I=256 (16: 76.4, 20: 87.4 us in run 1) kept 20 until 21-25 were measured
    # ("h200-s46" runs 1-2, two jobs, us kernel vs fallback): 21: 92.0 vs 107.6 and 91.8 vs 107.6, 22: 96.0
    # vs 110.7, 23: 104.0 vs 111.8, 24: 106.4 vs 114.1 and 106.4 vs 114.1, 25: 111.1 vs 118.0 and 111.4 vs
    # 117.9 (6 %): the cap is 25. From 26 the down's stage no longer fits a block: on CUDA cores 163.1 vs
    # 120.8 (run 1), as two calls of 13 (the down-fit split, the default since) 129.3 vs 120.6 (run 2),
    # still 7 % slower.
    # D=2048, I=128 past 40 ("h200-s47" runs 5-6, two jobs on one machine; x's stage holds 40 tokens at D=2048,
    # so from 41 the call runs as two tensor-core calls): 41: 102.8 vs 115.1, 44: 110.6 vs 123.1, 48: 115.7 vs
    # 128.6, 50: 122.2 vs 131.4, 52: 127.8 vs 134.9, 56: 133.1 vs 137.9, 58: 138.8 vs 141.1, 60: 140.6 vs
    # 141.7 and 140.9 vs 141.3 (level: 0.3-0.8 %), 64: 153.6 vs 144.3 (6 % slower), 69: 168.8 vs 146.8. The cap is
    # 60 at up to 10 slots (the end of the run every job found faster); more slots keep 40.
    Cap("sm_90", FP8_BLOCK128, 128, 60, "H200 vs SGLang's layer measured 2026-12-04 at D=2048, top-10 (split calls "
        "above 40; faster at 1-58 tokens, by 0.3-0.8 % at 60, slower at 64)", hidden_max=2048, slots_max=10),
    Cap("sm_90", FP8_BLOCK128, 128, 40, "H200 vs SGLang's layer measured 2026-12-04 at D=2048 (faster at 1-40 tokens; "
        "more not measured)", hidden_max=2048),
    Cap("sm_90", FP8_BLOCK128, 256, 25, "H200 vs SGLang's layer measured 2026-12-04 at D=2048 (faster at 1-25 tokens, "
        "7 % slower at 26)", hidden_max=2048),
    Cap("sm_90", FP8_BLOCK128, 384, 12, "H200 vs SGLang's layer measured 2026-12-04 at D=2048, I=384 (faster at 1-12 "
        "tokens, slower from 13)", hidden_max=2048),
    Cap("sm_90", FP8_BLOCK128, 512, 1, "H200 vs SGLang's layer measured 2026-12-04 at D=2048, I=512 (faster at 1 token, "
        "level at 2)", hidden_max=2048),
    # I=128 at D=4096 (Qwen3.5 TP8) past 40 against SGLang's own FusedMoE ("h200-s44" runs 3-4, us kernel vs
    # fallback): 36: 153.7 vs 200.3 and 152.9 vs 200.6, 40: 174.0 vs 224.3 and 173.1 vs 223.7, 41: 180.9
    # vs 225.2, 44: 191.6 vs 231.4 and 192.0 vs 231.3, 48: 203.4 vs 243.1 (16 %). The cap is 48 (more not
    # measured); it was 40, set against the peer on the kernels of 2026-12-01 (level at 44 and 48 then).
    # Past 48 ("h200-s47" runs 5-6, two jobs on one machine; from 41 three calls, from 61 four): 48: 201.4 vs
    # 242.3, 49: 212.2 vs 244.6, 52: 222.3 vs 251.9, 56: 237.1 vs 256.8 and 235.4 vs 257.1, 58: 249.6 vs 262.6,
    # 60: 257.0 vs 265.2 and 256.6 vs 265.0, 61: 260.5 vs 267.1, 62: 266.1 vs 268.6, 63: 268.6 vs 270.0
    # (0.5 %), 64: 271.3 vs 270.7 and 271.3 vs 271.0 (level, 0.1-0.2 % slower), 69: 294.8 vs 276.0. On another
    # machine (run 7, whose fallback column is clean only to 60): 58: 246.0 vs 261.8, 60: 254.3 vs 264.1.
    # The cap was 63 at up to 11 slots (the end of the run every job found faster; 61-63 by 0.5-2.5 %, one
    # job). A third machine ("h200-s53" runs 3 and 5, 2026-12-05, the kernels of 2026-12-04's last change,
    # `bench --write-caps` and the fallback column): 48: 209.0 vs 242.7, 56: 243.7 vs 257.5, 57: 246.0 vs 259.7,
    # 59: 263.4 vs 264.2 (0.3 %), 60: 269.5 vs 265.6 (1.5 % slower), 61: 267.0 vs 267.6, 63: 275.2 vs 270.2 and
    # 275.5 vs 270.7 (1.8 % slower). The cap is 59, the end of the run every machine found faster; more slots
    # keep 48 (16 slots are held there by the kernel's 768 pairs anyway).
    Cap("sm_90", FP8_BLOCK128, 128, 59, "H200 vs SGLang's layer measured 2026-12-04 and 2026-12-05 on three machines at "
        "top-11 (split calls above 20; faster at 1-59 tokens on all, 1.5-1.8 % slower at 60 and 63 on one)",
        hidden_max=4096, slots_max=11),
    Cap("sm_90", FP8_BLOCK128, 128, 48, "H200 vs SGLang's layer measured 2026-12-04 (split calls above 20; faster "
        "at 1-48 tokens, more not measured)", hidden_max=4096),
    Cap("sm_90", FP8_BLOCK128, 128, 20, "H200: measured up to 20 tokens; the split calls above were measured at D=4096 only"),
    # I=256 at D=4096 (Qwen3.5 TP4, top-11) past 28 against SGLang's own FusedMoE ("h200-s47", us kernel vs
    # fallback; runs 1-3 three jobs on one machine, run 4 one job on another, with the peer): 28: 217.8 vs
    # 245.6, 217.9 vs 245.5 and 218.9 vs 245.2, 29: 228.7 vs 249.2 and 230.1 vs 252.1, 30: 236.5 vs 253.2,
    # 235.6 vs 250.7 and 238.2 vs 253.2, 31: 240.1 vs 254.8, 32: 248.4 vs 261.7, 248.1 vs 261.7 and 252.8 vs
    # 261.8, 33: 256.9 vs 266.0 and 257.1 vs 264.8, 34: 265.2 vs 270.4 and 265.4 vs 270.1 but 271.4 vs 270.4
    # in run 4 (0.4 % slower; the peer as shipped there 269.8, with SGLang's JIT helpers). Past 34 faster again in every job to 38
    # (36: 1.1-1.7 %; 38, two calls of 19: 2-5 %) and slower from 39 (20 + 19: a call of 20 passes the
    # gate/up's carveout step; 309.8 vs 304.4). Against the peer in run 4 (shipped, JIT helpers): 28: 218.9 vs 239.1, 30: 238.2 vs
    # 252.0, 32: 252.8 vs 256.9, 34: 271.4 vs 269.8 (0.6 % slower). The cap was 33 at up to 11 slots, the last count of the
    # run every job found faster; it was 28, set against the peer on the kernels of 2026-12-01 ("slower from
    # 32" then). A third machine ("h200-s53" runs 3 and 5, 2026-12-05): 28: 232.4 vs 248.4, 29: 240.6 vs 254.2,
    # 30: 252.3 vs 256.4, 31: 268.3 vs 260.8 (2.9 % slower), 32: 270.4 vs 265.0 and 278.5 vs 265.3, 33: 279.2 vs
    # 268.5 (4 % slower); the same machine's read floors and kernel times at 16-20 tokens 3-5 % above those of
    # the README's table. The cap is 30, the end of the run every machine found faster. More slots split sooner
    # (320 pairs a call, the down's stage) and were not measured past 20: they keep 28.
    Cap("sm_90", FP8_BLOCK128, 256, 30, "H200 vs SGLang's layer measured 2026-12-04 and 2026-12-05 on three machines at "
        "top-11 (split calls above 20; faster at 1-30 tokens on all, 3-4 % slower at 31-33 on one)", hidden_max=4096,
        slots_max=11),
    Cap("sm_90", FP8_BLOCK128, 256, 28, "H200 crossover vs SGLang Triton measured 2026-12-01 at top-11 (split calls "
        "above 20; slower from 32); more than 11 slots not measured past 20", hidden_max=4096),
    Cap("sm_90", FP8_BLOCK128, 256, 20, "H200: measured up to 20 tokens; the split calls above were measured at D=4096 only"),
    # I=384 (Qwen3-235B-like at TP4): measured at D=4096, E=513, top-11 against the peer at I=384. With the
    # down's jobs split along I on tensor cores (since the fortieth session; "h200-s40" runs 1 and 3, us
    # kernel vs shipped): 1 token 23.5 vs 37.6, 2: 36.1 vs 50.0, 4: 61.8 vs 75.1, 8: 110.8 vs 129.0 and
    # 109.9 vs 125.3, 10: 132.7 vs 158.2, 12: 170.8 vs 178.1 and 166.9 vs 175.2, 13: 179.8 vs 181.8 (one
    # job, 1 %), 14: 192.7 vs 189.3; from 15 tokens at top-11 the down's h no longer fits a block and runs
    # on CUDA cores (271.4 vs 204.7). With its parts of 256 + 128 (4a17ac0; "h200-s42" runs 1 and 2, one
    # machine): 12: 159.7 vs 175.4 and 159.0 vs 173.4, 13: 173.1 vs 181.7 and 173.5 vs 182.0 (5 %), 14:
    # 191.4 vs 189.0 and 191.7 vs 189.3 (1 % slower). The cap is 13, the last count both jobs with the
    # peer since 4a17ac0 found faster. (12 before 4a17ac0; with the down on CUDA cores 2: "h200-s39" run 6.)
    Cap("sm_90", FP8_BLOCK128, 384, 13, "H200 crossover vs SGLang Triton measured 2026-12-04 at I=384 (faster at 1-13 "
        "tokens, 12-13 in two jobs; slower from 14)", hidden_max=4096),
    # I=512 at D=4096 (D4096-E513-K11-I512) against SGLang's own FusedMoE with the kernels off ("h200-s43" run 3,
    # us kernel vs fallback; ../shared/peer does not model SGLang's configuration for this I): 1 token 26.7 vs
    # 36.9, 2: 42.3 vs 50.3, 4: 72.2 vs 80.4, 5: 89.8 vs 102.5, 6: 103.6 vs 110.6 (7 %), 8: 138.2 vs 135.2
    # (2 % slower; 138.6 vs 134.9 in run 2). The cap is 6; 7 is not measured.
    Cap("sm_90", FP8_BLOCK128, 512, 6, "H200 vs SGLang's layer measured 2026-12-04 at I=512 (faster at 1-6 tokens, "
        "slower at 8 in two jobs)", hidden_max=4096),
    Cap("sm_90", FP8_BLOCK128, None, 0, "H200: not measured against SGLang Triton at this I"),
    Cap("sm_90", MXFP4, None, 48, "no SGLang MXFP4 runner on CUDA; kernel-only path"),
)

SUPPORTED_ARCHS = ("gfx950", "sm_90")


def token_cap(arch: str, weight_format: str, inter: int, top_k: int, hidden: Optional[int] = None,
              experts: Optional[int] = None, layout: Optional[str] = None) -> tuple:
    """-> (cap, source). A cap measured on this machine for exactly this shape (SGLANG_SMALLM_CAPS_FILE,
    measured_caps.py; needs hidden, experts and layout) comes first, then the first matching CAPS row. The
    kernel's pair limit bounds every cap. A row with hidden_max applies only where the hidden size is given and
    within it; one with slots_max only up to that many slots. SGLANG_SMALLM_MAX_TOKENS, where set below the cap,
    lowers it (user_limit)."""
    measured = measured_caps.lookup(arch, weight_format, layout, hidden, inter, experts, top_k)
    if measured is not None:
        return user_limit(min(measured[0], MAX_PAIRS // max(top_k, 1)), measured[1])
    return user_limit(*builtin_cap(arch, weight_format, inter, top_k, hidden))


def builtin_cap(arch: str, weight_format: str, inter: int, top_k: int, hidden: Optional[int] = None) -> tuple:
    """(cap, source) of the first matching CAPS row, within the kernel's pair limit; (0, why) where none matches."""
    for c in CAPS:
        if (arch.startswith(c.arch) and c.weight_format == weight_format and (c.inter_max is None or inter <= c.inter_max)
                and (c.hidden_max is None or (hidden is not None and hidden <= c.hidden_max))
                and (c.slots_max is None or top_k <= c.slots_max)):
            return min(c.tokens, MAX_PAIRS // max(top_k, 1)), c.source
    return 0, f"no cap entry for {arch}/{weight_format}"


def user_max_tokens() -> Optional[int]:
    """SGLANG_SMALLM_MAX_TOKENS as a whole number, or None where it is unset or empty. A value it does not
    take is refused at startup (envs.check); here it reads as unset."""
    v = envs.MAX_TOKENS.get().strip()
    return int(v) if v.isdigit() else None


def user_limit(cap: int, source: str) -> tuple:
    """(cap, source) lowered to SGLANG_SMALLM_MAX_TOKENS where that is set and below cap."""
    n = user_max_tokens()
    if n is not None and n < cap:
        return n, f"{envs.MAX_TOKENS.name}={n}, under the measured cap {cap}: {source}"
    return cap, source


def call_cap(call: MoeCall, arch: str) -> tuple:
    """token_cap for a call's format and shape: -> (cap, source)."""
    return token_cap(arch, call.weight_format, call.inter, call.top_k, call.hidden, call.num_experts, call.layout)


def shape_cap(arch: str, weight_format: str, shape, layout: Optional[str] = None) -> int:
    """token_cap's cap for a shapes.MoeShape (selftest and bench; a measured cap only where layout is given)."""
    return token_cap(arch, weight_format, shape.inter, shape.slots, shape.hidden, shape.experts, layout)[0]


def shape_problem(hidden: int, inter: int, experts: int, top_k: int) -> str:
    """Why the kernel cannot take a call of this shape at any token count (its per-call limits), or "".
    The gate's "shape" rule, and the check of a shape written for `bench`/`selftest` (shapes.py)."""
    if hidden <= 0 or inter <= 0 or hidden % 128 or inter % 128:
        return f"D ({hidden}) and I ({inter}) must be positive multiples of 128"
    if inter > MAX_INTER:
        return f"I ({inter}) is over the kernel's {MAX_INTER}"
    if not 0 < experts <= MAX_EXPERTS:
        return f"E ({experts}) must be 1 to the kernel's {MAX_EXPERTS} experts"
    if not 0 < top_k <= MAX_SLOTS:
        return f"K ({top_k}) must be 1 to {MAX_SLOTS} slots"
    return ""


@dataclass(frozen=True)
class Rule:
    name: str
    passes: Callable[[MoeCall, str], bool]   # (call, device arch) -> ok
    reason: Callable[[MoeCall, str], str]    # why it failed, for logs and doctor


def _contig(*ts) -> bool:
    return all(t is not None and t.is_contiguous() for t in ts)


def _fp8_scales_ok(c: MoeCall) -> bool:
    if c.w13_scale is None or c.w2_scale is None:
        return False
    E, I, D = c.num_experts, c.inter_stored, c.hidden
    return (c.w13_scale.dtype == torch.float32 and c.w2_scale.dtype == torch.float32
            and tuple(c.w13_scale.shape) == (E, 2 * I // 128, D // 128)
            and tuple(c.w2_scale.shape) == (E, D // 128, I // 128)
            and _contig(c.w13_scale, c.w2_scale))


def e8m0_cols(n: int, layout: str) -> int:
    """Columns an MXFP4 scale matrix of n e8m0 values a row takes in `layout`: AITER's e8m0_shuffle pads them to a
    multiple of 8 (I = 128: 4 -> 8); row-major keeps n."""
    return (n + 7) // 8 * 8 if layout == SHUFFLE16 else n


def _mxfp4_scales_ok(c: MoeCall) -> bool:
    if c.w13_scale is None or c.w2_scale is None:
        return False
    E, I, D = c.num_experts, c.inter_stored, c.hidden
    return (c.w13_scale.element_size() == 1 and c.w2_scale.element_size() == 1
            and c.w13_scale.numel() >= E * 2 * I * e8m0_cols(D // 32, c.layout)
            and c.w2_scale.numel() >= E * D * e8m0_cols(I // 32, c.layout)
            and _contig(c.w13_scale, c.w2_scale))


def _weights_ok(c: MoeCall) -> bool:
    E, I, D = c.num_experts, c.inter_stored, c.hidden
    div = 1 if c.weight_format == FP8_BLOCK128 else 2
    return (c.w13.element_size() == 1 and c.w2.element_size() == 1 and c.w13.dim() == 3 and c.w2.dim() == 3
            and c.w13.shape[2] == D // div and tuple(c.w2.shape) == (E, D, I // div) and _contig(c.w13, c.w2))


def _alignments(c: MoeCall) -> list:
    """(name, tensor, bytes): what the kernel reads in wider pieces than its elements. x and the weights
    in 16-byte vectors; row-major MXFP4 scales four e8m0 bytes at a time (the tensor-core down)."""
    need = [("x", c.x, 16), ("w13", c.w13, 16), ("w2", c.w2, 16)]
    if c.weight_format == MXFP4 and c.layout == ROW_MAJOR:
        need += [("w13_scale", c.w13_scale, 4), ("w2_scale", c.w2_scale, 4)]
    return need


def _misaligned(c: MoeCall) -> list:
    """'name (N bytes)' for each tensor of _alignments whose data is not aligned that far (meta
    tensors, as `doctor` builds them, have no address and count as aligned)."""
    return [f"{n} ({b} bytes)" for n, t, b in _alignments(c)
            if t is not None and t.device.type != "meta" and t.data_ptr() % b]


def _fp8_dtype_ok(c: MoeCall) -> bool:
    return c.weight_format != FP8_BLOCK128 or c.w13.dtype in (torch.float8_e4m3fn, torch.uint8)


RULES: Sequence[Rule] = (
    Rule("device", lambda c, a: any(a.startswith(s) for s in SUPPORTED_ARCHS),
         lambda c, a: f"device arch {a} has no compiled small-M kernel (supported: {', '.join(SUPPORTED_ARCHS)})"),
    Rule("weight_format", lambda c, a: c.weight_format in (FP8_BLOCK128, MXFP4),
         lambda c, a: f"weight format {c.weight_format} is not FP8 128x128 block-scale or MXFP4"),
    Rule("fp8_dtype", lambda c, a: _fp8_dtype_ok(c),
         lambda c, a: f"fp8 weights are {c.w13.dtype}; the kernel decodes OCP e4m3fn (e4m3fnuz is gfx942's format)"),
    Rule("layout", lambda c, a: c.layout in (ROW_MAJOR, SHUFFLE16),
         lambda c, a: c.layout if c.layout.startswith("unrecognised") else
         f"weight layout {c.layout} is not row-major or AITER shuffle (16,16)"),
    Rule("activation", lambda c, a: c.activation == "silu" and c.is_gated,
         lambda c, a: f"activation {c.activation} (gated={c.is_gated}) is not gated SiLU"),
    Rule("swiglu_params", lambda c, a: not c.swiglu_params,
         lambda c, a: "gemm1 alpha / clamp / swiglu limit are set (plain SiLU only)"),
    Rule("bias", lambda c, a: not c.has_bias, lambda c, a: "expert biases are set"),
    Rule("expert_mask", lambda c, a: not c.has_expert_mask, lambda c, a: "an expert mask is set (expert parallelism)"),
    Rule("router_weight_on_input", lambda c, a: not c.apply_router_weight_on_input,
         lambda c, a: "apply_router_weight_on_input is set"),
    Rule("no_combine", lambda c, a: not c.no_combine, lambda c, a: "no_combine is set (per-slot outputs requested)"),
    Rule("x", lambda c, a: c.x.dtype == torch.bfloat16 and c.x.dim() == 2 and c.x.is_contiguous(),
         lambda c, a: f"activations are {c.x.dtype} {tuple(c.x.shape)} contiguous={c.x.is_contiguous()} (need contiguous bf16 [T, D])"),
    Rule("topk", lambda c, a: (c.topk_ids.dtype == torch.int32 and c.topk_weights.dtype == torch.float32
                               and c.topk_ids.shape == c.topk_weights.shape and _contig(c.topk_ids, c.topk_weights)),
         lambda c, a: f"topk ids {c.topk_ids.dtype} / weights {c.topk_weights.dtype} not contiguous int32 / fp32 of one shape"),
    Rule("inter_pad", lambda c, a: c.inter_pad == 0 or (0 < c.inter_pad < c.inter_stored and c.inter_stored % 128 == 0),
         lambda c, a: (f"intermediate padding {c.inter_pad} of {c.inter_stored} stored (the kernel reads padded weights "
                       "whose stored size is a multiple of 128 and whose computed size is positive)")),
    Rule("weights", lambda c, a: _weights_ok(c),
         lambda c, a: f"weights {tuple(c.w13.shape)} {c.w13.dtype} / {tuple(c.w2.shape)} are not contiguous packed [E, 2I, D] / [E, D, I]"),
    Rule("alignment", lambda c, a: not _misaligned(c),
         lambda c, a: f"{', '.join(_misaligned(c))} not aligned (the kernel reads x and the weights in 16-byte "
                      "vectors, row-major MXFP4 scales 4 bytes at a time)"),
    Rule("scales", lambda c, a: _fp8_scales_ok(c) if c.weight_format == FP8_BLOCK128 else _mxfp4_scales_ok(c),
         lambda c, a: (f"scales {None if c.w13_scale is None else tuple(c.w13_scale.shape)} / "
                       f"{None if c.w2_scale is None else tuple(c.w2_scale.shape)} are not contiguous "
                       + ("fp32 128x128 block scales (per-channel or per-tensor?)" if c.weight_format == FP8_BLOCK128
                          else "e8m0 per-32 scales"))),
    Rule("block_shape", lambda c, a: c.weight_format != FP8_BLOCK128 or tuple(c.block_shape or ()) == (128, 128),
         lambda c, a: f"block shape {c.block_shape} is not 128x128"),
    Rule("shape", lambda c, a: not shape_problem(c.hidden, c.inter, c.num_experts, c.top_k),
         lambda c, a: (f"shape D={c.hidden} I={c.inter} E={c.num_experts} K={c.top_k}: "
                       f"{shape_problem(c.hidden, c.inter, c.num_experts, c.top_k)}")),
    Rule("tokens", lambda c, a: c.num_tokens <= call_cap(c, a)[0],
         lambda c, a: "{} tokens > cap {} ({})".format(c.num_tokens, *call_cap(c, a))),
)


def evaluate(call: MoeCall, arch: str) -> tuple:
    """-> (eligible, reason). Reason names the first failing rule, or the cap that admitted it."""
    for rule in RULES:
        if not rule.passes(call, arch):
            return False, f"{rule.name}: {rule.reason(call, arch)}"
    cap, source = call_cap(call, arch)
    return True, f"{call.num_tokens} tokens <= cap {cap} ({source})"


def default_layout(arch: str) -> str:
    """The weight layout SGLang gives its runner on this arch: AITER's shuffle on gfx, row-major elsewhere."""
    return SHUFFLE16 if arch.startswith("gfx") else ROW_MAJOR


def decision_table(arch: str, weight_format: str, hidden: int, inter: int, experts: int, top_k: int,
                   tokens: Sequence[int], layout: Optional[str] = None) -> list:
    """For doctor: [(tokens, eligible, reason)] for a model shape, using meta tensors. layout: the weights'
    (default: default_layout(arch))."""
    rows = []
    div = 1 if weight_format == FP8_BLOCK128 else 2
    meta = "meta"
    layout = layout or default_layout(arch)
    for t in tokens:
        if weight_format == FP8_BLOCK128:
            s13 = torch.empty(experts, 2 * inter // 128, hidden // 128, device=meta)
            s2 = torch.empty(experts, hidden // 128, inter // 128, device=meta)
        else:
            s13 = torch.empty(experts, 2 * inter, e8m0_cols(hidden // 32, layout), dtype=torch.uint8, device=meta)
            s2 = torch.empty(experts, hidden, e8m0_cols(inter // 32, layout), dtype=torch.uint8, device=meta)
        call = MoeCall(
            x=torch.empty(t, hidden, dtype=torch.bfloat16, device=meta),
            w13=torch.empty(experts, 2 * inter, hidden // div, dtype=torch.uint8, device=meta),
            w2=torch.empty(experts, hidden, inter // div, dtype=torch.uint8, device=meta),
            w13_scale=s13, w2_scale=s2,
            topk_weights=torch.empty(t, top_k, device=meta),
            topk_ids=torch.empty(t, top_k, dtype=torch.int32, device=meta),
            weight_format=weight_format, layout=layout)
        ok, reason = evaluate(call, arch)
        rows.append((t, ok, reason))
    return rows


_ARCH_NAMES = {"gfx950": "MI355X (gfx950)", "sm_90": "H200 (sm_90)"}


def _bound(value: Optional[int], what: str) -> str:
    return f"{what} <= {value}" if value is not None else f"any {what}"


def caps_markdown_table(caps: Sequence[Cap] = CAPS) -> str:
    """The README's table of built-in token caps (between its `caps` markers; tests/test_readme.py keeps them
    equal), row by row in the order the gate reads them: the first row that matches a call's shape gives its cap."""
    rows = ["| device | format | I (per rank) | D | slots | cap (tokens) | why |", "|---|---|---|---|---|---|---|"]
    for c in caps:
        rows.append(f"| {_ARCH_NAMES.get(c.arch, c.arch)} | {c.weight_format} | {_bound(c.inter_max, 'I')} | "
                    f"{_bound(c.hidden_max, 'D')} | {_bound(c.slots_max, 'K')} | {c.tokens} | {c.source} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m sglang_smallm_plugin.gate prints the README's table of built-in caps
    print(caps_markdown_table())
