"""Numerics checks of the compiled kernels on whatever GPU is present (`sglang-smallm selftest`).

Per case: fresh random weights, activations and routing (seeded); output buffer poisoned with NaN
before each launch; relative L2 error against the pure-torch reference (fp32) within the table
tolerance; every element written (no NaN left); bit-identical output on a second launch and on
a CUDA-graph replay. On the gfx950 emulation (`--emulate`) also the weight loads counted against the byte model
('reads': each touched expert's real rows read once, nothing else; reference/reads.py). With `pad` (`--pad N`): the layer as SGLang pads it for AITER (N more of I after each of
gate and up and along w2's K, Quark MXFP4's layer.intermediate_pad), the padding poisoned (NaN or extreme
values), and the output bit-identical to the unpadded layer's: the kernel never reads the padding.
"""

from dataclasses import dataclass
from typing import Optional

import torch

from . import gate, kernels
from .calls import FP8_BLOCK128, ROW_MAJOR, SHUFFLE16
from .shapes import SHAPES, shape_by_name
from .testdata import UnsupportedLayout, layout_refusal, make_call, make_padded_weights, make_weights, reference_of
from .timing import capture
from .tolerances import moe_tolerance, rel_l2


@dataclass
class CaseResult:
    shape: str
    weight_format: str
    layout: str
    tokens: int
    seed: int
    rel_err: float
    all_written: bool
    deterministic: bool
    graph_identical: Optional[bool]  # None: not checked (the gfx950 emulation has no CUDA graphs)
    tol: float
    pad_identical: bool = True  # with pad: bit-identical to the same layer unpadded
    reads: Optional[str] = None  # emulation only: "" where the weight loads match the byte model, else what differs

    @property
    def ok(self) -> bool:
        return (self.rel_err <= self.tol and self.all_written and self.deterministic
                and self.graph_identical is not False and self.pad_identical and not self.reads)


def default_tokens(shape, weight_format, arch, layout=None) -> list:
    """1, 3, 8 and the device's cap (a cap measured on this machine where SGLANG_SMALLM_CAPS_FILE has one for the
    shape and layout); where that cap is below 8 (H200), also the kernel's own range up to 48 tokens."""
    cap = gate.shape_cap(arch, weight_format, shape, layout)
    top = cap if cap >= 8 else min(48, gate.MAX_PAIRS // shape.slots)
    return sorted({t for t in (1, 3, 8, cap, top) if 0 < t <= top})


def check_case(shape, weight_format, layout, tokens, seed, device, weights=None, pad=0, ops=None,
               padded=None) -> CaseResult:
    """One case on the GPU's kernels, or with `ops` on another build of them (the gfx950 emulation on CPU
    tensors, emulated.load(): everything but the CUDA-graph replay is checked). With `pad`: `padded` is
    make_padded_weights' result for this seed (made here where not given)."""
    call = make_call(shape, weight_format, layout, tokens, seed, device, weights)
    pad_identical = True
    if pad:
        import dataclasses

        plain = torch.full_like(call.x, float("nan"))
        kernels.run_moe(call, out=plain, ops=ops)
        padded = padded or make_padded_weights(shape, weight_format, layout, seed, device, pad)
        call = dataclasses.replace(call, **padded, inter_pad=pad)
    ref = reference_of(call)
    out = torch.full_like(call.x, float("nan"))
    kernels.run_moe(call, out=out, ops=ops)
    if ops is None:
        torch.cuda.synchronize()
    written = bool(out.isfinite().all())
    err = rel_l2(out.float(), ref.float())
    again = torch.full_like(call.x, float("nan"))
    reads = None
    if ops is None:
        kernels.run_moe(call, out=again)
    else:  # the emulation counts the second launch's weight loads: the byte model (reference/reads.py)
        from . import emulated

        reads = emulated.run_checking_reads(ops, call, out=again)[0] or ""
    graph_identical = None
    if ops is None:  # CUDA graph capture + replay into a poisoned buffer
        gout = torch.full_like(call.x, float("nan"))
        graph = capture(lambda: kernels.run_moe(call, out=gout))
        gout.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        graph_identical = bool(torch.equal(out, gout))
    tol = moe_tolerance(weight_format)
    if pad:
        pad_identical = bool(torch.equal(out, plain))
    return CaseResult(shape.name, weight_format, layout, tokens, seed, err, written,
                      bool(torch.equal(out, again)), graph_identical, tol, pad_identical, reads)


def _flag(v: Optional[bool]) -> str:
    return "-" if v is None else str(v)


def run(formats=(FP8_BLOCK128,), shapes=tuple(SHAPES), layouts=(ROW_MAJOR, SHUFFLE16), seeds=range(5),
        tokens=None, device="cuda", echo=print, pad=0, emulate=False) -> list:
    """The matrix on this GPU, or with `emulate` on the gfx950 build run by this CPU (emulated.py; the caps
    and defaults of gfx950; no CUDA graph: the graph column says '-'). Raises UnsupportedLayout, before
    running anything, where a requested shape cannot be laid out as asked (testdata.layout_refusal)."""
    refused = [f"{name} {fmt} {layout}: {why}" for fmt in formats for name in shapes for layout in layouts
               if (why := layout_refusal(shape_by_name(name), fmt, layout, pad))]
    if refused:
        raise UnsupportedLayout("; ".join(refused))
    ops = None
    if emulate:
        from . import emulated

        ops, device, arch = emulated.load(), "cpu", emulated.ARCH
        echo(f"selftest on {emulated.describe()}; {kernels.variant_note()}")
    else:
        if not torch.cuda.is_available():
            raise SystemExit("selftest needs a GPU (torch.cuda.is_available() is False); "
                             "`--emulate` runs the gfx950 build on this CPU instead")
        mod, why = kernels.load_compiled()
        if mod is None:
            raise SystemExit(f"selftest: {why}")
        arch = kernels.device_info(device).arch
        echo(f"selftest on {kernels.device_info(device).name} ({arch}); kernels: {why}; {kernels.variant_note()}")
    results = []
    if pad:
        echo(f"layers padded by {pad} of I (SGLang's padding for AITER), the padding poisoned; 'pad=': output "
             "bit-identical to the unpadded layer's")
    echo(f"{'shape':16} {'format':12} {'layout':12} {'T':>3} {'seeds':>5} {'max rel err':>11} {'tol':>7} "
         f"{'written':>7} {'determ':>6} {'graph':>5}{' pad=' if pad else ''}{' reads' if emulate else ''}  ok")
    for fmt in formats:
        for name in shapes:
            shape = shape_by_name(name)
            for layout in layouts:
                toks = tokens or default_tokens(shape, fmt, arch, layout)
                per_t = {t: [] for t in toks}
                for seed in seeds:
                    w = make_weights(shape, fmt, layout, seed, device)
                    pw = make_padded_weights(shape, fmt, layout, seed, device, pad) if pad else None
                    for t in toks:
                        per_t[t].append(check_case(shape, fmt, layout, t, seed, device, w, pad=pad, ops=ops,
                                                   padded=pw))
                    del w, pw
                for t, rs in per_t.items():
                    results.extend(rs)
                    echo(f"{name:16} {fmt:12} {layout:12} {t:3d} {len(rs):5d} {max(r.rel_err for r in rs):11.2e} "
                         f"{rs[0].tol:7.0e} {all(r.all_written for r in rs)!s:>7} {all(r.deterministic for r in rs)!s:>6} "
                         f"{_flag(None if rs[0].graph_identical is None else all(r.graph_identical for r in rs)):>5}"
                         f"{(' ' + str(all(r.pad_identical for r in rs))[0]) if pad else ''}"
                         f"{(' ' + format(str(not any(r.reads for r in rs)), '>5')) if emulate else ''}  "
                         f"{'PASS' if all(r.ok for r in rs) else 'FAIL'}")
                    for why in sorted({r.reads for r in rs if r.reads}):
                        echo(f"    weight reads: {why}")
    bad = [r for r in results if not r.ok]
    echo(f"selftest: {len(results) - len(bad)}/{len(results)} cases pass")
    return results
