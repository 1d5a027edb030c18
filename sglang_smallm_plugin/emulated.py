"""The gfx950 build of the kernels, run on a CPU: for checking the AMD code paths where no AMD GPU is.

`load()` compiles hip/ with a host clang as the gfx950 build (`-D__gfx950__`, wave64, every `#if
SMALLM_HIP` path) plus hip/smallm_emu.h, which runs each block's threads as fibers and stands in for
the AMDGPU builtins (the gfx950 conversions and dot product from the ISA's description), and registers
the same ops as the install under `torch.ops.sglang_smallm_emu`, on CPU tensors. What it checks: the
kernels' wave64 indexing, the shuffled layouts, the synchronisation between lanes, waves and blocks,
and their arithmetic order, against the references. What it cannot: timing, the silicon's own
rounding, or anything of the real HIP toolchain (the ISA check and the ROCm build checks do that).

    from sglang_smallm_plugin import emulated
    ops = emulated.load()            # compiled once per source tree (cached)
    kernels.run_moe(call, ops=ops)   # a call on CPU tensors through the emulated gfx950 kernels

SMALLM_EMU_CUS sets the emulated device's compute units (2 blocks each; default 4), which sets the
kernels' grids; SMALLM_EMU_TIMEOUT_S bounds one launch (default 600 s); SMALLM_EMU_BUILD_DIR the build's
cache (default ~/.cache/sglang-smallm/emu; one folder per source tree, the last KEEP_BUILDS used kept);
SMALLM_EMU_CXX the compiler. SMALLM_EMU_FAULT=1..4 (tests only)
builds an emulation with a deliberate fault that the checks must catch (hip/smallm_emu.h).
"""
from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import re
import shutil
import threading
from typing import Optional

from . import envs
from .isa import hip_dir

SOURCES = ("smallm_moe.hip", "smallm_sort.hip", "smallm_readfloor.hip")
OPS_FILE = "smallm_ops.cpp"
FLAGS = ("-std=c++20", "-O2", "-DSMALLM_EMU", "-D__gfx950__", '-DSMALLM_BUILD_ARCH=\\"gfx950-emulated\\"',  # ninja's shell
         "-Wall", "-Werror", "-Wno-unused-function", "-Wno-unused-variable", "-Wno-unused-but-set-variable")
COMPILERS = ("clang++", "clang++-22", "clang++-21", "clang++-20", "clang++-19", "clang++-18", "clang++-17",
             "clang++-16")

ARCH = "gfx950"  # the build emulated; gate.py's gfx950 rows (caps) apply to it

_lock = threading.Lock()
_ops = None
_ops_fault = 0


MIN_CLANG = 16  # __bf16 vectors on x86-64


@functools.lru_cache(maxsize=None)
def _clang_major(path: str) -> int:
    import subprocess

    try:
        r = subprocess.run([path, "-dumpversion"], capture_output=True, text=True, timeout=30)
        return int(r.stdout.strip().split(".")[0]) if r.returncode == 0 else 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def host_clang() -> Optional[str]:
    """A host clang++ (>= MIN_CLANG) that the emulation can be built with (it needs clang's vector types and
    __bf16), SMALLM_EMU_CXX first; None where there is none."""
    given = envs.EMU_CXX.get().strip()
    for name in ((given,) if given else ()) + COMPILERS:
        path = shutil.which(name)
        if path and _clang_major(path) >= MIN_CLANG:
            return path
    return None


def unavailable_reason() -> Optional[str]:
    """Why the emulation cannot be built here, or None."""
    if host_clang() is None:
        return (f"no host clang++ (>= {MIN_CLANG}) on PATH: the gfx950 emulation is compiled by clang "
                "(Debian: apt install clang-16; or set SMALLM_EMU_CXX)")
    try:
        import torch.utils.cpp_extension  # noqa: F401
    except Exception as e:  # pragma: no cover - torch always has it
        return f"torch.utils.cpp_extension unusable: {e}"
    return None


def _source_key(src: pathlib.Path, flags) -> str:
    h = hashlib.sha256()
    for p in sorted(src.glob("*")):
        if p.suffix in (".h", ".hip", ".cpp"):
            h.update(p.name.encode())
            h.update(p.read_bytes())
    h.update(" ".join(flags).encode())
    return h.hexdigest()[:16]


def build_dir() -> pathlib.Path:
    base = envs.EMU_BUILD_DIR.get().strip()
    if base:
        return pathlib.Path(base)
    return pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "sglang-smallm" / "emu"


KEEP_BUILDS = 8  # build folders kept under build_dir(): the source trees last loaded (each fault is its own build)


def _prune_builds(base: pathlib.Path, current: pathlib.Path, keep: int = KEEP_BUILDS) -> None:
    """Remove the build folders (named by _source_key) under `base` but the `keep` last used and `current`."""
    os.utime(current)
    builds = sorted((p for p in base.iterdir() if p.is_dir() and re.fullmatch(r"[0-9a-f]{16}", p.name)),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for p in builds[keep:]:
        if p != current:
            shutil.rmtree(p, ignore_errors=True)


def load(verbose: bool = False, fault: Optional[int] = None):
    """Build (once per source tree) and load the emulated gfx950 kernels; returns torch.ops.sglang_smallm_emu.
    `fault` (tests only; one per process; default SMALLM_EMU_FAULT, else 0): an emulation with a deliberate
    fault that the checks must catch (hip/smallm_emu.h)."""
    global _ops, _ops_fault
    if fault is None:
        envs.check((envs.EMU_FAULT, envs.EMU_CUS, envs.EMU_ORDER, envs.EMU_TIMEOUT_S))
        fault = int(envs.EMU_FAULT.get().strip() or 0)
    with _lock:
        if _ops is not None:
            if _ops_fault != fault:
                raise RuntimeError(f"sglang-smallm: the emulation is loaded with fault {_ops_fault} in this process")
            return _ops
        why = unavailable_reason()
        if why:
            raise RuntimeError(f"sglang-smallm: the gfx950 emulation cannot be built: {why}")
        import torch
        from torch.utils import cpp_extension

        src = hip_dir()
        flags = list(FLAGS) + ([f"-DSMALLM_EMU_FAULT={int(fault)}"] if fault else [])
        out = build_dir() / _source_key(src, flags)
        out.mkdir(parents=True, exist_ok=True)
        sources = []
        for name in SOURCES:  # .hip files as C++ translation units of the host compiler
            unit = out / (pathlib.Path(name).stem + "_emu.cpp")
            text = f'// generated by sglang_smallm_plugin/emulated.py\n#include "{name}"\n'
            if not unit.exists() or unit.read_text() != text:
                unit.write_text(text)
            sources.append(str(unit))
        sources.append(str(src / OPS_FILE))
        old = os.environ.get("CXX")
        os.environ["CXX"] = host_clang()
        try:
            cpp_extension.load(name="sglang_smallm_plugin_emu", sources=sources, extra_include_paths=[str(src)],
                               extra_cflags=flags, build_directory=str(out), verbose=verbose,
                               is_python_module=False)
        finally:
            if old is None:
                os.environ.pop("CXX", None)
            else:
                os.environ["CXX"] = old
        _prune_builds(out.parent, out)
        _ops, _ops_fault = torch.ops.sglang_smallm_emu, fault
        return _ops


def describe() -> str:
    """One line for the tools' headers: what runs, on what."""
    return (f"the gfx950 build emulated on this CPU ({envs.EMU_CUS.get().strip() or 4} CUs of 2 resident blocks, wave64; "
            "hip/smallm_emu.h: the kernels' own code, the gfx950 conversions as the ISA describes them; "
            "not the silicon, no timing)")


# ---------------------------------------------------------------- bounds checks (a CPU stand-in for memcheck)
_PAGE = 4096


def _mprotect_none(addr: int, length: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if libc.mprotect(ctypes.c_void_p(addr), ctypes.c_size_t(length), 0) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")


def guarded(t, where: str = "end", exposed: int = 0):
    """A copy of CPU tensor `t` that touches an inaccessible page: its last byte just below one (`where` =
    "end") or its first byte just above one ("start"), so that a kernel reading or writing past that edge
    faults instead of reading a neighbour. `exposed` (tests of the check itself): that many of the tensor's
    own bytes at the edge lie in the inaccessible page too. At the end, the copy is aligned as far as its
    byte size allows (16 bytes for every tensor the ops require aligned). Returns the tensor; its memory
    lives as long as it does."""
    import ctypes
    import mmap

    import torch

    t = t.contiguous()
    nbytes = t.numel() * t.element_size()
    pages = (nbytes + _PAGE - 1) // _PAGE + 2
    mm = mmap.mmap(-1, pages * _PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    if where == "end":
        offset = (pages - 1) * _PAGE - nbytes + exposed
    elif where == "start":
        offset = _PAGE - exposed
    else:
        raise ValueError(f"guarded: where must be 'end' or 'start', not {where!r}")
    flat = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=offset)
    flat.copy_(t.view(-1).view(torch.uint8))  # before the edges are closed (exposed bytes get the data too)
    _mprotect_none(base, _PAGE)
    _mprotect_none(base + (pages - 1) * _PAGE, _PAGE)
    out = flat.view(t.dtype).view(t.shape)
    out._smallm_guard_map = mm  # the mapping stays while the tensor does
    return out


def guard_call(call, where: str = "end"):
    """`call` with every tensor the kernels read (x, weights, scales, routing) copied by `guarded`, and the
    kernels' workspace for its shape replaced by guarded buffers: run it through `ops` in a subprocess, where
    an access past an edge kills the process (the test reads the exit status)."""
    import dataclasses

    from . import kernels

    names = ("x", "w13", "w2", "w13_scale", "w2_scale", "topk_weights", "topk_ids")
    fields = {f: guarded(getattr(call, f), where) for f in names if getattr(call, f) is not None}
    ws = kernels.Workspace("cpu", call.hidden, call.inter)
    ws.h, ws.y, ws.sync = (guarded(ws.h, where), guarded(ws.y, where), guarded(ws.sync, where))
    kernels.Workspace._by_device[("cpu", None)] = ws
    return dataclasses.replace(call, **fields), sorted(fields)


def weight_reads(ops, run, tensors, granule: int = 16):
    """Run `run()` on the emulation counting the weight bytes the kernels load (load_weights and
    load_weight_word, hip/smallm_compat.h) per `granule` bytes of each of `tensors` (at most 4). Returns
    ([int32 counts per granule, one tensor per input], bytes loaded outside every tensor): the byte model
    checked, e.g. a touched expert's weights read exactly once per call."""
    counts = [_counts_for(t, granule) for t in tensors]
    ops.emu_reset_reads()
    try:
        for t, c in zip(tensors, counts):
            ops.emu_track_reads(t, c, granule)
        run()
    finally:
        untracked = ops.emu_reset_reads()
    return counts, untracked


def run_checking_reads(ops, call, out=None):
    """Run the MoE `call` once on the emulation (into `out`, as kernels.run_moe), its weight loads counted and
    checked against the byte model: (None or what differs, bytes loaded again at rows' last vectors), as
    reference/reads.py check_weight_reads."""
    import torch

    from . import kernels
    from .calls import SHUFFLE16
    from .reference.reads import check_weight_reads

    w13, w2 = call.w13.view(torch.uint8), call.w2.view(torch.uint8)
    (c13, c2), untracked = weight_reads(ops, lambda: kernels.run_moe(call, out=out, ops=ops), [w13, w2])
    return check_weight_reads(w13, w2, call.topk_ids, call.inter, call.layout == SHUFFLE16, c13, c2, untracked)


def _counts_for(t, granule: int):
    import torch

    return torch.zeros((t.numel() * t.element_size() + granule - 1) // granule, dtype=torch.int32)
