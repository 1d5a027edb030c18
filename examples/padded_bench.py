"""A layer SGLang padded for AITER, timed three ways beside its read floor (GPU; prints a table, writes a CSV).

SGLang's Quark MXFP4 scheme on ROCm with AITER pads the per-rank intermediate size so that w2's packed K is a
multiple of 128 bytes: Qwen3.5 at TP8 computes I = 128 from weights stored with 256, gate and up each followed by
128 rows of zeros and w2's K by 128 values of zeros (layer.intermediate_pad). Per token count, µs per MoE call:

  unpadded     the same layer stored without padding (I = 128): what the padded layer should cost
  pad read     the padded layer read whole, as the kernel did before it took the padding as a stride (I = 256
               computed over the zeros: the same output, twice the weight bytes)
  pad skipped  the padded layer with inter_pad = 128: the kernel computes I = 128 and reads none of the padding

beside the read floor of I = 128's bytes (a kernel that only reads the touched experts' bytes, same graph
discipline) and the byte roofline at the copy bandwidth measured in the same run. Same bench discipline as
`sglang-smallm bench`: CUDA graphs, 8 weight copies rotated so nothing stays in L2, median of rounds.

Usage: python examples/padded_bench.py [--formats mxfp4,fp8_block128] [--layout shuffle16x16] [--tokens 1,4,8,16,40]
       [--out DIR]   (SMALLM_KERNEL_VARIANT=0 for the block kernel, gfx950's default)
"""

import argparse
import csv
import dataclasses
import os
import statistics

import torch

from sglang_smallm_plugin import kernels
from sglang_smallm_plugin.bench import call_bytes, copy_bandwidth, time_graph, time_read_floor, touched_experts
from sglang_smallm_plugin.shapes import SHAPES
from sglang_smallm_plugin.testdata import make_call, make_padded_weights, make_weights

COPIES = 8


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default="mxfp4,fp8_block128")
    ap.add_argument("--layout", default="shuffle16x16")
    ap.add_argument("--shape", default="qwen35-tp8")
    ap.add_argument("--pad", type=int, default=128)
    ap.add_argument("--tokens", default="1,4,8,16,40")
    ap.add_argument("--out", default="padded_bench_out")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    mod, why = kernels.load_compiled()
    if mod is None or not torch.cuda.is_available():
        raise SystemExit(f"padded_bench needs a GPU and the compiled kernels ({why})")
    shape, dev = SHAPES[a.shape], "cuda"
    tokens = [int(t) for t in a.tokens.split(",")]
    bw = copy_bandwidth()
    print(f"padded_bench on {kernels.device_info().name}; {kernels.variant_note()}; copy bandwidth {bw / 1e12:.2f} TB/s")
    print(f"{a.shape} (D {shape.hidden}, E {shape.experts}, K {shape.slots}, I {shape.inter} stored as "
          f"{shape.inter + a.pad}), {a.layout}; µs per MoE call")
    rows = []
    for fmt in a.formats.split(","):
        plain_w = [make_weights(shape, fmt, a.layout, 1000 + c, dev) for c in range(COPIES)]
        pad_w = [make_padded_weights(shape, fmt, a.layout, 1000 + c, dev, a.pad, fill="zeros") for c in range(COPIES)]
        eb = shape.expert_bytes(fmt)
        flats = [torch.randint(0, 255, (shape.experts * eb,), dtype=torch.uint8, device=dev) for _ in range(COPIES)]
        print(f"{'format':12} {'T':>3} {'unpadded':>9} {'pad read':>9} {'pad skipped':>11} {'read floor':>10} "
              f"{'roofline':>8} {'skipped/unpadded':>16} {'read/skipped':>12}")
        for t in tokens:
            plain = [make_call(shape, fmt, a.layout, t, 17 * t + c, dev, plain_w[c]) for c in range(COPIES)]
            whole = [dataclasses.replace(p, **pad_w[c]) for c, p in enumerate(plain)]
            skipped = [dataclasses.replace(w, inter_pad=a.pad) for w in whole]
            # the three give one output (the padding is zeros here): checked on the first copy before timing
            outs = []
            for c in (plain[0], whole[0], skipped[0]):
                o = torch.full_like(c.x, float("nan"))
                kernels.run_moe(c, out=o)
                outs.append(o)
            torch.cuda.synchronize()
            same = bool(torch.equal(outs[0], outs[2]))
            close = float((outs[1].float() - outs[0].float()).norm() / outs[0].float().norm())
            us = [time_graph(calls) for calls in (plain, whole, skipped)]
            ids = [touched_experts(c.topk_ids, shape.experts).to(torch.int32) for c in plain]
            floor = time_read_floor(flats, ids, eb)
            nbytes = statistics.mean(call_bytes(c, shape, fmt)[1] for c in plain)
            roof = nbytes / bw * 1e6
            row = dict(format=fmt, layout=a.layout, tokens=t, unpadded_us=us[0], pad_read_us=us[1],
                       pad_skipped_us=us[2], read_floor_us=floor, roofline_us=roof,
                       skipped_bit_identical_to_unpadded=same, pad_read_rel_diff=close)
            rows.append(row)
            print(f"{fmt:12} {t:3d} {us[0]:9.1f} {us[1]:9.1f} {us[2]:11.1f} {floor:10.1f} {roof:8.1f} "
                  f"{us[2] / us[0]:16.3f} {us[1] / us[2]:12.2f}   skipped == unpadded: {same}; "
                  f"read whole vs unpadded rel diff {close:.1e}")
        del plain_w, pad_w, flats
        torch.cuda.empty_cache()
    path = os.path.join(a.out, "padded_bench.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"padded_bench: {path}")


if __name__ == "__main__":
    main()
