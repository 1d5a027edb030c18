"""Exactness checks of the compiled sort on whatever GPU is present (part of `sglang-smallm selftest`).

Per case: a fresh seeded routing (random top-k, all pairs on one expert, a few hot experts, or
with invalid ids), output buffers poisoned before the launch; then exact equality with the
pure-torch reference of num_valid, the expert id of every block and every block's pairs and
weights; the fused MXFP8 values and sorted scales bit-exact; nothing written at or past the
padded length (the poison survives); AITER's moe_buf zeroed; bit-identical on a second launch
and on a CUDA-graph replay.
"""

import dataclasses
from dataclasses import dataclass

import torch

from . import kernels, sort_gate, timing
from .calls import AITER_SORT, TRITON_SORT, SortCall, SortOutput
from .providers.reference import ReferenceSortProvider

ROUTINGS = ("random", "one_expert", "hot4", "invalid", "padded")
POISON_I32 = 0x7BADBEEF
POISON_U8 = 0xAA

# (name, experts, slots, block, token range) of the matrix.
SORT_SHAPES = {
    "qwen35": (513, 11, 32),    # compact only: 1 .. 5 tokens (55 pairs <= 64)
    "minimax-m3": (129, 5, 32),  # compact 1 .. 12, distributed 13 .. 51 tokens
}


def make_routing(T, K, E, kind, seed, device):
    g = torch.Generator().manual_seed(seed)
    if kind == "one_expert":
        ids = torch.full((T, K), int(torch.randint(0, E, (1,), generator=g)), dtype=torch.int32)
    elif kind == "hot4":
        hot = torch.randperm(E, generator=g)[:4]
        ids = hot[torch.randint(0, 4, (T, K), generator=g)].to(torch.int32)
    else:
        ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(T)]).to(torch.int32)
        if kind in ("invalid", "padded"):  # padded: -1 ids only, as SGLang pads (dp attention)
            drop = torch.rand(T, K, generator=g) < 0.3
            ids = torch.where(drop, torch.full_like(ids, -1), ids)
            if kind == "invalid":
                ids[0, 0] = E + 3  # out of range on the high side too (mapped like -1)
            elif T > 1:
                ids[-1] = -1  # a whole padding token
    w = torch.rand(T, K, generator=g) + 0.01
    return ids.to(device), w.to(device)


def make_activations(T, D, seed, device):
    g = torch.Generator().manual_seed(10_000 + seed)
    x = torch.randn(T, D, generator=g) * torch.logspace(-3, 3, T).unsqueeze(1)
    x[0, :32] = 0  # an all-zero group
    return x.to(torch.bfloat16).to(device)


@dataclass
class SortResult:
    name: str
    ok: bool
    detail: str


def _poisoned(out: SortOutput) -> SortOutput:
    out.sorted_ids.fill_(POISON_I32)
    out.expert_ids.fill_(POISON_I32)
    out.num_valid.fill_(POISON_I32)
    if out.sorted_weights is not None:
        out.sorted_weights.fill_(float("nan"))
    if out.moe_buf is not None:
        out.moe_buf.fill_(float("nan"))
    if out.xq is not None:
        out.xq.view(torch.uint8).fill_(0x7F)  # e4m3fn NaN
    if out.xs is not None:
        out.xs.fill_(POISON_U8)
    return out


def _same(a, b) -> bool:
    """Bit-identical (so NaN poison left in an unwritten tail compares equal to itself)."""
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _outputs_equal(a: SortOutput, b: SortOutput) -> bool:
    return all(_same(getattr(a, f), getattr(b, f)) for f in
               ("sorted_ids", "expert_ids", "num_valid", "sorted_weights", "moe_buf", "xq", "xs"))


def _compare(call: SortCall, out: SortOutput) -> list:
    """-> list of failures (empty: exact)."""
    fails = []
    bs = call.block_size
    ref = ReferenceSortProvider().run(dataclasses.replace(
        call, topk_ids=call.topk_ids.cpu(), moe_buf=None,
        topk_weights=None if call.topk_weights is None else call.topk_weights.cpu(),
        fuse_mxfp8_of=None if call.fuse_mxfp8_of is None else call.fuse_mxfp8_of.cpu()))
    rid, reid, rnv, rw, rxq, rxs = (ref.sorted_ids, ref.expert_ids, ref.num_valid, ref.sorted_weights, ref.xq,
                                    ref.xs)
    nv = out.num_valid.cpu()
    if not torch.equal(nv, rnv):
        return [f"num_valid {nv.tolist()} != {rnv.tolist()}"]
    n = int(rnv[0])
    sid, eid = out.sorted_ids.cpu(), out.expert_ids.cpu()
    if not torch.equal(eid[:n // bs], reid[:n // bs]):
        fails.append("expert ids per block differ")
    for b in range(n // bs):  # each block's set of (id, weight) pairs; here also the same order
        s = slice(b * bs, (b + 1) * bs)
        if not torch.equal(sid[s], rid[s]):
            fails.append(f"block {b} ids differ")
            break
        if rw is not None and not torch.equal(out.sorted_weights.cpu()[s], rw[s]):
            fails.append(f"block {b} weights differ")
            break
    if not bool((sid[n:] == POISON_I32).all()):
        fails.append("sorted_ids written past the padded length")
    if not bool((eid[n // bs:] == POISON_I32).all()):
        fails.append("expert_ids written past the used blocks")
    if rw is not None and not bool(out.sorted_weights.cpu()[n:].isnan().all()):
        fails.append("sorted_weights written past the padded length")
    if rxq is not None:
        if not torch.equal(out.xq.cpu().view(torch.uint8), rxq.view(torch.uint8)):
            fails.append("MXFP8 values differ")
        xs, cols = out.xs.cpu().reshape(-1), out.xs.shape[1]
        if not torch.equal(xs[:n * cols], rxs.reshape(-1)[:n * cols]):
            fails.append("MXFP8 sorted scales differ")
        if not bool((xs[n * cols:] == POISON_U8).all()):
            fails.append("scale rows written past the padded length")
    if out.moe_buf is not None and not bool((out.moe_buf == 0).all()):
        fails.append("moe_buf not zeroed")
    return fails


def check_sort_case(E, K, T, block, output_format, routing, seed, device, fused=False, path=None,
                    ops=None) -> SortResult:
    """One case. `ops`: another build of the ops (the gfx950 emulation on CPU tensors; no CUDA graph there)."""
    ids, w = make_routing(T, K, E, routing, seed, device)
    call = SortCall(topk_ids=ids, topk_weights=w if output_format == AITER_SORT else None, num_experts=E,
                    block_size=block, output_format=output_format)
    D = 4096
    if fused:
        call.fuse_mxfp8_of = make_activations(T, D, seed, device)
    if output_format == AITER_SORT:
        call.moe_buf = ((T, D), torch.bfloat16)
    path = path or sort_gate.kernel_path(call)
    if path is None:
        return SortResult(_name(E, K, T, block, output_format, routing, seed, fused, "-"), False,
                          f"the sort kernel has no path for {call.num_pairs} pairs over {E} experts")
    name = _name(E, K, T, block, output_format, routing, seed, fused, path)
    out = kernels.run_sort(call, path, _poisoned(kernels.sort_buffers(call)), ops=ops)
    if ops is None:
        torch.cuda.synchronize()
    fails = _compare(call, out)
    again = kernels.run_sort(call, path, _poisoned(kernels.sort_buffers(call)), ops=ops)
    if not _outputs_equal(out, again):
        fails.append("second launch differs")
    if ops is None:
        g_out = _poisoned(kernels.sort_buffers(call))
        graph = timing.capture(lambda: kernels.run_sort(call, path, g_out))
        _poisoned(g_out)  # the capture's eager warm-up wrote it: only the replay may fill it now
        graph.replay()
        torch.cuda.synchronize()
        if not _outputs_equal(out, g_out):
            fails.append("graph replay differs")
    return SortResult(name, not fails, "; ".join(fails) or "exact")


def _name(E, K, T, block, fmt, routing, seed, fused, path):
    return f"sort E={E} K={K} T={T} bs={block} {fmt}{'+mxfp8' if fused else ''} {path} {routing} seed={seed}"


def cases(seeds=range(5)):
    """The issue's matrix: compact over Qwen3.5 (1 .. the compact limit), distributed over E=129
    (13 .. 51 tokens); both formats; the fused MXFP8 on the AITER format; every routing kind."""
    out = []
    E, K, bs = SORT_SHAPES["qwen35"]
    for T in range(1, sort_gate.compact_limit(bs) // K + 1):
        for fmt in (AITER_SORT, TRITON_SORT):
            for fused in ((False, True) if fmt == AITER_SORT else (False,)):
                for r in ROUTINGS:
                    for seed in seeds:
                        out.append((E, K, T, bs, fmt, r, seed, fused, "compact"))
    E, K, bs = SORT_SHAPES["minimax-m3"]
    for T in range(13, 52):  # every token count of the distributed range (65 .. 255 pairs)
        for fmt in (AITER_SORT, TRITON_SORT):
            for fused in ((False, True) if fmt == AITER_SORT else (False,)):
                for r in ROUTINGS:
                    for seed in seeds:
                        out.append((E, K, T, bs, fmt, r, seed, fused, "distributed"))
    for E, K, T in ((129, 5, 1), (129, 5, 6), (129, 5, 12), (513, 11, 1), (513, 11, 2)):
        for seed in seeds:  # compact at E=129 too, and SGLang Triton's small blocks (16)
            out.append((E, K, T, 16, TRITON_SORT, "random", seed, False, "compact"))
    return out


def run(seeds=range(5), device="cuda", echo=print, emulate=False) -> list:
    """Every case of `cases`; prints one line per (shape, tokens, format, path) group. With `emulate`: on the
    gfx950 build run by this CPU (emulated.py; no CUDA graph replay there)."""
    ops = None
    if emulate:
        from . import emulated

        ops, device = emulated.load(), "cpu"
        echo(f"sort selftest on {emulated.describe()}")
    elif not torch.cuda.is_available():
        raise SystemExit("sort selftest needs a GPU; `--emulate` runs the gfx950 build on this CPU instead")
    groups, results = {}, []
    for E, K, T, bs, fmt, r, seed, fused, path in cases(seeds):
        res = check_sort_case(E, K, T, bs, fmt, r, seed, device, fused=fused, path=path, ops=ops)
        results.append(res)
        groups.setdefault((E, K, T, bs, fmt + ("+mxfp8" if fused else ""), path), []).append(res)
        if not res.ok:
            echo(f"FAIL {res.name}: {res.detail}")
    echo(f"{'E':>4} {'K':>3} {'T':>3} {'bs':>3} {'format':12} {'path':12} {'cases':>5}  exact")
    for (E, K, T, bs, fmt, path), rs in groups.items():
        echo(f"{E:4d} {K:3d} {T:3d} {bs:3d} {fmt:12} {path:12} {len(rs):5d}  "
             f"{'PASS' if all(x.ok for x in rs) else 'FAIL'}")
    n_ok = sum(r.ok for r in results)
    echo(f"sort selftest: {n_ok}/{len(results)} cases exact (routings: {', '.join(ROUTINGS)}; "
         f"poisoned outputs, tails untouched, second launch{'' if emulate else ' and graph replay'} identical)")
    return results
