"""The tests' independent MoE: dequantize every expert, loop over tokens and slots in fp64.
Shared by the reference tests and the SGLang-layer tests; deliberately written without the
reference module's per-expert batching."""

import torch

from sglang_smallm_plugin import reference as R


def dequantized(call):
    """(w13, w2) of every expert as fp64, row-major weights assumed."""
    if call.weight_format == "fp8_block128":
        return (R.dequant_fp8_blockscale(call.w13, call.w13_scale).double(),
                R.dequant_fp8_blockscale(call.w2, call.w2_scale).double())
    return R.dequant_mxfp4(call.w13, call.w13_scale).double(), R.dequant_mxfp4(call.w2, call.w2_scale).double()


def loop_moe(call):
    """fp64 [T, D]; slots whose expert id is outside [0, E) contribute nothing."""
    w13, w2 = dequantized(call)
    T, K = call.topk_ids.shape
    Iw, I = w13.shape[1] // 2, call.inter  # I < Iw: SGLang's padding (call.inter_pad), never read
    w13, w2 = torch.cat([w13[:, :I], w13[:, Iw:Iw + I]], dim=1), w2[:, :, :I]
    out = torch.zeros(T, w2.shape[1], dtype=torch.float64)
    for t in range(T):
        for k in range(K):
            e = int(call.topk_ids[t, k])
            if e < 0 or e >= w13.shape[0]:
                continue
            gu = w13[e] @ call.x[t].double()
            out[t] += float(call.topk_weights[t, k]) * (w2[e] @ (torch.nn.functional.silu(gu[:I]) * gu[I:]))
    return out
