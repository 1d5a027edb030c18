"""Per-kernel GPU time of the MoE op (torch.profiler / CUPTI), to see where a variant spends its time.

Usage: python examples/profile_kernels.py [shape] [format] [tokens,...]
Runs 8 weight copies in rotation (not L2-resident), inside one CUDA graph per token count, 20
replays, and prints the mean duration of every kernel the op launches, and the graph's wall time
per call (kernels of one call may overlap: programmatic dependent launch).
"""
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from sglang_smallm_plugin import kernels
from sglang_smallm_plugin.shapes import SHAPES
from sglang_smallm_plugin.testdata import make_call, make_weights
from sglang_smallm_plugin.timing import capture, graph_us

shape = SHAPES[sys.argv[1] if len(sys.argv) > 1 else "qwen35-tp4"]
fmt = sys.argv[2] if len(sys.argv) > 2 else "fp8_block128"
tokens = [int(t) for t in (sys.argv[3] if len(sys.argv) > 3 else "1,8").split(",")]
copies = 8
weights = [make_weights(shape, fmt, "row_major", 1000 + c, "cuda") for c in range(copies)]
print(f"{shape.name} {fmt} row_major; {kernels.variant_note()}")
for t in tokens:
    calls = [make_call(shape, fmt, "row_major", t, 17 * t + c, "cuda", weights[c]) for c in range(copies)]
    outs = [torch.empty_like(c.x) for c in calls]

    def body():
        for c, o in zip(calls, outs):
            kernels.run_moe(c, out=o)

    wall = graph_us(body, copies)
    g = capture(body)
    g.replay()
    torch.cuda.synchronize()
    reps = 20
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            g.replay()
        torch.cuda.synchronize()
    per = defaultdict(list)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and "smallm" in ev.name:
            per[ev.name].append(ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total)
    parts = "  ".join(f"{name.split('<')[0].split('::')[-1][:28]} {sum(v) / len(v):6.1f} us (n={len(v) // reps})"
                      for name, v in sorted(per.items()))
    print(f"T={t:3d} graph {wall:6.1f} us/call   {parts}")
