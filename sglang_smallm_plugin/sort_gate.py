"""The small sort's gate: eligibility rules and per-device paths, as data with reasons.

A sort call goes to the compiled sort only if every rule passes and a path of the device's table
fits; otherwise it is handed to the sort the fallback backend uses (AITER's moe_sorting on ROCm,
SGLang's moe_align_block_size on CUDA) and the reason is logged once. `doctor` prints this table.

Paths (hip/smallm_sort.h):
- compact: one workgroup, pair-axis ranks, cost independent of the expert count; up to
  min(64, 2 x block_size) pairs (so every expert has at most two blocks).
- distributed: a histogram over the experts per workgroup; up to 256 pairs and 256 experts. Its
  cost grows with the expert count, which is why 513 experts hand over past the compact range
  (upstream MI355X: such a sort took 15.7 us against AITER's 6.9 us at 16 tokens of Qwen3.5).
"""

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from .calls import AITER_SORT, TRITON_SORT, SortCall

COMPACT_MAX_PAIRS = 64
DIST_MAX_PAIRS = 256
DIST_MAX_EXPERTS = 256
COMPACT, DISTRIBUTED = "compact", "distributed"
PATH_CODES = {COMPACT: 0, DISTRIBUTED: 1}


def compact_limit(block_size: int) -> int:
    return min(COMPACT_MAX_PAIRS, 2 * block_size)


@dataclass(frozen=True)
class SortPath:
    arch: str
    path: str
    fits: Callable[[SortCall], bool]
    rule: str         # the fit, in words
    source: str       # why this device uses it


def _compact_fits(c: SortCall) -> bool:
    return c.num_pairs <= compact_limit(c.block_size)


def _dist_fits(c: SortCall) -> bool:
    return c.num_pairs <= DIST_MAX_PAIRS and c.num_experts <= DIST_MAX_EXPERTS


def kernel_path(call: SortCall):
    """The path the kernel itself can take for this call, whatever a device's table says (benchmarks,
    comparisons): compact where it fits, else distributed where it fits, else None."""
    return COMPACT if _compact_fits(call) else DISTRIBUTED if _dist_fits(call) else None


_COMPACT_RULE = "pairs <= min(64, 2 x block_size)"
_DIST_RULE = f"pairs <= {DIST_MAX_PAIRS} and experts <= {DIST_MAX_EXPERTS}"

def _h200_dist_fits(c: SortCall) -> bool:
    return 32 < c.num_pairs <= DIST_MAX_PAIRS and 64 <= c.num_experts <= DIST_MAX_EXPERTS


# First fitting entry wins. gfx950 rows follow the crossovers measured upstream on MI355X;
# sm_90 rows follow our H200 measurement against SGLang's moe_align_block_size, Triton format,
# block 16, E=129 / 513 (examples/results/README.md, "Sort"): our compact sort loses there (2.0 vs
# 1.4 us at 11 pairs: SGLang's single Triton launch for <= 64 pairs), the distributed one wins from
# 33 pairs on (2.9 vs 4.0 us at 40 pairs, 4.0 vs 4.3 at 255).
PATHS: Sequence[SortPath] = (
    SortPath("gfx950", COMPACT, _compact_fits, _COMPACT_RULE,
             "upstream MI355X: one launch beats AITER's multi-launch sort for few pairs"),
    SortPath("gfx950", DISTRIBUTED, _dist_fits, _DIST_RULE,
             "upstream MI355X: 8.1 vs AITER 12.0 us at E=129; at E=513 it lost (15.7 vs 6.9 us)"),
    SortPath("sm_90", DISTRIBUTED, _h200_dist_fits, f"32 < pairs <= {DIST_MAX_PAIRS} and 64 <= experts <= "
             f"{DIST_MAX_EXPERTS}", "H200 2026-11-30: 2.9-4.0 us vs SGLang's 3.9-4.3 us (E=129, 40-255 pairs)"),
)

SUPPORTED_ARCHS = ("gfx950", "sm_90")


@dataclass(frozen=True)
class SortRule:
    name: str
    passes: Callable[[SortCall, str], bool]
    reason: Callable[[SortCall, str], str]


def _aligned(t: torch.Tensor) -> bool:
    return t.device.type == "meta" or t.data_ptr() % 16 == 0


def _fused_ok(c: SortCall) -> bool:
    x = c.fuse_mxfp8_of
    if x is None:
        return True
    return (c.output_format == AITER_SORT and c.block_size % 32 == 0 and x.dtype == torch.bfloat16
            and x.dim() == 2 and x.shape[0] == c.num_tokens and x.shape[1] % 32 == 0 and x.is_contiguous()
            and _aligned(x))


def _moe_buf_ok(c: SortCall) -> bool:
    if c.moe_buf is None:
        return True
    shape, dtype = c.moe_buf
    n = 1
    for d in shape:
        n *= int(d)
    return (n * torch.empty((), dtype=dtype).element_size()) % 16 == 0


SORT_RULES: Sequence[SortRule] = (
    SortRule("device", lambda c, a: any(a.startswith(s) for s in SUPPORTED_ARCHS),
             lambda c, a: f"device arch {a} has no compiled sort (supported: {', '.join(SUPPORTED_ARCHS)})"),
    SortRule("format", lambda c, a: c.output_format in (AITER_SORT, TRITON_SORT),
             lambda c, a: f"output format {c.output_format!r} is not AITER's or SGLang Triton's"),
    SortRule("expert_mask", lambda c, a: not c.has_expert_mask,
             lambda c, a: "an expert mask is set (expert parallelism): the fallback sort handles it"),
    SortRule("local_token_count", lambda c, a: not c.local_token_count,
             lambda c, a: "a local token count is set: the fallback sort handles it"),
    SortRule("ids", lambda c, a: (c.topk_ids.dtype == torch.int32 and c.topk_ids.dim() == 2
                                  and c.topk_ids.is_contiguous()),
             lambda c, a: f"topk_ids are {c.topk_ids.dtype} {tuple(c.topk_ids.shape)} "
                          f"contiguous={c.topk_ids.is_contiguous()} (need contiguous int32 [T, K])"),
    SortRule("weights", lambda c, a: c.output_format != AITER_SORT or (
        c.topk_weights is not None and c.topk_weights.dtype == torch.float32
        and c.topk_weights.shape == c.topk_ids.shape and c.topk_weights.is_contiguous()),
        lambda c, a: "topk_weights are not contiguous fp32 shaped like topk_ids"),
    SortRule("shape", lambda c, a: (0 < c.num_tokens < (1 << 24) and 0 < c.top_k <= min(255, c.num_experts)
                                    and c.block_size > 0),
             lambda c, a: f"T={c.num_tokens} K={c.top_k} E={c.num_experts} block={c.block_size} outside "
                          "0 < T < 2^24, 0 < K <= min(255, E), block > 0"),
    SortRule("fused_mxfp8", lambda c, a: _fused_ok(c),
             lambda c, a: "fused MXFP8 needs the AITER format, block_size % 32 == 0 and contiguous 16-byte-aligned "
                          "bf16 activations [T, D] with D % 32 == 0"),
    SortRule("moe_buf", lambda c, a: _moe_buf_ok(c),
             lambda c, a: f"moe_buf {c.moe_buf} is not a whole number of 16-byte vectors"),
)


def choose_path(call: SortCall, arch: str) -> tuple:
    """-> (path or None, reason). None: hand over to the fallback backend's sort."""
    for rule in SORT_RULES:
        if not rule.passes(call, arch):
            return None, f"{rule.name}: {rule.reason(call, arch)}"
    entries = [p for p in PATHS if arch.startswith(p.arch)]
    for p in entries:
        if p.fits(call):
            return p.path, f"{p.path} ({p.rule}; {p.source})"
    tried = "; ".join(f"{p.path} needs {p.rule}" for p in entries) or f"no sort path for {arch}"
    return None, (f"{call.num_pairs} pairs over {call.num_experts} experts (block {call.block_size}): {tried}; "
                  "the fallback sort is faster there")


def decision_table(arch: str, experts: int, top_k: int, block_size: int, tokens: Sequence[int],
                   output_format: str = AITER_SORT) -> list:
    """For doctor and tests: [(tokens, path or None, reason)] using meta tensors."""
    rows = []
    for t in tokens:
        call = SortCall(topk_ids=torch.empty(t, top_k, dtype=torch.int32, device="meta"),
                        topk_weights=torch.empty(t, top_k, dtype=torch.float32, device="meta"),
                        num_experts=experts, block_size=block_size, output_format=output_format)
        rows.append((t,) + choose_path(call, arch))
    return rows
