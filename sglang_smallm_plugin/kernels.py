"""Compiled kernel bindings: loading the extension, device/arch detection, workspaces, op calls.

The extension `sglang_smallm_plugin._C` is built at install time (setup.py) for one arch
(gfx950 from a ROCm torch, sm_90a from a CUDA torch). It registers the torch custom ops
`torch.ops.sglang_smallm.*`; this module adds their fake (meta) implementations so they trace.
What the launcher runs for a call (the kernel plan, mirrored for logs and doctor) is launch_plan.py,
re-exported here.
"""

import importlib
import logging
import threading
from dataclasses import dataclass
from typing import Optional

import torch

from .calls import AITER_SORT, FP8_BLOCK128, MXFP4, SHUFFLE16, MoeCall, SortCall, SortOutput
from .gate import MAX_PAIRS
from .reference.sorting import scale_cols, triton_buffer_sizes
from .sort_gate import PATH_CODES
# the launcher's plan (launch_plan.py), re-exported: callers name it kernels.kernel_plan, kernels.VARIANTS, ...
from .launch_plan import *  # noqa: F401,F403
from .launch_plan import MIN_ROWS2

logger = logging.getLogger("sglang_smallm")

FORMAT_CODES = {FP8_BLOCK128: 0, MXFP4: 1}
SYNC_FIXED_WORDS = 2 + 2 * MAX_PAIRS  # ticket, exit, done1[MAX_PAIRS], used1[MAX_PAIRS]




@dataclass(frozen=True)
class DeviceInfo:
    kind: str   # "cpu" | "cuda" | "rocm"
    name: str
    arch: str   # "gfx950", "sm_90", "cpu", ...


def device_info(device=None) -> DeviceInfo:
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type != "cuda":
        return DeviceInfo("cpu", "cpu", "cpu")
    if not torch.cuda.is_available():
        return DeviceInfo("cpu", "cpu", "cpu")
    idx = dev.index if dev is not None and dev.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(idx)
    if torch.version.hip:
        arch = getattr(props, "gcnArchName", "gfx?").split(":")[0]
        return DeviceInfo("rocm", props.name, arch)
    return DeviceInfo("cuda", props.name, f"sm_{props.major}{props.minor}")


_loaded: list = []  # [(module or None, reason)] once loaded


def load_compiled() -> tuple:
    """-> (module or None, reason). Never raises. Loaded once; kept in a module list, not an lru_cache, because
    run_moe calls it inside SGLang's forward and dynamo (--enable-torch-compile) traces through an lru_cache's
    wrapper with a warning of possible silent errors ("h200-s48" run 3)."""
    if not _loaded:
        _loaded.append(_load_compiled_once())
    return _loaded[0]


def _load_compiled_once() -> tuple:
    try:
        mod = importlib.import_module("sglang_smallm_plugin._C")
    except ImportError as e:
        return None, f"compiled kernels not installed ({e}); reinstall with `pip install --no-build-isolation .` on a machine with a CUDA or ROCm torch"
    except OSError as e:
        return None, f"compiled kernels failed to load: {e}"
    _register_fakes()
    return mod, f"loaded {getattr(mod, '__file__', '?')} built for {compiled_arch_of_ops()}"


def require_gpu_kernels(tool: str, cpu_hint: str = "") -> DeviceInfo:
    """For the GPU tools (bench, selftest): the device, or SystemExit with the reason."""
    if not torch.cuda.is_available():
        raise SystemExit(f"{tool} needs a GPU" + (f"; {cpu_hint}" if cpu_hint else ""))
    mod, why = load_compiled()
    if mod is None:
        raise SystemExit(f"{tool}: {why}")
    return device_info()


def compiled_arch_of_ops() -> Optional[str]:
    try:
        return torch.ops.sglang_smallm.build_arch()
    except (AttributeError, RuntimeError):
        return None


def compiled_arch() -> Optional[str]:
    mod, _ = load_compiled()
    return compiled_arch_of_ops() if mod is not None else None


_fakes_done = False


def _register_fakes():
    global _fakes_done
    if _fakes_done:
        return
    _fakes_done = True

    @torch.library.register_fake("sglang_smallm::moe_fused")
    def _moe_fused_fake(x, w13, w2, s13, s2, topk_weights, topk_ids, out, h, y, sync, fmt, layout, out_scale, inter=0):
        return None

    @torch.library.register_fake("sglang_smallm::read_floor")
    def _read_floor_fake(base, ids, expert_bytes, chunks, sink, offset=0, length=-1, dependent=False):
        return None

    @torch.library.register_fake("sglang_smallm::moe_sort")
    def _moe_sort_fake(topk_ids, topk_weights, sorted_ids, sorted_weights, expert_ids, num_valid, x, xq, xs,
                       zero_buf, E, block, fmt, path):
        return None


class Workspace:
    """Per-device scratch for the fused kernel. Its counters must be zero before the first launch;
    the kernel resets every counter it uses, so the buffer stays valid across calls and graph replays.
    Grown only outside CUDA-graph capture (at weight-processing time or on an eager first call)."""

    _by_device: dict = {}
    _lock = threading.Lock()

    def __init__(self, device, hidden, inter):
        self.hidden, self.inter = hidden, inter
        self.h = torch.empty(MAX_PAIRS * 2 * ((hidden + 1023) // 1024) * inter, dtype=torch.float32, device=device)
        self.y = torch.empty(MAX_PAIRS * hidden, dtype=torch.float32, device=device)
        words = SYNC_FIXED_WORDS + MAX_PAIRS * ((hidden + MIN_ROWS2 - 1) // MIN_ROWS2)
        self.sync = torch.zeros(words, dtype=torch.int32, device=device)

    @classmethod
    def ensure(cls, device, hidden, inter) -> "Workspace":
        device = torch.device(device)
        key = (device.type, device.index)
        with cls._lock:
            ws = cls._by_device.get(key)
            if ws is not None and ws.hidden >= hidden and ws.inter >= inter:
                return ws
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise RuntimeError(
                    "sglang-smallm: kernel workspace would be allocated during CUDA-graph capture; "
                    "it is normally made when weights are processed. Run one eager forward first.")
            ws = cls(device, max(hidden, ws.hidden if ws else 0), max(inter, ws.inter if ws else 0))
            cls._by_device[key] = ws
            return ws


def _installed_ops():
    """torch.ops.sglang_smallm, once the installed extension has loaded (else RuntimeError with the reason)."""
    mod, why = load_compiled()
    if mod is None:
        raise RuntimeError(f"sglang-smallm: {why}")
    return torch.ops.sglang_smallm


def run_moe(call: MoeCall, out: Optional[torch.Tensor] = None, ops=None) -> torch.Tensor:
    """Run the fused kernel for an eligible call (the gate has already said yes). `ops`: another build of
    the ops (the gfx950 emulation on CPU tensors, emulated.load()); the installed kernels by default."""
    ops = ops if ops is not None else _installed_ops()
    ws = Workspace.ensure(call.x.device, call.hidden, call.inter)
    out = torch.empty_like(call.x) if out is None else out
    scale = 1.0 if call.routed_scaling_factor is None else float(call.routed_scaling_factor)
    w13 = call.w13.view(torch.uint8)
    w2 = call.w2.view(torch.uint8)
    s13, s2 = call.w13_scale, call.w2_scale
    if call.weight_format == MXFP4:
        s13, s2 = s13.view(torch.uint8), s2.view(torch.uint8)
    ops.moe_fused(
        call.x, w13, w2, s13, s2, call.topk_weights, call.topk_ids, out, ws.h, ws.y, ws.sync,
        FORMAT_CODES[call.weight_format], 1 if call.layout == SHUFFLE16 else 0, scale, call.inter)
    return out


SORT_FORMAT_CODES = {AITER_SORT: 0, "triton": 1}


def sort_buffers(call: SortCall) -> SortOutput:
    """Output buffers of the sizes the wrapped sort returns (AITER's capacity or SGLang's sizes)."""
    ids = call.topk_ids
    dev = ids.device
    T, K, E, bs = call.num_tokens, call.top_k, call.num_experts, call.block_size
    if call.output_format == AITER_SORT:
        cap = T * K + E * bs - K
        out = SortOutput(sorted_ids=torch.empty(cap, dtype=torch.int32, device=dev),
                         expert_ids=torch.empty((cap + bs - 1) // bs, dtype=torch.int32, device=dev),
                         num_valid=torch.empty(2, dtype=torch.int32, device=dev),
                         sorted_weights=torch.empty(cap, dtype=torch.float32, device=dev))
        if call.moe_buf is not None:
            shape, dtype = call.moe_buf
            out.moe_buf = torch.empty(shape, dtype=dtype, device=dev)
        x = call.fuse_mxfp8_of
        if x is not None:
            out.xq = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=dev)
            out.xs = torch.empty((cap + 31) // 32 * 32, scale_cols(x.shape[1]), dtype=torch.uint8, device=dev)
        return out
    n, blocks = triton_buffer_sizes(T * K, E, bs)
    return SortOutput(sorted_ids=torch.empty(n, dtype=torch.int32, device=dev),
                      expert_ids=torch.empty(blocks, dtype=torch.int32, device=dev),
                      num_valid=torch.empty(1, dtype=torch.int32, device=dev))


def run_sort(call: SortCall, path: str, out: Optional[SortOutput] = None, ops=None) -> SortOutput:
    """Run the compiled sort on an eligible call (the sort gate chose `path`). `out` may carry
    preallocated (e.g. poisoned) buffers of sort_buffers' sizes; `ops` as for run_moe."""
    ops = ops if ops is not None else _installed_ops()
    out = sort_buffers(call) if out is None else out
    ops.moe_sort(
        call.topk_ids, call.topk_weights if call.output_format == AITER_SORT else None,
        out.sorted_ids, out.sorted_weights, out.expert_ids, out.num_valid,
        call.fuse_mxfp8_of, None if out.xq is None else out.xq.view(torch.uint8), out.xs,
        None if out.moe_buf is None else out.moe_buf.view(-1),
        call.num_experts, call.block_size, SORT_FORMAT_CODES[call.output_format], PATH_CODES[path])
    return out
