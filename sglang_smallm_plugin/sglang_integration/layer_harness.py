"""Build and run SGLang's own FusedMoE layer outside a server (tests, demo, CPU or GPU).

This drives the real SGLang objects: ServerArgs -> published runtime context -> MoE config ->
FusedMoE with Fp8Config (block 128x128) or the Quark W4A4 MXFP4 scheme -> weights through the
parameters' own weight_loader -> process_weights_after_loading -> layer(x, topk_output).
No SGLang file is edited; the backend comes from our registered plugin.
"""

import types

import torch

from ..calls import FP8_BLOCK128, MXFP4

_state = {"backend": None}


def setup(backend: str = "smallm") -> None:
    """Publish a minimal runtime context selecting `backend` (idempotent per backend)."""
    from sglang.srt.layers.moe.utils import initialize_moe_config
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    from .entry import register

    register()
    if _state["backend"] == backend:
        return
    args = ServerArgs(model_path="dummy", moe_runner_backend=backend)
    reset_context()
    publish(args, role="test", ranks=SpawnRanks(world_rank=0, dp_rank=None))
    initialize_moe_config()
    get_parallel().override_permanently(tp_group=types.SimpleNamespace(world_size=1, rank_in_group=0))
    _state["backend"] = backend


def _quant_config(weight_format: str):
    if weight_format == FP8_BLOCK128:
        from sglang.srt.layers.quantization.fp8 import Fp8Config

        return Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="dynamic", weight_block_size=[128, 128])
    from sglang.srt.layers.quantization.quark.quark import QuarkConfig

    fp4 = {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "is_dynamic": False, "scale_format": "e8m0"}
    act = dict(fp4, is_dynamic=True)
    return QuarkConfig.from_config({
        "quant_method": "quark", "export": {"kv_cache_group": [], "pack_method": "reorder"},
        "global_quant_config": {"weight": fp4, "input_tensors": act, "output_tensors": None, "bias": None},
        "layer_quant_config": {}, "layer_type_quant_config": {}, "exclude": [], "packed_modules_mapping": {}})


def build_layer(shape, weight_format: str, weights: dict, device="cpu", layer_id: int = 0):
    """SGLang FusedMoE for `shape` (MoeShape) loaded with row-major `weights` from testdata.make_weights."""
    from sglang.srt.layers.moe.fused_moe_triton.layer import FusedMoE

    E, D, I, K = shape.experts, shape.hidden, shape.inter, shape.slots
    with torch.device(device):
        layer = FusedMoE(num_experts=E, hidden_size=D, intermediate_size=I, layer_id=layer_id, top_k=K,
                         num_fused_shared_experts=0, params_dtype=torch.bfloat16,
                         quant_config=_quant_config(weight_format), prefix=f"model.layers.{layer_id}.mlp.experts")
    load_weights(layer, weight_format, weights, E, I)
    layer.quant_method.process_weights_after_loading(layer)
    return layer


def load_weights(layer, weight_format, w, E, I) -> None:
    """Through each parameter's own weight_loader, as a checkpoint load would."""
    params = dict(layer.named_parameters())
    scale13 = "w13_weight_scale_inv" if weight_format == FP8_BLOCK128 else "w13_weight_scale"
    scale2 = "w2_weight_scale_inv" if weight_format == FP8_BLOCK128 else "w2_weight_scale"
    sname = "weight_scale_inv" if weight_format == FP8_BLOCK128 else "weight_scale"
    s13_rows = 2 * I // 128 if weight_format == FP8_BLOCK128 else 2 * I
    half = s13_rows // 2
    for e in range(E):
        for pname, tensor, shard, wname in (
            ("w13_weight", w["w13"][e, :I], "w1", "gate_proj.weight"),
            ("w13_weight", w["w13"][e, I:], "w3", "up_proj.weight"),
            ("w2_weight", w["w2"][e], "w2", "down_proj.weight"),
            (scale13, w["w13_scale"][e, :half], "w1", f"gate_proj.{sname}"),
            (scale13, w["w13_scale"][e, half:], "w3", f"up_proj.{sname}"),
            (scale2, w["w2_scale"][e], "w2", f"down_proj.{sname}"),
        ):
            p = params[pname]
            p.weight_loader(p, tensor.contiguous(), f"experts.{e}.{wname}", shard, e)


def moe_method(layer):
    """The object that owns the runner: the Quark scheme for Quark layers, else the quant method."""
    return layer.scheme if getattr(layer, "scheme", None) is not None else layer.quant_method


def decide(layer, call):
    """The path (Decision) the layer's smallm runner core takes for `call` (testdata.MoeCall): its own
    description of the call from SGLang's dispatch output and the layer's quant info."""
    core = moe_method(layer).runner.runner_core
    return core.selector.decide(describe(layer, call))


def describe(layer, call):
    """The layer's smallm runner core's own MoeCall for `call` (from SGLang's dispatch output and quant info)."""
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    topk = StandardTopKOutput(call.topk_weights, call.topk_ids, torch.empty(0, device=call.x.device))
    dispatch = layer.dispatcher.dispatch(hidden_states=call.x, topk_output=topk)
    if call.weight_format == MXFP4:
        from .quark import SmallmMxfp4QuantInfo

        quant_info = SmallmMxfp4QuantInfo.from_layer(layer)
    else:
        quant_info = layer.quant_method.get_triton_quant_info(layer)
    core = moe_method(layer).runner.runner_core
    return core.describe(dispatch, quant_info, core.config)


def forward(layer, x, topk_weights, topk_ids):
    """The layer's output for x. SGLang's FusedMoE runs in place by default (MoeRunnerConfig.inplace):
    its Triton runner writes the output into the x it was given, so each call gets its own copy of x and
    the caller's x is the same after the call (else the next call on it, or the reference, would read
    the last output)."""
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    return layer(x.clone(), StandardTopKOutput(topk_weights, topk_ids, torch.empty(0, device=x.device)))
