"""Import-only stand-in for sgl_kernel, SGLang's compiled CUDA ops, which the H200 image lacks
(sglang-kernel 0.4.10 pins torch 2.14.1, the image has 2.11, and it takes 1.2 GB installed). Any attribute of this package or of
any submodule (`sgl_kernel.quantization`, ...), and any attribute of those, raises SglKernelStubCalled
when called: SGLang's modules import, and whatever would run one of these ops fails loudly instead
(examples/gpu_sglang_layer_check.py reports such a check as not runnable there).

Two exceptions, the ops SGLang's Triton MoE runner calls on CUDA as the call grows:
- `moe_align_block_size` (from 65 token-slot pairs on) runs SGLang's own JIT build of the same op
  (sglang.kernels.ops.moe.moe_align, which SGLang registers as that op's JIT backend and itself uses for
  some calls; ../shared/peer times SGLang's Triton path with it too). It needs nvcc on the machine.
- `moe_sum_reduce` (the sum over a token's slots, from 33 tokens on; up to 32 SGLang itself runs its Triton
  `moe_sum_reduce_triton` on this GPU) runs that same Triton op, as ../shared/peer does: the same sum, a
  stand-in for sgl_kernel's ahead-of-time CUDA kernel, whose time it approximates.
SMALLM_STUB_ALIGN=0 makes both raise like the rest."""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+import-only-stub"


class SglKernelStubCalled(RuntimeError):
    pass


class _Unavailable:
    """An op or object of sgl_kernel: its attributes are more of the same (module-level tables such as
    `scalar_types.uint4b8` are read at import time); calling it raises."""

    def __init__(self, qualname):
        self._qualname = qualname
        self.__name__ = self.__qualname__ = qualname.rsplit(".", 1)[-1]

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{self._qualname}.{name}")

    def __call__(self, *args, **kwargs):
        raise SglKernelStubCalled(f"{self._qualname} called, but sgl_kernel here is an import-only stub")

    def __repr__(self):
        return f"<sgl_kernel stub {self._qualname}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable(f"{self.__name__}.{name}")


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


sys.meta_path.insert(0, _Submodules())


def _stand_in_or_raise(op, why=""):
    """Raises SglKernelStubCalled for `op` where its stand-in may not run: with SMALLM_STUB_ALIGN=0 (both
    stand-ins off), else for `why` where given (a call its stand-in cannot take)."""
    import os

    why = "SMALLM_STUB_ALIGN=0" if os.environ.get("SMALLM_STUB_ALIGN", "1") == "0" else why
    if why:
        raise SglKernelStubCalled(f"{__name__}.{op} called, but sgl_kernel here is an import-only stub ({why})")


def moe_align_block_size(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
                         cumsum_buffer, pad_sorted_token_ids=False, ignore_invalid_expert=False):
    """sgl_kernel's op by SGLang's JIT build of it (the module docstring); raises where that cannot stand in."""
    _stand_in_or_raise("moe_align_block_size", "ignore_invalid_expert has no JIT build" if ignore_invalid_expert else "")
    from sglang.kernels.ops.moe.moe_align import moe_align_block_size as jit_align

    jit_align(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad, cumsum_buffer,
              pad_sorted_token_ids)


def moe_sum_reduce(input, output, routed_scaling_factor):
    """sgl_kernel's op by SGLang's Triton op of the same sum (the module docstring); raises with
    SMALLM_STUB_ALIGN=0."""
    _stand_in_or_raise("moe_sum_reduce")
    from sglang.kernels.ops.moe.fused_moe_triton_kernels import moe_sum_reduce_triton

    moe_sum_reduce_triton(input, output, routed_scaling_factor)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Unavailable(f"{__name__}.{name}")
