"""The weight bytes of a call the launcher splits into consecutive calls (above 20 tokens at D = 4096),
over the floor's, which reads each touched expert once: bench.call_weight_bytes on the bench's own routing
(testdata.make_routing with the bench's seeds, here drawn on CPU), for Qwen3.5 TP4/TP8 on the H200's plan.
CPU only; no GPU needed. Usage: python examples/split_call_bytes.py [draws]"""

import statistics
import sys

from sglang_smallm_plugin import bench, kernels
from sglang_smallm_plugin.shapes import shape_by_name
from sglang_smallm_plugin.testdata import make_routing

draws = int(sys.argv[1]) if len(sys.argv) > 1 else 32
print("| shape | tokens | calls (tokens each) | distinct experts | calls' weight bytes / floor's |")
print("|---|---|---|---|---|")
for name in ("qwen35-tp4", "qwen35-tp8"):
    shape = shape_by_name(name)
    eb = shape.expert_bytes("fp8_block128")
    for t in (19, 20, 21, 24, 28):
        parts = kernels.launch_token_parts("sm_90", "fp8_block128", t, shape.slots, shape.hidden, shape.inter)
        ratio, distinct = [], []
        for c in range(draws):
            _, ids = make_routing(shape, t, 17 * t + c, "cpu")
            one = bench.call_weight_bytes(ids, shape, "fp8_block128", [t])
            ratio.append(bench.call_weight_bytes(ids, shape, "fp8_block128", parts) / one)
            distinct.append(one / eb)
        print(f"| {name} | {t} | {' + '.join(map(str, parts))} | {statistics.mean(distinct):.1f} | "
              f"{statistics.mean(ratio):.3f} |")
