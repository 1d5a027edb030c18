"""Per-layer preparation after SGLang has processed the weights (outside any CUDA-graph capture)."""

import logging

logger = logging.getLogger("sglang_smallm")


def prepare_workspace(layer) -> None:
    """Allocate the kernel workspace on the layer's device now, so no call allocates it later."""
    w13 = getattr(layer, "w13_weight", None)
    if w13 is None or w13.device.type != "cuda":
        return
    from .. import kernels

    if kernels.load_compiled()[0] is None:
        return
    hidden = int(layer.w2_weight.shape[1])
    inter = int(w13.shape[1]) // 2
    kernels.Workspace.ensure(w13.device, hidden, inter)
