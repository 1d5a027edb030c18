"""Layer benchmark (`sglang-smallm bench`): the fused kernel inside CUDA graphs, rotating among
weight copies so the weights are not L2-resident, against the byte roofline from the copy
bandwidth and the read floor (a one-launch kernel that only reads the same experts' bytes, any
weight format), both measured in the same run. Beside the one-launch floor, two two-launch floors:
each expert's W13 bytes, then in a second launch its W2 bytes, stream-ordered or (CUDA) as a programmatic
dependent that reads only once the first grid has finished (the first launch of each call is
stream-ordered after the call before it, as the one-launch floor's is). The MoE's down kernel depends on
its gate/up kernel that way, so they show what the launch count alone costs, with no arithmetic.

Byte model per call (explicit, QuACK-style): distinct experts touched x (w13 + w2 + scale bytes)
+ activations in + output out + routing. Roofline = bytes / copy bandwidth, where the copy
bandwidth counts bytes read + written of a large device-to-device copy. Where the launcher runs a call
as consecutive calls of fewer tokens (kernels.launch_token_parts: x over the tensor-core stage), each part
reads its own tokens' experts, so an expert routed from two parts is read twice: the bench reports
those weight bytes too (call_weight_bytes), beside the floor's, which reads each expert once.
"""

import json
import os
import statistics
import time

import torch

from . import gate, kernels, measured_caps
from .calls import FP8_BLOCK128, ROW_MAJOR
from .shapes import shape_by_name
from .testdata import make_call, make_weights
from .timing import graph_us

DEFAULT_TOKENS = (1, 2, 4, 8, 12, 16, 20, 24, 32, 48)


def copy_bandwidth(device="cuda", nbytes=4 << 30, reps=20) -> float:
    src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(ts)


def touched_experts(ids, experts: int):
    """The distinct expert ids among `ids` that are weights read: those in [0, experts) (SGLang pads with -1)."""
    return torch.unique(ids[(ids >= 0) & (ids < experts)])


def call_bytes(call, shape, weight_format) -> tuple:
    nd = int(touched_experts(call.topk_ids, shape.experts).numel())
    act = call.x.numel() * 2 * 2 + call.topk_ids.numel() * 8
    return nd, nd * shape.expert_bytes(weight_format) + act


def time_graph(calls, reps=20, rounds=3) -> float:
    """Median µs per call of a CUDA graph that launches every call once."""
    outs = [torch.empty_like(c.x) for c in calls]

    def body():
        for c, o in zip(calls, outs):
            kernels.run_moe(c, out=o)

    return graph_us(body, len(calls), reps, rounds)


FLOOR_CHUNKS = (8, 16, 32, 64, 128)


def time_read_floor(flats, id_sets, expert_bytes, reps=20, rounds=3, split=None, dependent=False) -> float:
    """The read floor: median µs per call of launches that only read the touched experts' bytes
    (torch.ops.sglang_smallm.read_floor), best over a few chunkings, same graph discipline as the kernel.
    split=None: one launch reads each expert's bytes; split=b: a launch reads bytes [0, b) of each, a
    second the rest, stream-ordered or, dependent=True, as a programmatic dependent of the first."""
    sink = torch.zeros(1, dtype=torch.int32, device=flats[0].device)
    read = torch.ops.sglang_smallm.read_floor

    def body_for(chunks):
        def body():
            for f, ids in zip(flats, id_sets):
                if split is None:
                    read(f, ids, expert_bytes, chunks, sink)
                else:
                    read(f, ids, expert_bytes, chunks, sink, 0, split, False)
                    read(f, ids, expert_bytes, chunks, sink, split, expert_bytes - split, dependent)
        return body

    return min(graph_us(body_for(chunks), len(flats), reps, rounds) for chunks in FLOOR_CHUNKS)


def call_weight_bytes(topk_ids, shape, weight_format, parts) -> int:
    """Expert weight bytes the launcher's calls read for one call: per part of consecutive tokens
    (parts: their token counts, kernels.launch_token_parts), its distinct experts x expert bytes."""
    total, t0 = 0, 0
    for n in parts:
        total += int(touched_experts(topk_ids[t0:t0 + n], shape.experts).numel())
        t0 += n
    return total * shape.expert_bytes(weight_format)


def fallback_timer(shape, weight_format, weights, device, mode="off"):
    """SGLang's FusedMoE layers over the bench's row-major weight copies, timed with the kernels off (mode
    "off") or with the plugin handing every call over ("shipped"; sglang_integration/fallback_timing.py)."""
    from .sglang_integration.fallback_timing import FallbackTimer

    return FallbackTimer(shape, weight_format, weights, device, mode)


def sglang_ships_its_own_kernel() -> bool:
    """SGLang's own gfx950 small-M kernel is enabled here (sglang_integration/upstream_smallm.py)."""
    from .sglang_integration.upstream_smallm import enabled_here

    return enabled_here()


def time_fallback(rows, calls_of, timer, echo, key="fallback", label="fallback") -> None:
    """Each row's <key>_us and <key>_note from the timer (rows of one shape); a line per token count
    with a time, the reason once where there is none."""
    said = False
    for row in rows:
        us, note = timer.time_us(calls_of[row["tokens"]])
        row.update({f"{key}_us": us, f"{key}_note": note})
        if us is not None:
            echo(f"{row['shape']:14} {row['format']:12} {row['layout']:12} T={row['tokens']:3d} {label} {us:7.1f} us "
                 f"({us / row['kernel_us']:4.2f}x the kernel's)  [{note}]")
        elif not said:
            echo(f"{row['shape']:14} {row['format']:12} {label}: no time here ({note})")
            said = True


def bench_shape(shape, weight_format, layout, tokens, bw, copies=8, device="cuda", echo=print,
                fallback=True) -> list:
    """fallback: also time the path SGLang takes without the plugin, on the row-major rows (its time does
    not depend on the layout the kernel reads; SGLang lays the weights out for its own runner). The
    fallback runs after every kernel and floor row of the shape, so nothing it does can touch those."""
    arch = kernels.device_info(device).arch
    cap = gate.shape_cap(arch, weight_format, shape, layout)
    weights = [make_weights(shape, weight_format, layout, 1000 + c, device) for c in range(copies)]
    eb = shape.expert_bytes(weight_format)
    flats = [torch.randint(0, 255, (shape.experts * eb,), dtype=torch.uint8, device=device) for _ in range(copies)]
    rows, calls_of = [], {}
    for t in tokens:
        calls = calls_of[t] = [make_call(shape, weight_format, layout, t, 17 * t + c, device, weights[c])
                               for c in range(copies)]
        stats = [call_bytes(c, shape, weight_format) for c in calls]
        nd = statistics.mean(s[0] for s in stats)
        nbytes = statistics.mean(s[1] for s in stats)
        us = time_graph(calls)
        ids = [touched_experts(c.topk_ids, shape.experts).to(torch.int32) for c in calls]
        floor = time_read_floor(flats, ids, eb)
        w13 = shape.w13_bytes(weight_format)
        floor2 = time_read_floor(flats, ids, eb, split=w13)
        floor2d = time_read_floor(flats, ids, eb, split=w13, dependent=True)
        roof = nbytes / bw * 1e6
        plan = kernels.kernel_plan(arch, weight_format, t, shape.slots, shape.hidden, shape.inter, layout=layout)
        parts = kernels.launch_token_parts(arch, weight_format, t, shape.slots, shape.hidden, shape.inter)
        calls_mb = statistics.mean(call_weight_bytes(c.topk_ids, shape, weight_format, parts) for c in calls) / 1e6
        floor_mb = nd * eb / 1e6
        row = dict(shape=shape.name, format=weight_format, layout=layout, tokens=t, distinct=nd,
                   mbytes=nbytes / 1e6, calls=len(parts), calls_weight_mbytes=calls_mb, floor_weight_mbytes=floor_mb,
                   kernel_us=us, roofline_us=roof, frac_roofline=roof / us,
                   read_floor_us=floor, over_floor=us / floor, read_floor_2launch_us=floor2,
                   read_floor_2dep_us=floor2d, over_floor_2dep=us / floor2d, in_cap=t <= cap, fallback_us=None,
                   fallback_note="", shipped_us=None, shipped_note="", kernels=plan)
        rows.append(row)
        echo(f"{shape.name:14} {weight_format:12} {layout:12} T={t:3d} distinct={nd:6.1f} {nbytes / 1e6:8.1f} MB "
             f"kernel {us:7.1f} us  read floor {floor:7.1f} us ({us / floor:4.2f}x)  roofline {roof:7.1f} us  "
             f"{roof / us:5.0%}  two-launch floors {floor2:7.1f} / {floor2d:7.1f} us ({us / floor2d:4.2f}x)"
             + (f"  {len(parts)} calls read {calls_mb:.1f} MB of weights, {calls_mb / floor_mb:.2f}x the floor's"
                if len(parts) > 1 else "")
             + f"{'' if t <= cap else '  (above cap)'}  [{plan}]")
    if fallback and layout == ROW_MAJOR:
        time_fallback(rows, calls_of, fallback_timer(shape, weight_format, weights, device), echo)
        if sglang_ships_its_own_kernel():  # ROCm: the switch above also turned SGLang's own small-M kernel off
            time_fallback(rows, calls_of, fallback_timer(shape, weight_format, weights, device, "shipped"), echo,
                          key="shipped", label="SGLang as shipped")
    del weights, flats, calls_of
    torch.cuda.empty_cache()
    return rows


def write_csv(rows, path):
    """rows (dicts with the same keys) as CSV; text fields are quoted where they hold commas."""
    import csv

    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else [])
        w.writeheader()
        w.writerows(rows)


def plot(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    keys = sorted({(r["shape"], r["format"], r["layout"]) for r in rows})
    fig, ax = plt.subplots(figsize=(8, 5))
    for k in keys:
        rs = [r for r in rows if (r["shape"], r["format"], r["layout"]) == k]
        ts = [r["tokens"] for r in rs]
        line, = ax.plot(ts, [r["kernel_us"] for r in rs], marker="o", label=f"{k[0]} {k[1]} {k[2]} kernel")
        ax.plot(ts, [r["roofline_us"] for r in rs], ls="--", color=line.get_color(), label=f"{k[0]} roofline")
        ax.plot(ts, [r["read_floor_us"] for r in rs], ls=":", color=line.get_color(), label=f"{k[0]} read floor")
        ax.plot(ts, [r["read_floor_2dep_us"] for r in rs], ls="-.", color=line.get_color(),
                label=f"{k[0]} read floor, W2 after W13")
    ax.set_xlabel("tokens")
    ax.set_ylabel("µs per MoE layer call")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def run(shapes=("qwen35-tp4", "qwen35-tp8"), formats=(FP8_BLOCK128,), layouts=(ROW_MAJOR,),
        tokens=DEFAULT_TOKENS, out_dir=".", copies=8, echo=print, fallback=True, write_caps=None) -> list:
    """write_caps: a path; the caps this run measures are checked and written there (measured_caps.py)."""
    if write_caps:
        why = measured_caps.write_problem(layouts, tokens, fallback)
        if why:
            raise SystemExit(f"sglang-smallm bench: {why}")
    info = kernels.require_gpu_kernels("bench", "on CPU run `sglang-smallm demo` instead")
    bw = copy_bandwidth()
    echo(f"bench on {info.name} ({info.arch}) {time.strftime('%Y-%m-%d %H:%M:%S')}; copy bandwidth {bw / 1e12:.3f} TB/s "
         f"(read + write); {copies} weight copies rotated in one CUDA graph; {kernels.variant_note()}")
    rows = []
    for fmt in formats:
        for name in shapes:
            for layout in layouts:
                rows += bench_shape(shape_by_name(name), fmt, layout, tokens, bw, copies=copies, echo=echo,
                                    fallback=fallback)
    os.makedirs(out_dir, exist_ok=True)
    meta = dict(device=info.name, arch=info.arch, date=time.strftime("%Y-%m-%d"), copy_bw_tbs=bw / 1e12,
                torch=torch.__version__, copies=copies)
    with open(os.path.join(out_dir, "bench.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    write_csv(rows, os.path.join(out_dir, "bench.csv"))
    plot(rows, os.path.join(out_dir, "bench.png"))
    dependent = ("as a programmatic dependent" if torch.version.hip is None
                 else "again stream-ordered (ROCm: no programmatic dependent launch)")
    shipped = any(r["shipped_us"] is not None or r["shipped_note"] for r in rows)
    echo(f"\n(two-launch floors: W13, then W2 in a second launch, stream-ordered / {dependent})")
    if shipped:
        echo("(fallback: SGLang's runner with SGLANG_ROCM_SMALLM_MOE=0, which also turns off SGLang's own small-M "
             "kernel; SGLang as shipped: the same layer with that kernel on, the plugin handing every call over)")
    echo("(calls: the launcher's calls for one; weights read: by those calls, over the floor's, which reads each "
         "expert once)")
    echo("| shape | format | layout | T | distinct | MB | kernel µs | read floor µs | kernel / floor | roofline µs | "
         "of roofline | two-launch floors µs | kernel / dependent floor | calls | weights read | fallback µs |"
         + (" SGLang as shipped µs |" if shipped else ""))
    echo("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if shipped else ""))
    for r in rows:
        echo(f"| {r['shape']} | {r['format']} | {r['layout']} | {r['tokens']} | {r['distinct']:.1f} | {r['mbytes']:.1f} | "
             f"{r['kernel_us']:.1f} | {r['read_floor_us']:.1f} | {r['over_floor']:.2f}x | {r['roofline_us']:.1f} | "
             f"{r['frac_roofline']:.0%} | {r['read_floor_2launch_us']:.1f} / {r['read_floor_2dep_us']:.1f} | "
             f"{r['over_floor_2dep']:.2f}x | {r['calls']} | {r['calls_weight_mbytes'] / r['floor_weight_mbytes']:.2f}x | "
             f"{'-' if r['fallback_us'] is None else format(r['fallback_us'], '.1f')} |"
             + (f" {'-' if r['shipped_us'] is None else format(r['shipped_us'], '.1f')} |" if shipped else ""))
    if write_caps:
        write_measured_caps(rows, write_caps, meta, shapes, echo)
    return rows


def write_measured_caps(rows, path, meta, shape_names, echo=print) -> list:
    """`bench --write-caps`: caps derived from the rows, the kernel checked at each count up to them (selftest, two
    seeds), written to path with the run's device and versions."""
    import sys

    from . import selftest

    def check(shape, weight_format, layout, counts):
        return [r.ok for r in selftest.run(formats=(weight_format,), shapes=(shape.name,), layouts=(layout,),
                                           seeds=range(2), tokens=counts, echo=echo)]

    try:
        import sglang
        sglang_version = getattr(sglang, "__version__", "?")
    except Exception:  # noqa: BLE001 - the file records it where it can
        sglang_version = "not importable"
    file_meta = dict(device=meta["device"], arch=meta["arch"], date=meta["date"],
                     command=" ".join(["sglang-smallm", *sys.argv[1:]]), torch=meta["torch"], sglang=sglang_version)
    try:
        return measured_caps.write_from_bench(rows, path, file_meta, {n: shape_by_name(n) for n in shape_names}, check,
                                              echo)
    except measured_caps.CapsFileError as e:
        raise SystemExit(f"sglang-smallm bench: {e}")
