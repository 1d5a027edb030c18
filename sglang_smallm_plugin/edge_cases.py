"""Inputs at the edges of what the MoE kernels accept, checked against the reference on the GPU
(`sglang-smallm selftest --what edge`): activation ranges that f16 alone could not hold (the
gate/up on tensor cores scales x per token), weight scales far apart inside a row (the MXFP4
tensor-core gate/up holds weights in f16 relative to the largest scale of each 128 values), routings
with invalid ids, a token with no valid slot (its output row must be exactly zero), one expert
taking many pairs of a call (pair chunking), and a routed scaling factor. Each case is a rule as data: a name, why it matters, and how it changes a
normal call.
"""

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch

from . import kernels
from .calls import FP8_BLOCK128, MXFP4, ROW_MAJOR
from .shapes import shape_by_name
from .testdata import make_call, reference_of
from .tolerances import moe_tolerance, rel_l2


def _scale_x(factor):
    return lambda call: dataclasses.replace(call, x=(call.x.float() * factor).to(torch.bfloat16))


def _outlier(call):
    x = call.x.clone()
    x[0, 7] = 3.0e4  # token 0: one huge value beside ordinary ones
    x[1, 100] = -6.0e4
    return dataclasses.replace(call, x=x)


def _invalid_ids(call):
    ids = call.topk_ids.clone()
    E = call.w13.shape[0]
    ids[0, 0] = -1
    ids[1, 2] = E        # out of range
    ids[2, 1] = E + 100
    ids[3, 0] = -1
    return dataclasses.replace(call, topk_ids=ids)


def _dead_token(call):
    ids = call.topk_ids.clone()
    ids[1, :] = -1
    return dataclasses.replace(call, topk_ids=ids)


def _crowded_expert(call):
    ids = call.topk_ids.clone()
    ids[:, :] = 3
    ids[:, 1::2] = 4  # every pair on expert 3 or 4: about T*K/2 pairs each
    return dataclasses.replace(call, topk_ids=ids)


def _wide_scales(call):
    """Weight scales 2^0..2^-32 apart inside a row: FP8 block scales times 2^-n, MXFP4 e8m0 bytes
    minus n (the tensor-core MXFP4 path holds a 128-value step in f16 relative to its largest
    scale: exact to 2^-24 apart, below that f16 subnormals or zero)."""
    g = torch.Generator(device=call.x.device).manual_seed(int(call.topk_ids.sum()))
    out = {}
    for name in ("w13_scale", "w2_scale"):
        s = getattr(call, name)
        n = torch.randint(0, 33, s.shape, device=s.device, generator=g)
        if call.weight_format == MXFP4:
            out[name] = (s.view(torch.uint8).to(torch.int32) - n).clamp(min=1).to(torch.uint8).view(s.dtype)
        else:
            out[name] = s * torch.exp2(-n.float())
    return dataclasses.replace(call, **out)


def _scaling(call):
    return dataclasses.replace(call, routed_scaling_factor=2.5)


@dataclass(frozen=True)
class EdgeCase:
    name: str
    why: str
    change: Callable
    zero_rows: tuple = ()  # output rows that must be exactly zero


EDGE_CASES = (
    EdgeCase("x_large", "|x| up to ~7e4, past the f16 range (x is scaled per token)", _scale_x(2.0 ** 14)),
    EdgeCase("x_tiny", "|x| ~1e-6, below the f16 normal range unless scaled", _scale_x(2.0 ** -20)),
    EdgeCase("x_outlier", "one huge value per token beside ordinary ones", _outlier),
    EdgeCase("invalid_ids", "ids -1, E and E+100 are skipped (as SGLang's expert-parallel -1)", _invalid_ids),
    EdgeCase("dead_token", "a token with no valid slot outputs zeros", _dead_token, zero_rows=(1,)),
    EdgeCase("crowded_expert", "two experts take every pair (chunked pair loops)", _crowded_expert),
    EdgeCase("wide_scales", "weight scales up to 2^32 apart inside a row", _wide_scales),
    EdgeCase("scaling_factor", "routed_scaling_factor 2.5 scales the output", _scaling),
)


@dataclass
class EdgeResult:
    case: str
    weight_format: str
    seed: int
    rel_err: float
    zero_rows_exact: bool
    tol: float

    @property
    def ok(self) -> bool:
        return self.rel_err <= self.tol and self.zero_rows_exact


def check_edge_case(case: EdgeCase, weight_format: str, seed: int, device="cuda", tokens=8,
                    shape_name="qwen35-tp8", ops=None) -> EdgeResult:
    call = case.change(make_call(shape_by_name(shape_name), weight_format, ROW_MAJOR, tokens, seed, device))
    ref = reference_of(call)
    out = torch.full_like(call.x, float("nan"))
    kernels.run_moe(call, out=out, ops=ops)
    if ops is None:
        torch.cuda.synchronize()
    zero_ok = all(bool((out[r] == 0).all()) for r in case.zero_rows)
    tol = moe_tolerance(weight_format)
    return EdgeResult(case.name, weight_format, seed, rel_l2(out.float(), ref.float()), zero_ok, tol)


def run(formats=(FP8_BLOCK128, MXFP4), seeds=range(2), device="cuda", echo=print, emulate=False) -> list:
    """Every case on this GPU, or with `emulate` on the gfx950 build run by this CPU (emulated.py)."""
    ops = None
    if emulate:
        from . import emulated

        ops, device = emulated.load(), "cpu"
        echo(f"edge cases on {emulated.describe()}; {kernels.variant_note()}")
    else:
        info = kernels.require_gpu_kernels("selftest --what edge")
        echo(f"edge cases on {info.name}; {kernels.variant_note()}")
    results = []
    for case in EDGE_CASES:
        for fmt in formats:
            rs = [check_edge_case(case, fmt, s, device, ops=ops) for s in seeds]
            results.extend(rs)
            echo(f"{case.name:16} {fmt:12} max rel err {max(r.rel_err for r in rs):9.2e} (tol {rs[0].tol:.0e})"
                 f"{'  zero rows exact' if case.zero_rows else ''}  {'PASS' if all(r.ok for r in rs) else 'FAIL'}"
                 f"  - {case.why}")
    bad = [r for r in results if not r.ok]
    echo(f"edge cases: {len(results) - len(bad)}/{len(results)} pass")
    return results
