"""Sort benchmark (`sglang-smallm bench --sort`): µs per call of our sort and of the sort the
fallback backend uses, on the same device, in the same run, inside CUDA graphs.

Fallback sorts: on CUDA, SGLang's `moe_align_block_size` (what its Triton MoE runner calls); on
ROCm, AITER's `moe_sorting` (with its MXFP8 quantisation when fused). Where one cannot be
imported, the table says so instead of inventing a number.

Byte model per call: ids + weights in, sorted ids / weights / block ids out over the padded
length (plus, fused, the activations in, e4m3 values and scales out); the floor is that over the
copy bandwidth, but a sort this small is launch- and latency-bound, which the table shows.
"""

import time

import torch

from . import kernels, sort_gate
from .calls import AITER_SORT, TRITON_SORT, SortCall
from .sort_selftest import make_activations, make_routing
from .timing import graph_us

DEFAULT_CASES = (
    # (label, E, K, block, tokens)
    ("qwen35", 513, 11, 16, (1, 2, 3, 4, 5, 8, 16)),
    ("minimax-m3", 129, 5, 16, (1, 4, 8, 12, 13, 20, 32, 51)),
)


def _time(fn, reps=50, rounds=5) -> float:
    """Median µs per call of fn() captured `reps` times in one CUDA graph."""
    def body():
        for _ in range(reps):
            fn()

    return graph_us(body, reps, replays=1, rounds=rounds)


def fallback_sort(output_format: str):
    """-> (callable(ids, weights, E, block, x) or None, label)."""
    if output_format == TRITON_SORT:
        try:
            import importlib

            mab = importlib.import_module("sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size")
        except Exception as e:  # noqa: BLE001 - any import failure means "not measurable here"
            return None, f"SGLang moe_align_block_size not importable ({type(e).__name__}: {e})"
        fn = getattr(mab.moe_align_block_size, "__wrapped__", mab.moe_align_block_size)
        return _with_jit_fallback(fn), "SGLang moe_align_block_size"
    try:
        from aiter.fused_moe import moe_sorting
    except Exception as e:  # noqa: BLE001
        return None, f"AITER moe_sorting not importable ({type(e).__name__})"

    return (lambda ids, w, E, bs, x: moe_sorting(ids, w, E, x.shape[1] if x is not None else 4096,
                                                 torch.bfloat16, bs)), "AITER moe_sorting"


def _with_jit_fallback(fn):
    """SGLang's wrapper; where its compiled align op is missing (an import-only sgl_kernel, as on the
    H200 image), the same op's JIT build with the wrapper's own buffer sizes (as ../shared/peer does)."""
    state = {}

    def call(ids, w, E, bs, x):
        if not state.get("jit"):
            try:
                return fn(ids, bs, E)
            except Exception as e:  # noqa: BLE001
                if ids.numel() <= 64:
                    raise
                from sglang.kernels.ops.moe.moe_align import moe_align_block_size as jit_align

                state["jit"] = jit_align
                print(f"  (SGLang's align op unavailable: {type(e).__name__}; using its JIT build above 64 pairs)")
        if ids.numel() <= 64:
            return fn(ids, bs, E)
        from .reference.sorting import triton_buffer_sizes

        n, blocks = triton_buffer_sizes(ids.numel(), E, bs)
        s = torch.empty(n, dtype=torch.int32, device=ids.device)
        e = torch.empty(blocks, dtype=torch.int32, device=ids.device)
        t = torch.empty(1, dtype=torch.int32, device=ids.device)
        c = torch.empty(E + 2, dtype=torch.int32, device=ids.device)
        state["jit"](ids, E + 1, bs, s, e, t, c, True)
        return s, e, t

    return call


def agree_with_fallback(fb, E, K, T, bs, routing, seed) -> str:
    """Our Triton-format output against SGLang's own on the same routing: the padded count, the
    expert id of every used block and each expert's set of pair ids must be equal."""
    ids, _ = make_routing(T, K, E, routing, seed, "cuda")
    call = SortCall(topk_ids=ids, topk_weights=None, num_experts=E, block_size=bs, output_format=TRITON_SORT)
    path = sort_gate.kernel_path(call)
    if path is None:
        return "skipped (no path)"
    ours = kernels.run_sort(call, path)
    sid, eid, n = (t.cpu() for t in fb(ids, None, E, bs, None))
    n_ours = int(ours.num_valid[0])
    if int(n[0]) != n_ours:
        return f"padded count {n_ours} != SGLang's {int(n[0])}"
    if not torch.equal(ours.expert_ids.cpu()[:n_ours // bs], eid[:n_ours // bs]):
        return "expert ids per block differ"
    # SGLang's order inside an expert's run depends on atomics, so compare each run's set of ids.
    o, e = ours.sorted_ids.cpu(), ours.expert_ids.cpu()
    start = 0
    for b in range(1, n_ours // bs + 1):
        if b == n_ours // bs or int(e[b]) != int(e[start]):
            lo, hi = start * bs, b * bs
            if sorted(o[lo:hi].tolist()) != sorted(sid[lo:hi].tolist()):
                return f"run of expert {int(e[start])} (blocks {start}..{b - 1}) differs"
            start = b
    return "same"


def run(cases=DEFAULT_CASES, formats=(TRITON_SORT, AITER_SORT), echo=print) -> list:
    info = kernels.require_gpu_kernels("sort bench")
    echo(f"sort bench on {info.name} ({info.arch}) {time.strftime('%Y-%m-%d %H:%M:%S')}; CUDA graphs of 50 calls")
    rows = []
    for fmt in formats:
        fb, fb_label = fallback_sort(fmt)
        echo(f"fallback for {fmt}: {fb_label}")
        if fb is not None and fmt == TRITON_SORT:
            checks = [(E, K, T, bs, r, seed) for E, K, bs, toks in ((513, 11, 16, (1, 2)), (129, 5, 16, (1, 6, 8, 20, 51)),
                                                                    (129, 5, 64, (13, 51)))
                      for T in toks for r in ("random", "one_expert", "padded") for seed in range(3)]
            verdicts = [agree_with_fallback(fb, *c) for c in checks]
            bad = [(c, v) for c, v in zip(checks, verdicts) if v != "same"]
            echo(f"agreement with {fb_label}'s own output (E, K, T, block, routing, seed): "
                 f"{verdicts.count('same')}/{len(checks)} same")
            for c, v in bad:
                echo(f"  differs: {c}: {v}")
        for label, E, K, bs, tokens in cases:
            for T in tokens:
                for fused in ((False, True) if fmt == AITER_SORT else (False,)):
                    ids, w = make_routing(T, K, E, "random", 0, "cuda")
                    bsz = 32 if fused else bs
                    call = SortCall(topk_ids=ids, topk_weights=w if fmt == AITER_SORT else None, num_experts=E,
                                    block_size=bsz, output_format=fmt)
                    if fused:
                        call.fuse_mxfp8_of = make_activations(T, 4096, 0, "cuda")
                    path, _ = sort_gate.choose_path(call, "gfx950")  # the gfx950 rule table's path
                    here, _ = sort_gate.choose_path(call, info.arch)  # what this device's gate does
                    forced = path or sort_gate.kernel_path(call)
                    ours = None
                    if forced is not None:
                        buf = kernels.sort_buffers(call)
                        ours = _time(lambda: kernels.run_sort(call, forced, buf))
                    theirs, note = None, ""
                    if fb is not None and not fused:
                        try:
                            fb(ids, w, E, bsz, None)  # eager first: picks the JIT build if needed
                            theirs = _time(lambda: fb(ids, w, E, bsz, None))
                        except Exception as e:  # noqa: BLE001
                            note = f"fallback failed: {type(e).__name__}: {str(e)[:80]}"
                    elif fused:
                        note = "fused MXFP8 (no standalone fallback here)"
                    rows.append(dict(format=fmt, shape=label, E=E, K=K, block=bsz, tokens=T, pairs=T * K,
                                     fused=fused, path=forced or "-", gate=path or "hand over",
                                     gate_here=here or "hand over",
                                     ours_us=ours, fallback_us=theirs, note=note))
    echo(f"\n| format | shape | E | K | block | T | pairs | path timed | gfx950 gate | {info.arch} gate | ours µs | "
         "fallback µs | note |")
    echo("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        f = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
        echo(f"| {r['format']}{'+mxfp8' if r['fused'] else ''} | {r['shape']} | {r['E']} | {r['K']} | {r['block']} | "
             f"{r['tokens']} | {r['pairs']} | {r['path']} | {r['gate']} | {r['gate_here']} | {f(r['ours_us'])} | {f(r['fallback_us'])} | "
             f"{r['note']} |")
    return rows
