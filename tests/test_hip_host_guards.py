"""A ROCm build compiles the launcher's host code with SMALLM_HIP defined, and CI has no ROCm to compile
it: the gfx950 check (tests/test_kernel_compile.py) builds the device side only. So every use of a
CUDA-only host API (tensor maps, cudaLaunchKernelEx and its attributes, the driver entry point) must sit
where SMALLM_HIP is not defined: inside `#if !defined(SMALLM_HIP)`, the `#else` of `#if
defined(SMALLM_HIP)`, or `#if defined(SMALLM_CUDA)` (smallm_compat.h defines it for nvcc only). This test
follows the conditionals of each source line by line."""

import pathlib
import re

import pytest

HIP = pathlib.Path(__file__).resolve().parent.parent / "hip"
CUDA_ONLY = re.compile(r"\bCUtensorMap\w*|\bcudaLaunch\w*|\bcuuint\d+_t\b|\bCU_TENSOR_MAP\w*|\bcudaGetDriverEntryPoint\w*"
                       r"|\bcudaDriverEntryPoint\w*")
# condition -> whether a SMALLM_HIP build skips its #if branch (else it skips its #else branch)
NOT_HIP = {"!defined(SMALLM_HIP)": True, "defined(SMALLM_HIP)": False, "defined(SMALLM_CUDA)": True}


def hip_visible_lines(text: str):
    """(line number, line) of every line a SMALLM_HIP build compiles, as far as the conditionals on
    SMALLM_HIP / SMALLM_CUDA decide (other conditionals count as taken)."""
    stack = []  # per open conditional: (condition, in its #else)
    for no, line in enumerate(text.splitlines(), 1):
        d = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b\s*(.*)", line)
        if d:
            kind, cond = d.group(1), re.sub(r"\s+", "", d.group(2).split("//")[0])
            if kind == "ifdef":
                cond = f"defined({cond})"
            elif kind == "ifndef":
                cond = f"!defined({cond})"
            if kind in ("if", "ifdef", "ifndef"):
                stack.append((cond, False))
            elif kind in ("else", "elif"):
                stack[-1] = (stack[-1][0], True)
            else:
                stack.pop()
            continue
        hidden = any(cond in NOT_HIP and NOT_HIP[cond] != in_else for cond, in_else in stack)
        if not hidden:
            yield no, line


@pytest.mark.parametrize("name", ["smallm_moe.hip", "smallm_sort.hip", "smallm_readfloor.hip", "smallm_gateup_tma.h",
                                  "smallm_moe_twopass.h", "smallm_moe.h", "smallm_ops.cpp"])
def test_cuda_only_host_apis_are_hidden_from_rocm_builds(name):
    text = (HIP / name).read_text()
    bad = [f"{name}:{no}: {line.strip()}" for no, line in hip_visible_lines(text) if CUDA_ONLY.search(line.split("//")[0])]
    assert not bad, "CUDA-only host APIs outside a CUDA-only conditional:\n" + "\n".join(bad)


def test_the_guard_check_sees_a_misplaced_use():
    """The checker itself: a use after the CUDA-only block's #endif is reported, one inside it is not."""
    text = "#if !defined(SMALLM_HIP)\nCUtensorMap a;\n#endif\ncudaLaunchKernelEx(0);\n"
    seen = [no for no, line in hip_visible_lines(text) if CUDA_ONLY.search(line)]
    assert seen == [4]
    text = "#if defined(SMALLM_HIP)\nhipLaunch();\n#else\ncudaLaunchKernelEx(0);\n#endif\n"
    assert [no for no, line in hip_visible_lines(text) if CUDA_ONLY.search(line)] == []
