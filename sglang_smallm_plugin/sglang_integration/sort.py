"""Wires the sort wrapper around the sorts the fallback runners call.

CUDA (Triton runner): SGLang's `moe_align_block_size`, through SGLang's HookRegistry (it also
patches the copy `fused_moe.py` imported).

ROCm (AITER runner): three module attributes of `aiter.fused_moe`, set directly because AITER
is optional and SGLang's own small-sort patch (`apply_aiter_small_moe_sort_patch`, applied when
SGLang builds its AITER runner core) sets the same attributes:
  fused_moe                          -> remembers the activations, for the fused MXFP8 quant;
  _moe_sorting_impl                  -> our sort when the sort gate says yes, else what was there;
  fused_dynamic_mxfp8_quant_moe_sort -> hands back the quantisation our sort already made, only
                                        for the very tensors it was made from, else what was there.
We install after SGLang's patch, so ours is outermost and SGLang's patch (then AITER) is what a
declined call reaches. A marker on our wrappers keeps us from ever wrapping twice.
"""

import functools
import logging
from contextvars import ContextVar

import torch

from ..calls import AITER_SORT, TRITON_SORT, SortCall
from ..sort_wrapper import wrap_sort
from .runner_core import selected_backend_is_smallm

logger = logging.getLogger("sglang_smallm")

TRITON_SORT_TARGET = "sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size.moe_align_block_size"
AITER_MODULE = "aiter.fused_moe"
MARK = "__sglang_smallm_sort__"


def _describe_triton(topk_ids, block_size, num_experts, ignore_invalid_expert=False, *,
                     return_inactive_prefix_count=False, pad_expert_ids=False):
    if ignore_invalid_expert or return_inactive_prefix_count or pad_expert_ids:
        return None, "non-default moe_align_block_size options (invalid experts / inactive prefix / padded ids)"
    return SortCall(topk_ids=topk_ids, topk_weights=None, num_experts=int(num_experts),
                    block_size=int(block_size), output_format=TRITON_SORT), ""


_triton_wrappers: dict = {}  # original -> its wrapper, built once (with one provider selector)


def around_triton_sort(original, *args, **kwargs):
    wrapper = _triton_wrappers.get(original)
    if wrapper is None:
        wrapper = _triton_wrappers.setdefault(original, wrap_sort(original, _describe_triton, selected_backend_is_smallm))
    return wrapper(*args, **kwargs)


HOOKS = ((TRITON_SORT_TARGET, around_triton_sort),)


# ------------------------------------------------------------------------------------ AITER
_pending_x: ContextVar = ContextVar("sglang_smallm_pending_mxfp8_input", default=None)
_emitted: ContextVar = ContextVar("sglang_smallm_emitted_mxfp8", default=None)


def _describe_aiter(topk_ids, topk_weights, num_experts, model_dim, moebuf_dtype, block_size, expert_mask=None,
                    num_local_tokens=None, dispatch_policy=0, use_opus=False, return_local_topk_ids=False,
                    accumulate=True, output_aux=False, **kwargs):
    if return_local_topk_ids or output_aux or kwargs.get("output") is not None:
        return None, "AITER sort options we do not produce (local topk ids / aux output / caller-owned moe_buf)"
    call = SortCall(topk_ids=topk_ids, topk_weights=topk_weights, num_experts=int(num_experts),
                    block_size=int(block_size), output_format=AITER_SORT,
                    has_expert_mask=expert_mask is not None, local_token_count=num_local_tokens is not None,
                    moe_buf=((int(topk_ids.shape[0]), int(model_dim)), moebuf_dtype) if accumulate else None)
    x = _pending_x.get()
    if x is not None and x.shape[0] == topk_ids.shape[0]:
        call.fuse_mxfp8_of = x
        call.extra["moebuf_dtype"] = moebuf_dtype
    return call, ""


def _present_aiter(call, out):
    if out.moe_buf is None:
        out.moe_buf = torch.empty((0, 0), dtype=call.extra.get("moebuf_dtype", torch.bfloat16),
                                  device=call.topk_ids.device)
    if out.xq is not None:
        _emitted.set((call.fuse_mxfp8_of, out.sorted_ids, out.xq, out.xs.view(torch.float8_e8m0fnu)))
    return out.as_tuple(AITER_SORT)


def _wants_mxfp8_activations(hidden_states, args, kwargs) -> bool:
    """Fuse the activation quantisation only where AITER will ask for MXFP8 activations: per-1x32
    quantisation (quant_type passed by keyword, as SGLang's AITER runner does) of 1-byte (fp8 /
    fp4x2) weights. Anything else: no fusion, AITER quantises as it always does."""
    qt = kwargs.get("quant_type")
    w1 = args[0] if args else kwargs.get("w1")
    return (isinstance(hidden_states, torch.Tensor) and hidden_states.dtype == torch.bfloat16
            and getattr(qt, "name", str(qt)).endswith("per_1x32")
            and isinstance(w1, torch.Tensor) and w1.element_size() == 1)


def _is_ours(fn) -> bool:
    seen = 0
    while fn is not None and seen < 32:
        if getattr(fn, MARK, False):
            return True
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    return False


def _mark(wrapper, original):
    functools.update_wrapper(wrapper, original)  # name, doc, __wrapped__ = original
    setattr(wrapper, MARK, True)
    return wrapper


def install_aiter_sort_wrapper(fm=None) -> str:
    """Wrap aiter.fused_moe's sort (outermost, once). Returns what happened, for logs and doctor."""
    if fm is None:
        try:
            import importlib

            fm = importlib.import_module(AITER_MODULE)
        except ImportError as e:
            return f"AITER not importable ({e}): nothing to wrap"
    sort_impl = getattr(fm, "_moe_sorting_impl", None)
    if sort_impl is None or not hasattr(fm, "fused_moe"):
        return f"{AITER_MODULE} has no _moe_sorting_impl / fused_moe (AITER version?): sort not wrapped"
    if _is_ours(sort_impl):
        return "already wrapped"
    orig_fused, orig_quant = fm.fused_moe, getattr(fm, "fused_dynamic_mxfp8_quant_moe_sort", None)
    sort_body = wrap_sort(sort_impl, _describe_aiter, selected_backend_is_smallm, present=_present_aiter)

    def fused_moe(hidden_states, *args, **kwargs):
        wants = _wants_mxfp8_activations(hidden_states, args, kwargs)
        x_token = _pending_x.set(hidden_states if wants else None)
        e_token = _emitted.set(None)
        try:
            return orig_fused(hidden_states, *args, **kwargs)
        finally:
            _emitted.reset(e_token)
            _pending_x.reset(x_token)

    fm.fused_moe = _mark(fused_moe, orig_fused)
    fm._moe_sorting_impl = _mark(sort_body, sort_impl)
    if orig_quant is not None:
        def mxfp8_quant_sort(input, sorted_ids, *args, **kwargs):
            pre = _emitted.get()
            if pre is not None and pre[0] is input and pre[1] is sorted_ids:
                _emitted.set(None)
                return pre[2], pre[3]
            return orig_quant(input, sorted_ids, *args, **kwargs)

        fm.fused_dynamic_mxfp8_quant_moe_sort = _mark(mxfp8_quant_sort, orig_quant)
    what = "wrapped (outermost" + (", over SGLang's small-sort patch)" if _is_sglang_patched(sort_impl) else ")")
    logger.info("sglang-smallm: %s._moe_sorting_impl %s", AITER_MODULE, what)
    return what


def _is_sglang_patched(fn) -> bool:
    return "sglang" in (getattr(fn, "__module__", "") or "") or getattr(fn, "__wrapped__", None) is not None


def aiter_wrapper_status() -> str:
    """For doctor: is AITER's sort wrapped, and if not, why."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("aiter") is None:
        return "AITER not installed: nothing to wrap (on CUDA the Triton sort hook serves)"
    try:
        fm = importlib.import_module(AITER_MODULE)
    except Exception as e:  # noqa: BLE001 - report, never fail doctor
        return f"{AITER_MODULE} failed to import: {type(e).__name__}: {e}"
    if _is_ours(getattr(fm, "_moe_sorting_impl", None)):
        return "wrapped (outermost)"
    return "not wrapped yet: done when the first AITER fallback runner is built (server start)"


def after_fallback_built(fallback_backend) -> None:
    """Called once a fallback runner exists: the AITER runner's constructor has applied SGLang's own
    sort patch by then, so wrapping now puts ours outermost."""
    name = getattr(fallback_backend, "value", str(fallback_backend))
    if name == "aiter":
        install_aiter_sort_wrapper()
