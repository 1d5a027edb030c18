"""CPU checks of the one kernel source: gfx950 ISA with clang 22 (ziglang), gfx942 gating, nvcc sm_90a."""

import os
import re
import pathlib
import shutil
import subprocess
import sys

import pytest

from sglang_smallm_plugin import isa

HIP = pathlib.Path(__file__).resolve().parent.parent / "hip"


@pytest.fixture(scope="module")
def gfx950_build(tmp_path_factory):
    """[(path of the .s, rows)] per source, compiled once for the module (-Wall -Wextra -Werror)."""
    return isa.compile_all("gfx950", tmp_path_factory.mktemp("isa"))


@pytest.fixture(scope="module")
def gfx950(gfx950_build):
    return [r for _, rows in gfx950_build for r in rows]


def _moe(rows):
    return [r for r in rows if r["kernel"].startswith("moe ")]


def _twopass(r):
    return " gate/up " in r["kernel"] or r["kernel"].endswith(" down")


def test_gfx950_compiles_every_kernel_without_scratch(gfx950):
    names = sorted(r["kernel"] for r in gfx950)
    assert names == sorted([f"moe {f} {l}{v}" for f in ("fp8_block128", "mxfp4") for l in ("row_major", "shuffle16x16")
                            for v in ("", " gate/up 8x4", " gate/up 8x8", " gate/up 4x8", " down")]
                           + [f"sort {f} {p}" for f in ("aiter", "triton") for p in ("compact", "distributed")]
                           + ["read floor (bench)"])
    for r in gfx950:
        assert r["scratch"] == 0 and r["vgpr_spill"] == 0, r
        assert r["counts"]["scratch_store"] == 0 and r["counts"]["scratch_load"] == 0, r


def test_gfx950_uses_its_scale_convert_and_dot_instructions(gfx950):
    """Dot products with x (bf16): weights converted to bf16 pairs, then bf16 dot2; products with
    the fp32 intermediate: weights converted to fp32 pairs (in the block kernel multiplied on v_pk_fma_f32, at
    least one per converted pair). The block kernels do both, the two-pass gate/up kernel the first, its down
    kernel the second."""
    for r in _moe(gfx950):
        c, k = r["counts"], r["kernel"]
        bits = "fp8" if "fp8" in k else "fp4"
        dot_x = not k.endswith(" down")
        dot_h = " gate/up " not in k
        assert (c[f"v_cvt_scalef32_pk_bf16_{bits}"] > 0) == dot_x, r
        assert (c["v_dot2c_f32_bf16"] + c["v_dot2_f32_bf16"] > 0) == dot_x, r
        assert (c[f"v_cvt_scalef32_pk_f32_{bits}"] > 0) == dot_h, r
        assert c["global_load_dwordx4"] > 0, r
        if not _twopass(r):  # the block kernel's down: its fp32 products on packed FMAs (two a lane an instruction)
            assert c["v_pk_fma_f32"] >= c[f"v_cvt_scalef32_pk_f32_{bits}"], r


def test_gfx950_cross_block_handoff_is_device_coherent(gfx950):
    """The block kernel: phase 1 -> phase 2 and the slot sums hand data between
    workgroups that may sit on different XCDs: the agent-scope release / acquire must lower to L2
    write-back / invalidate. The two-pass kernels hand nothing between workgroups of one launch
    (h crosses the kernel boundary), so they have neither."""
    for r in _moe(gfx950):
        has = r["counts"]["buffer_wbl2"] > 0 and r["counts"]["buffer_inv"] > 0
        assert has != _twopass(r), r


def test_gfx950_block_kernel_keeps_the_next_items_weights_in_flight(gfx950_build, waitcnt):
    """gfx950 counts a wave's loads in order (vmcnt): the block kernel's item loop keeps the next item's
    phase-1 weights in flight through the current item's dot products only where nothing it waits for
    comes after them and none of them sits under a guard (docs/gfx950-isa-notes.md). In every block-kernel
    build (both formats, both layouts) some path from the loop's eight weight loads reaches the dot
    products with no wait that covers them (examples/isa/waitcnt.py), and the ticket is an atomic
    increment, whose result the compiler waits for where it is used, not clang's wave-wide rewrite of
    an add, which it reads at once. Before these (2026-12-04) no build had the eight loads in one block."""
    path = next(p for p, _ in gfx950_build if p.name.startswith("smallm_moe."))
    kernels = waitcnt.parse(path.read_text())
    block = {n: lines for n, lines in kernels.items() if "smallm_moe_kernel" in n and n.endswith("Li0EEEvNS_7MoeArgsE")}
    assert len(block) == 4, sorted(kernels)
    for name, lines in block.items():
        assert any(ok for _, ok in waitcnt.weight_groups_in_flight(lines)), name
        # the tickets (at entry, before the loop, in the loop), each returning its old value (sc0); the
        # first two go to shared memory at once, the loop's is waited for where it is used
        tickets = [i for i, line in enumerate(lines) if re.match(r"\s+global_atomic_inc\b.*\bsc0\b", line)]
        assert len(tickets) == 3, (name, [lines[i] for i in tickets])
        after = [line.strip() for line in lines[tickets[-1] + 1:tickets[-1] + 4]]
        assert not any(line.startswith("s_waitcnt") and "vmcnt(0)" in line for line in after), (name, after)
        assert not any("v_readfirstlane" in line for line in after), (name, after)


def test_gfx950_block_kernel_pair_steps_stay_within_the_hbm_issue_budget(gfx950_build, valu_per_byte):
    """The block kernel's pair steps read from the assembly (examples/isa/valu_per_byte.py; docs/gfx950-isa-notes.md):
    vector instructions per 16-byte weight vector per pair in phase 1 (gate/up: scale-convert, v_dot2c, the x reads)
    and phase 2 (down: fp32 conversions, v_pk_fma_f32), each in its step taking two pairs of an expert (each vector
    converted once for both) and its step taking one, against MI355X's ~79 per KiB of HBM. As written (2026-12-05):
    FP8 17.5 / 13.5 (phase 1, one pair / two) and 19 / 14.75 (phase 2, two rows a thread), MXFP4 34 / 25.75 and
    35 / 26.75; and each phase's LDS bytes per vector and pair. A change that
    makes a step heavier lowers the pairs per expert an MI355X can take before its arithmetic, not HBM, sets the pace:
    one instruction more in any of these steps, and this fails. The counts are the pinned ziglang's clang's (Makefile):
    another clang may schedule otherwise; update the pin and these bounds together."""
    path = next(p for p, _ in gfx950_build if p.name.startswith("smallm_moe."))
    rows = {r["kernel"]: r for r in valu_per_byte.summary(path.read_text())}
    assert set(rows) == {f"{f} {l}" for f in ("fp8_block128", "mxfp4") for l in ("row_major", "shuffle16x16")}
    # (one pair, two pairs) per phase; a step covers two vectors (phase 1: gate and up) or one (phase 2), so one
    # instruction more adds 1/2 or 1/4 (phase 1), 1 or 1/2 (phase 2)
    bounds = {"fp8": dict(up_one=17.5, up_two=13.5, down_one=19.0, down_two=14.75),
              "mxfp4": dict(up_one=34.0, up_two=25.75, down_one=35.0, down_two=26.75)}
    for name, r in rows.items():
        for key, bound in bounds["fp8" if name.startswith("fp8") else "mxfp4"].items():
            assert r[key] <= bound, (name, key, r)
        assert r["steps"] >= 2 and r["down_steps"] >= 2, (name, r)
        # Qwen3.5 at its gfx950 caps averages 1.3 (FP8 at 20 tokens, I = 256) to 1.7 pairs per expert (48 at I = 128);
        # MiniMax-M3-like MXFP4 at its cap of 40, 2.15
        assert r["pairs_at_budget"] > (5.5 if name.startswith("fp8") else 2.95), (name, r)
        # LDS bytes a lane reads per vector and pair: phase 1's x once for a gate and an up row, phase 2's h once for
        # a thread's two rows (kRows2): FP8 16 / 32, MXFP4 32 / 64 (one row a thread read 64 / 128); at 128 LDS bytes
        # a CU cycle the reads take HBM's time at 7.4 (FP8) and 3.7 (MXFP4) pairs per expert, past the issue budget
        fp8 = name.startswith("fp8")
        assert (r["up_lds"], r["down_lds"]) == ((16.0, 32.0) if fp8 else (32.0, 64.0)), (name, r)
        assert r["pairs_at_lds"] > r["pairs_at_budget"], (name, r)


def test_gfx950_sort_kernels(gfx950):
    """The sort: shared-memory atomics only in the distributed histogram; the fused MXFP8 encode
    (round to nearest even) only in the AITER format; byte stores for the sorted scales; no
    cross-workgroup handoff at all (each workgroup plans on its own)."""
    sorts = {r["kernel"]: r["counts"] for r in gfx950 if r["kernel"].startswith("sort ")}
    for name, c in sorts.items():
        assert (c["ds_add_u32"] > 0) == name.endswith("distributed"), (name, c)
        assert (c["v_rndne_f32"] > 0) == (" aiter " in name), (name, c)
        assert c["buffer_wbl2"] == 0 and c["buffer_inv"] == 0, (name, c)
    assert sorts["sort aiter compact"]["global_store_byte"] > 0


def test_gfx942_build_has_gfx950_path_gated_off(tmp_path):
    rows = [r for _, rs in isa.compile_all("gfx942", tmp_path) for r in rs]
    assert len(rows) == 25  # 4 moe + 12 gate/up + 4 down + 4 sort + read floor
    for r in rows:
        assert all(r["counts"][k] == 0 for k in r["counts"] if k.startswith("v_cvt_scalef32")), r


def test_gfx950_builtins_rejected_for_gfx942(tmp_path):
    src = tmp_path / "probe.hip"
    src.write_text('#define __global__ __attribute__((global))\nextern "C" __global__ void k(unsigned* p) {\n'
                   '  typedef float f2 __attribute__((ext_vector_type(2)));\n'
                   '  f2 v = __builtin_amdgcn_cvt_scalef32_pk_f32_fp8(p[0], 1.0f, false); p[1] = (unsigned)v.x; }\n')
    import sys

    base = [sys.executable, "-m", "ziglang", "clang", "-x", "hip", "--offload-device-only", "-nogpuinc", "-nogpulib",
            "-O3", "-S", str(src), "-o", str(tmp_path / "probe.s")]
    assert subprocess.run(base + ["--offload-arch=gfx950"], capture_output=True).returncode == 0
    r = subprocess.run(base + ["--offload-arch=gfx942"], capture_output=True, text=True)
    assert r.returncode != 0 and "needs target feature" in r.stderr


def _nvcc():
    for c in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if c and os.path.exists(c):
            return c
    return None


def _nvcc_sm90a(*args, timeout=900, target=("-arch=sm_90a",)):
    """nvcc for sm_90a at -O3, C++17, every warning an error, with `args` (sources, -o, extra flags);
    `target` names the architecture flags (a source's own build line may name them otherwise)."""
    return subprocess.run([_nvcc(), *target, "-O3", "-std=c++17", "-Werror", "all-warnings", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def _ptxas_spills(stderr):
    """The lines of a `-Xptxas -v` report that name a spill of more than 0 bytes."""
    return [line for line in stderr.splitlines() if "spill" in line and " 0 bytes spill stores" not in line]


@pytest.fixture(scope="module")
def sm90a_build(tmp_path_factory):
    """source -> (nvcc result, its sm_90a PTX text): one compile per source for every test that reads it
    (the object compile with warnings as errors keeps its intermediates)."""
    if _nvcc() is None:
        pytest.skip("nvcc not installed on this machine (the CUDA compile check needs it)")
    done = {}

    def build(source):
        if source not in done:
            out = build.dirs[source] = tmp_path_factory.mktemp(source)
            cu = out / f"{source}.cu"
            cu.write_text(f'#include "{HIP / (source + ".hip")}"\n')
            r = _nvcc_sm90a("-c", cu, "-o", out / "k.o", "-keep", "-keep-dir", out)
            ptx = list(out.glob("*.compute_90a.ptx"))
            done[source] = (r, ptx[0].read_text() if ptx else "")
        return done[source]

    build.dirs = {}  # source -> the folder of its kept intermediates (PTX, cubin)
    return build


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed on this machine (the CUDA compile check needs it)")
@pytest.mark.parametrize("source", ["smallm_moe", "smallm_sort", "smallm_readfloor"])
def test_cuda_sm90a_compiles(sm90a_build, source):
    r, _ = sm90a_build(source)
    assert r.returncode == 0, r.stderr[-4000:]


def _hip_host_toolchain():
    """A clang with the HIP wrapper headers and the HIP runtime headers (Debian: clang-16 and
    libamdhip64-dev, which .ci/run installs where it can), or None."""
    if not os.path.exists("/usr/include/hip/hip_runtime.h"):
        return None
    for name in ("clang-16", "clang-17", "clang-18", "clang-19", "clang-15", "clang"):
        c = shutil.which(name)
        if not c:
            continue
        r = subprocess.run([c, "-print-resource-dir"], capture_output=True, text=True)
        if r.returncode == 0 and os.path.exists(os.path.join(r.stdout.strip(), "include", "__clang_hip_runtime_wrapper.h")):
            return c
    return None


@pytest.mark.skipif(_hip_host_toolchain() is None,
                    reason="no clang with HIP wrapper headers and /usr/include/hip (apt: clang-16 libamdhip64-dev)")
@pytest.mark.parametrize("source", ["smallm_moe", "smallm_sort", "smallm_readfloor"])
def test_hip_host_launchers_compile(source):
    """The ROCm host side (launchers, occupancy, dynamic shared memory, env switches) type-checks
    under HIP with warnings as errors: the gfx950 ISA check above compiles device code only, and no
    machine here has ROCm. The HIP headers are Debian's (ROCm 5.2); the arch is a host-side stand-in."""
    r = _hip_host_syntax_check(HIP / f"{source}.hip")
    assert r.returncode == 0, r.stderr[-4000:]


def _hip_host_syntax_check(src, *flags):
    """The host side of `src` type-checked under HIP with the HIP runtime headers and warnings as errors (clang
    with HIP wrapper headers, Debian's ROCm 5.2 headers; gfx90a a host-side stand-in for the arch)."""
    return subprocess.run([_hip_host_toolchain(), "-x", "hip", "--offload-arch=gfx90a", "--offload-host-only",
                           "--rocm-path=/usr", "-nogpulib", "-std=c++20", "-Wall", "-Wextra", "-Werror",
                           "--system-header-prefix=hip/", '-DSMALLM_BUILD_ARCH="gfx950"', *flags, "-fsyntax-only",
                           str(src)], capture_output=True, text=True, timeout=600)


def _hip_device_compile(src, out, *flags):
    """gfx950 device code of `src` the way hipcc builds it: the HIP runtime headers included (Debian's, from
    libamdhip64-dev) and clang's HIP wrapper headers (the resource dir of the clang that has them), compiled by
    clang 22 from ziglang (the one clang here that knows gfx950). clang 22 no longer defines
    __AMDGCN_WAVEFRONT_SIZE, which those headers read: given as gfx950's wave size."""
    resource = subprocess.run([_hip_host_toolchain(), "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
    cmd = [sys.executable, "-m", "ziglang", "clang", "-x", "hip", "--offload-arch=gfx950", "--offload-device-only",
           "--rocm-path=/usr", "-nogpulib", f"-resource-dir={resource}", "-D__AMDGCN_WAVEFRONT_SIZE=64",
           "--system-header-prefix=hip/", "-Wall", "-Wextra", "-Werror", '-DSMALLM_BUILD_ARCH="gfx950"', *flags,
           "-S", str(src), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, " ".join(cmd) + "\n" + r.stderr[-4000:]
    return isa.instructions(out.read_text())


def _hipify_like_torch(build):
    """hip/ copied into `build` and hipified as torch's CUDAExtension does under a ROCm torch (the install-time
    build, setup.py): torch.utils.hipify over the extension's sources, following their includes in hip/.
    -> {source name: the file the build compiles}."""
    import contextlib
    import io

    from torch.utils.hipify import hipify_python

    shutil.copytree(HIP, build / "hip")
    sources = [build / "hip" / s for s in (*isa.SOURCES, "smallm_ops.cpp")]
    with contextlib.redirect_stdout(io.StringIO()):
        res = hipify_python.hipify(project_directory=str(build), output_directory=str(build),
                                   header_include_dirs=[str(build / "hip")], includes=[os.path.join(str(build), "*")],
                                   extra_files=[str(s) for s in sources], show_detailed=False,
                                   is_pytorch_extension=True, hipify_extra_files_only=True)
    return {s.name: pathlib.Path(res[str(s)].hipified_path or s) if str(s) in res else s for s in sources}


@pytest.mark.skipif(_hip_host_toolchain() is None,
                    reason="no clang with HIP wrapper headers and /usr/include/hip (apt: clang-16 libamdhip64-dev)")
@pytest.mark.parametrize("source", isa.SOURCES)
def test_rocm_install_build_compiles_the_isa_that_is_checked(gfx950_build, tmp_path, source):
    """The gfx950 ISA the checks above read (`sglang-smallm isa`: no headers, SMALLM_DEVICE_ONLY) is the ISA the
    install builds on a ROCm torch: there torch's CUDAExtension hipifies the sources (renaming them, and their
    headers, *_hip) and hipcc compiles them with the HIP runtime headers and torch's ROCm flags. Both ways, every
    kernel's instructions are the same, register for register. Until 2026-12-04 they were not: with the headers,
    HIP's own float4 changed the two-pass down kernels' h staging (hip/smallm_compat.h)."""
    from torch.utils import cpp_extension as ce

    checked = isa.instructions(next(p for p, _ in gfx950_build if p.name.startswith(pathlib.Path(source).stem + ".")).read_text())
    assert checked
    setup_py = (HIP.parent / "setup.py").read_text()
    rocm = ["-O3", "-std=c++20", "-fno-gpu-rdc"]  # setup.py's ROCm "nvcc" flags; -fno-gpu-rdc: torch adds it with them
    assert all(f in setup_py for f in rocm[:2]) and "--offload-arch={arch}" in setup_py
    plain = _hip_device_compile(HIP / source, tmp_path / "plain.s", *rocm, "-D__HIP_PLATFORM_AMD__=1")
    hipified = _hipify_like_torch(tmp_path / "build")
    built = _hip_device_compile(hipified[source], tmp_path / "installed.s", *rocm, *ce.COMMON_HIP_FLAGS,
                                *ce.COMMON_HIPCC_FLAGS)
    for name, ins in checked.items():
        assert plain.get(name) == ins, f"{isa.kernel_label(name)}: with the HIP headers {len(plain.get(name, []))} instructions, checked {len(ins)}"
        assert built.get(name) == ins, f"{isa.kernel_label(name)}: hipified as installed {len(built.get(name, []))} instructions, checked {len(ins)}"
    assert set(plain) == set(built) == set(checked)


@pytest.mark.skipif(_hip_host_toolchain() is None,
                    reason="no clang with HIP wrapper headers and /usr/include/hip (apt: clang-16 libamdhip64-dev)")
def test_rocm_install_build_hipified_host_side(tmp_path):
    """What the ROCm install compiles after hipify, host side: the launchers type-check with torch's ROCm flags
    and warnings as errors, and the op file asks for no CUDA header (a ROCm torch has none; it is compiled
    against torch's ROCm headers, which no machine here has)."""
    from torch.utils import cpp_extension as ce

    hipified = _hipify_like_torch(tmp_path / "build")
    for source in isa.SOURCES:
        r = _hip_host_syntax_check(hipified[source], *ce.COMMON_HIP_FLAGS, *ce.COMMON_HIPCC_FLAGS)
        assert r.returncode == 0, source + "\n" + r.stderr[-4000:]
    ops = hipified["smallm_ops.cpp"].read_text()
    includes = re.findall(r"#include\s*[<\"]([^>\"]+)", ops)
    assert not [i for i in includes if "cuda" in i.lower()], includes
    assert "c10/hip/HIPStream.h" in includes or "ATen/hip/impl/HIPStreamMasqueradingAsCUDA.h" in includes, includes


ROCM_HEADERS = pathlib.Path(os.environ.get("SMALLM_ROCM_HEADERS", HIP.parent / ".rocm-headers" / "usr" / "include"))


def _rocm_torch_include(out):
    """torch's own headers as a ROCm build of this torch ships them: PyTorch's ROCm build
    (tools/amd_build/build_amd.py) runs the same torch.utils.hipify over c10/cuda and ATen/cuda and installs
    the results as c10/hip and ATen/hip; their `#ifdef USE_ROCM` branches are in the CUDA wheel's copies too.
    The CUDA directories are left out (a ROCm torch has no c10/cuda), so including one fails."""
    import contextlib
    import io

    import torch
    from torch.utils.hipify import hipify_python

    inc = os.path.join(os.path.dirname(torch.__file__), "include")
    with contextlib.redirect_stdout(io.StringIO()):
        hipify_python.hipify(project_directory=inc, output_directory=str(out), show_detailed=False, show_progress=False,
                             includes=[os.path.join(inc, "c10", "cuda", "*"), os.path.join(inc, "ATen", "cuda", "*")],
                             is_pytorch_extension=False)
    for d in (out / "c10" / "cuda", out / "ATen" / "cuda"):
        shutil.rmtree(d)
    assert (out / "c10" / "hip" / "HIPStream.h").exists() and (out / "c10" / "hip" / "HIPGuard.h").exists()
    return out


@pytest.mark.skipif(not (ROCM_HEADERS / "hip" / "hip_runtime_api.h").exists(),
                    reason=f"no ROCm >= 5.3 HIP headers at {ROCM_HEADERS} (.ci/rocm_headers.sh unpacks trixie's there; "
                           "or set SMALLM_ROCM_HEADERS)")
@pytest.mark.skipif(shutil.which("c++") is None, reason="no host C++ compiler (c++)")
def test_rocm_install_build_op_file_compiles_against_rocm_torch_headers(tmp_path):
    """The one source of the ROCm install that no other check compiles: the hipified op file
    (smallm_ops_hip.cpp), which CUDAExtension hands to the host C++ compiler with torch's ROCm flags
    (COMMON_HIP_FLAGS), the package's cxx flags and torch's include paths plus ROCm's. Type-checked here against
    this torch's headers hipified as its ROCm build ships them and the HIP 5.7 runtime headers, with warnings as
    errors in the package's code. It models a ROCm torch of this version, not one built by AMD; the guard and
    stream it uses (c10::cuda::CUDAGuard, getCurrentCUDAStream, kept by this torch's hipify) are the ones that
    those headers declare."""
    from torch.utils import cpp_extension as ce

    hipified = _hipify_like_torch(tmp_path / "build")
    torch_inc = _rocm_torch_include(tmp_path / "rocm_torch_include")
    _op_file_type_check(hipified["smallm_ops.cpp"], torch_inc, ROCM_HEADERS, *ce.COMMON_HIP_FLAGS,
                        '-DSMALLM_BUILD_ARCH="gfx950"')


def _op_file_type_check(src, torch_inc, runtime_inc, *flags):
    """`src` (the op file) through the host C++ compiler as CUDAExtension compiles it, with setup.py's cxx flags
    (-O3 -std=c++20), `flags`, torch's include paths and the GPU runtime's headers; -Wall -Wextra -Werror on
    the package's code (torch's and the runtime's headers as system headers)."""
    torch_inc = pathlib.Path(torch_inc)
    py_inc = __import__("sysconfig").get_paths()["include"]
    cmd = ["c++", "-fsyntax-only", *flags, "-O3", "-std=c++20", "-Wall", "-Wextra", "-Werror", f"-I{src.parent}",
           "-isystem", str(torch_inc), "-isystem", str(torch_inc / "torch" / "csrc" / "api" / "include"),
           "-isystem", str(runtime_inc), "-isystem", py_inc, str(src)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, " ".join(cmd) + "\n" + r.stderr[-4000:]


def _cuda_include():
    """The CUDA toolkit's runtime headers (where torch's CUDAExtension looks: CUDA_HOME, CUDA_PATH,
    /usr/local/cuda, beside nvcc), or None."""
    nvcc = _nvcc()
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             str(pathlib.Path(nvcc).resolve().parent.parent) if nvcc else None]
    for home in filter(None, homes):
        inc = pathlib.Path(home) / "include"
        if (inc / "cuda_runtime_api.h").exists():
            return inc
    return None


@pytest.mark.skipif(_cuda_include() is None, reason="no CUDA toolkit headers (CUDA_HOME, /usr/local/cuda, beside nvcc) on this machine")
@pytest.mark.skipif(shutil.which("c++") is None, reason="no host C++ compiler (c++)")
def test_cuda_install_build_op_file_type_checks():
    """The op file as the CUDA install compiles it (host compiler, torch's CUDA headers), warnings as errors."""
    import torch

    _op_file_type_check(HIP / "smallm_ops.cpp", pathlib.Path(torch.__file__).parent / "include", _cuda_include(),
                        '-DSMALLM_BUILD_ARCH="sm_90a"')


def _ptx_entries(text):
    """PTX text -> {mangled kernel name: its text up to the next kernel}."""
    entries = re.split(r"\n\s*// \.globl\s+", text)
    return {e.split()[0]: e for e in entries[1:]}


@pytest.fixture(scope="module")
def sm90a_ptx(sm90a_build):
    r, text = sm90a_build("smallm_moe")
    assert r.returncode == 0 and text, r.stderr[-4000:]
    return _ptx_entries(text)


def test_tma_gateup_kernels_take_tiles_and_wgmma(sm90a_ptx):
    """hip/smallm_gateup_tma.h (SMALLM_GATEUP_TMA=1): its five kernels (N = 8 to 40 columns of x) read W13
    by 2-D TMA tile copies and the block scales by bulk copies on transaction barriers, and multiply with
    wgmma taking both operands from shared memory (two descriptors, no register A), FP8 e4m3; x staged by
    generic stores is fenced for wgmma's async-proxy reads; no mma.sync and no e4m3 -> f16 conversion of
    weights (the 8 cvt, one per bf16 pair of a 16-value unit, are x's hi parts read back for the lo
    parts). The slice sum is a plain kernel."""
    tma = {n: b for n, b in sm90a_ptx.items() if "smallm_gateup_tma_kernel" in n}
    kinds = sorted(tuple(map(int, re.search(r"ILi(\d)ELb(\d)E", n).groups())) for n in tma)
    assert kinds == [(nt, step) for nt in (1, 2, 3, 4, 5) for step in (0, 1)], sorted(sm90a_ptx)
    for name, body in tma.items():
        nt = int(re.search(r"ILi(\d)E", name).group(1))
        assert body.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") >= 1, name
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in body, name
        assert "mbarrier.try_wait.parity.shared::cta.b64" in body and "mbarrier.arrive.expect_tx" in body, name
        ss = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{8 * nt}k32\.f32\.e4m3\.e4m3\s*\{{[^}}]*\}},\s*%rd\d+,\s*%rd\d+", body)
        assert ss, name
        assert "wgmma.wait_group.sync.aligned 0" in body and "fence.proxy.async.shared::cta" in body, name
        assert "mma.sync" not in body and body.count("cvt.rn.f16x2.e4m3x2") == 8, name
        # kStepSums (SMALLM_GATEUP_TMA=2): every wgmma starts a fresh accumulator (scale-d predicate
        # false), one commit per K block; else the K block's first step only, one commit per job
        fresh = len(re.findall(r"setp\.ne\.b32\s+p, 0, 0;", body))  # (the wgmma's own predicate p)
        step = int(re.search(r"ILi\dELb(\d)E", name).group(1))
        assert (fresh, body.count("wgmma.commit_group.sync.aligned")) == ((16, 4) if step else (4, 1)), name
        assert "griddepcontrol.launch_dependents" in body, name
    sums = [b for n, b in sm90a_ptx.items() if "smallm_tma_slice_sum_kernel" in n]
    assert len(sums) == 1 and "griddepcontrol.wait" in sums[0] and "griddepcontrol.launch_dependents" in sums[0]


def test_tma_moe_kernels_stream_both_projections(sm90a_ptx):
    """hip/smallm_gateup_tma.h smallm_moe_tma_kernel (SMALLM_GATEUP_TMA=3): its five kernels (NT2 = 1-5:
    down N = 8 to 40, gate/up N = 8 ceil(NT2 / 2)) copy W13 and W2 by 2-D TMA tiles and h by bulk copies
    on transaction barriers, multiply both projections with wgmma from shared memory (e4m3, a fresh
    accumulator per 32-k step), and order their work through global counters (atomics, acquire loads,
    the async-proxy fence for h written by generic stores); no mma.sync and no programmatic-dependent
    launch (a cooperative launch instead)."""
    moe = {n: b for n, b in sm90a_ptx.items() if "smallm_moe_tma_kernel" in n}
    assert sorted(int(re.search(r"ILi(\d)E", n).group(1)) for n in moe) == [1, 2, 3, 4, 5], sorted(sm90a_ptx)
    for name, body in moe.items():
        nt2 = int(re.search(r"ILi(\d)E", name).group(1))
        nt = (nt2 + 1) // 2
        assert body.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") >= 2, name
        assert body.count("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") >= 4, name
        for n in {8 * nt, 8 * nt2}:
            assert re.search(rf"wgmma\.mma_async\.sync\.aligned\.m64n{n}k32\.f32\.e4m3\.e4m3\s*\{{", body), (name, n)
        assert "setp.ne.b32 p, 0, 0;" in body and "setp.ne.b32 p, 1, 0;" not in body, name  # fresh accumulators only
        assert "fence.proxy.async.global" in body and "ld.acquire.gpu.global.u32" in body, name
        assert re.search(r"atom\.global\.(add|inc)\.u32", body) and "atom.global.exch.b32" in body, name
        assert "mma.sync" not in body and "griddepcontrol" not in body, name
    text = (HIP / "smallm_moe.hip").read_text()
    assert "launch_kernel(kernel, grid, kTmaThreads, smem, stream, LaunchOrder::kCooperative, m13, m2, a)" in text
    launch = (HIP / "smallm_launch.h").read_text()  # kCooperative -> the cooperative attribute
    assert re.search(r"if \(order == LaunchOrder::kCooperative\) \{\s*attr\[0\]\.id = cudaLaunchAttributeCooperative;", launch)


@pytest.mark.parametrize("kernel,f16_scales,lane_scales", [
    ("smallm_gateup_mma_kernelILi1ELi0ELi4E", True, True), ("smallm_gateup_mma_kernelILi1ELi1ELi4E", True, True),
    ("smallm_gateup_mma_kernelILi1ELi1ELi8E", True, False), ("smallm_gateup_mma_kernelILi1ELi0ELi8E", True, False),
    ("smallm_down_mma_kernelILi1ELi0E", None, None), ("smallm_down_mma_kernelILi1ELi1E", None, None)])
def test_mxfp4_tensor_core_kernels_use_mma(sm90a_ptx, kernel, f16_scales, lane_scales):
    """The MXFP4 (format 1) tensor-core kernels, both layouts, on f16 MMAs, with e2m1 decoded by byte
    permutes (e2m1x8_to_f16x2: prmt). The gate/up scales the decoded values in f16 relative to a quad's
    largest scale (hmul2) for jobs of several pairs; where a warp holds four steps (kJ = 4, D <= 4096) a
    job of one pair takes each lane's e8m0 on fp32 sums instead and undoes the decode's 2^-14 (the f32
    constant 16384, 0f46800000 in PTX), which the kJ = 8 gate/up (lane scales would spill there) has not.
    The down whose jobs hold four chunks scales in f16 too; the down whose jobs hold two chunks
    (kBlockMma) takes every block's scale on the MMA's fp32 sums and has no f16 multiply."""
    bodies = {k: v for k, v in sm90a_ptx.items() if kernel in k}
    assert bodies, kernel
    for name, body in bodies.items():
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in body, name
        assert "cvt.rn.f16x2.e4m3x2" not in body, name  # no FP8 conversion in the MXFP4 kernels
        assert "prmt.b32" in body, name
        want = f16_scales if f16_scales is not None else not name.endswith("ELi2ELb0EEEvNS_7MoeArgsE")
        assert ("mul.rn.f16x2" in body) == want, name
        if lane_scales is not None:
            assert ("0f46800000" in body) == lane_scales, name


def test_down_kernels_for_both_rings(sm90a_ptx):
    """The tensor-core down is built with jobs of 2 chunks (three jobs' W2 in flight per warp) and of
    kDownMmaChunks (two jobs), for every format, layout, team count and lo-half format: 32 kernels; and,
    for FP8 only, with jobs split along I in parts of kDownMmaChunks chunks (kSplit): 8 more."""
    names = [n for n in sm90a_ptx if "smallm_down_mma_kernel" in n]
    assert len(names) == 40, names
    assert sum(n.endswith("ELi2ELb0EEEvNS_7MoeArgsE") for n in names) == 16
    assert sum(n.endswith("ELi4ELb0EEEvNS_7MoeArgsE") for n in names) == 16
    split = [n for n in names if n.endswith("ELi4ELb1EEEvNS_7MoeArgsE")]
    assert len(split) == 8 and all("smallm_down_mma_kernelILi0E" in n for n in split), split  # format 0: FP8


def test_two_team_gateup_copies_x_by_one_bulk_copy(sm90a_ptx):
    """The tensor-core gate/up's two-team blocks (FP8 from 2 tokens, MXFP4 from 10) copy x into shared
    memory with one bulk copy on a transaction barrier (examples/results "h200-mxtma" runs 9-10); the
    one-team blocks keep 16-byte cp.async copies (the bulk copy made FP8 TP4 1 token 7 % slower)."""
    gateup = {n: b for n, b in sm90a_ptx.items() if "smallm_gateup_mma_kernel" in n}
    one_team = {n: b for n, b in gateup.items() if n.endswith("ELi1EEEvNS_7MoeArgsE")}
    two_teams = {n: b for n, b in gateup.items() if n.endswith("ELi2EEEvNS_7MoeArgsE")}
    assert len(one_team) == 8 and len(two_teams) == 8, sorted(gateup)
    bulk = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
    for name, body in two_teams.items():
        assert bulk in body and "mbarrier.try_wait.parity" in body, name  # (once per routing path: inlined twice)
        assert "cp.async.cg.shared.global" not in body, name
    for name, body in one_team.items():
        assert bulk not in body and "cp.async.cg.shared.global" in body, name


def test_tensor_core_static_shared_memory_matches_the_plan_mirror(sm90a_ptx):
    """The one-team tensor-core gate/up's static shared memory (every format, layout and kJ) is the
    figure kernels.kernel_plan words its teams choice with (the launcher reads it from the kernel); the
    two-team gate/up and every tensor-core down hold the routing of kMmaMaxPairs pairs (MMA_ROUTING_BYTES,
    the figure of the down's lo-half rule)."""
    from sglang_smallm_plugin import kernels

    sizes = {}
    for name, body in sm90a_ptx.items():
        if "smallm_gateup_mma_kernel" in name or "smallm_down_mma_kernel" in name:
            sizes[name] = sum(map(int, re.findall(r"^\s*\.shared \.align \d+ \.b8 \S+\[(\d+)\];", body, re.M)))
    gateup = {n: v for n, v in sizes.items() if "smallm_gateup_mma_kernel" in n}
    one_team = {n: v for n, v in gateup.items() if n.endswith("ELi1EEEvNS_7MoeArgsE")}
    two_teams = {n: v for n, v in gateup.items() if n.endswith("ELi2EEEvNS_7MoeArgsE")}
    assert len(one_team) == 8 and len(two_teams) == 8, sorted(gateup)
    assert set(one_team.values()) == {kernels.GATEUP_STATIC_SMEM_BYTES}, one_team
    # the routing (its expert map also holds the two teams' reductions, 2 x 2 x 8 warps x 4 pairs x 8 floats
    # = 4096 B, once the routing is built) and x's bulk-copy barrier (8 bytes, padded to the routing's
    # 128-byte alignment); the per-token scales are in the dynamic memory, after x
    assert set(two_teams.values()) == {kernels.MMA_ROUTING_BYTES + 128}, two_teams
    down = {n: v for n, v in sizes.items() if "smallm_down_mma_kernel" in n}
    assert len(down) == 40 and set(down.values()) == {kernels.MMA_ROUTING_BYTES}, down


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed on this machine (the CUDA compile check needs it)")
def test_timeline_harness_builds_and_package_has_no_marks(sm90a_build, tmp_path):
    """examples/timeline/timeline.cu (the per-block phase timeline) builds against the current
    kernels with warnings as errors; the package build carries none of its marks."""
    root = HIP.parent
    r = _nvcc_sm90a("-DSMALLM_TIMELINE", f"-I{HIP}", root / "examples" / "timeline" / "timeline.cu", "-o", tmp_path / "timeline")
    assert r.returncode == 0, r.stderr[-4000:]
    _, ptx = sm90a_build("smallm_moe")
    assert ptx and "globaltimer" not in ptx and "g_tl_clock" not in ptx


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed on this machine (the CUDA compile check needs it)")
def test_convbench_builds_with_both_decodes(tmp_path):
    """examples/convbench/convbench.cu (e4m3 -> f16 conversions per clock, a diagnostic prepared in
    examples/results "h200-ab9") builds for sm_90a with warnings as errors and without spills, and its
    two decodes are what it says: the hardware form converts with cvt.rn.f16x2.e4m3x2 (SASS F2FP), the
    integer form with byte permutes and no conversion."""
    root = HIP.parent
    r = _nvcc_sm90a("-Xptxas", "-v", "-keep", "-keep-dir", tmp_path, root / "examples" / "convbench" / "convbench.cu",
                    "-o", tmp_path / "convbench")
    assert r.returncode == 0, r.stderr[-4000:]
    spills = _ptxas_spills(r.stderr)
    assert not spills, spills
    ptx = list(tmp_path.glob("*.compute_90a.ptx"))  # the same compile's PTX (kept intermediates)
    assert len(ptx) == 1, sorted(p.name for p in tmp_path.iterdir())
    bodies = _ptx_entries(ptx[0].read_text())
    hw = [b for name, b in bodies.items() if "rateILi0E" in name]
    ints = [b for name, b in bodies.items() if "rateILi1E" in name]
    assert len(hw) == 1 and len(ints) == 1, sorted(bodies)
    assert "cvt.rn.f16x2.e4m3x2" in hw[0] and "prmt" not in hw[0]
    assert "cvt.rn.f16x2.e4m3x2" not in ints[0] and "prmt.b32" in ints[0]


def _spilling_functions(stderr):
    """The functions a `-Xptxas -v` report names with a spill of more than 0 bytes."""
    names, current = set(), None
    for line in stderr.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            current = m.group(1)
        elif "spill" in line and " 0 bytes spill stores" not in line:
            names.add(current)
    return names


def _example_ptx(tmp_path, source, *flags, spill_free=None):
    """examples/<source> built for sm_90a (-gencode, as the probes' headers build them) with warnings as errors,
    asserted free of spills (only in the functions whose mangled names contain spill_free, where given: a
    probe that includes the package's whole launcher also compiles the package's kernels, some of which spill
    in that build): its PTX kernels ({mangled name: text})."""
    r = _nvcc_sm90a("-Xptxas", "-v", "-keep", "-keep-dir", tmp_path, *flags, HIP.parent / "examples" / source,
                    "-o", tmp_path / "probe", timeout=900, target=("-gencode", "arch=compute_90a,code=sm_90a"))
    assert r.returncode == 0, r.stderr[-4000:]
    if spill_free is None:
        spills = _ptxas_spills(r.stderr)
        assert not spills, spills
    else:
        spills = sorted(n for n in _spilling_functions(r.stderr) if n is None or spill_free in n)
        assert not spills, spills
    ptx = list(tmp_path.glob("*.ptx"))
    assert len(ptx) == 1, sorted(p.name for p in tmp_path.iterdir())
    return _ptx_entries(ptx[0].read_text())


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed on this machine (the CUDA compile check needs it)")
def test_xstage_builds_with_its_copy_forms(tmp_path):
    """examples/xstage/xstage.cu (x copied into every block's shared memory, recorded in
    examples/results "h200-ab11") builds for sm_90a as its header says, with warnings as errors and
    without spills, and its forms are what it says: bulk copies, with and without cluster multicast."""
    bodies = _example_ptx(tmp_path, "xstage/xstage.cu")
    assert len(bodies) == 5, sorted(bodies)
    by_form = {int(re.search(r"stageILi(\d)E", name).group(1)): b for name, b in bodies.items()}
    assert "cp.async.cg.shared.global" in by_form[0] and "cp.async.bulk" not in by_form[0]
    assert "cp.async.bulk" in by_form[2] and "multicast" not in by_form[2]
    assert all(".multicast::cluster" in by_form[f] for f in (3, 4))


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed on this machine (the CUDA compile check needs it)")
def test_grouped_probe_builds_with_its_two_designs(tmp_path):
    """examples/grouped/grouped_probe.cu (the one-launch probes recorded in examples/results "h200-ab16")
    builds for sm_90a against hip/ as its header says, with warnings as errors and without spills, and its
    two kernels are what it says: both stream through bulk copies on transaction barriers; A sums on CUDA
    cores, B on tensor cores."""
    bodies = _example_ptx(tmp_path, "grouped/grouped_probe.cu", "-I", HIP)
    grouped = [b for n, b in bodies.items() if "grouped_kernel" in n]
    onelaunch = [b for n, b in bodies.items() if "onelaunch_kernel" in n]
    assert len(grouped) == 1 and len(onelaunch) == 1, sorted(bodies)
    for body in grouped + onelaunch:
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in body
        assert "mbarrier.try_wait.parity" in body
    assert "mma.sync" not in grouped[0] and "mma.sync.aligned.m16n8k16" in onelaunch[0]


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed on this machine (the CUDA compile check needs it)")
def test_wgmma_probe_takes_weights_into_registers(tmp_path):
    """examples/wgmma/wgmma_gateup_probe.cu (the FP8 gate/up on wgmma, recorded in examples/results
    "h200-wgmma") builds for sm_90a as its header says, with warnings as errors and without spills; each of
    its ten gate/up kernels (8 to 40 columns, one or two jobs ahead) takes the weights as wgmma's A operand
    in registers, e4m3 as loaded (no conversion), x through a shared-memory descriptor, and has the L2
    prefetch, x-prepared-once and x-slice-per-warpgroup options; its fragment check also runs the documented shared-memory form."""
    bodies = _example_ptx(tmp_path, "wgmma/wgmma_gateup_probe.cu")
    gateups = {n: b for n, b in bodies.items() if "wg_gateup" in n}
    kinds = sorted(tuple(map(int, re.search(r"ILi(\d)ELi(\d)E", n).groups())) for n in gateups)
    assert kinds == [(nt, depth) for nt in (1, 2, 3, 4, 5) for depth in (2, 3)], sorted(bodies)
    for name, body in gateups.items():
        nt = int(re.search(r"ILi(\d)E", name).group(1))
        # A in registers: a brace list of four 32-bit registers, then the B descriptor
        a_reg = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{8 * nt}k32\.f32\.e4m3\.e4m3\s*\{{[^}}]*\}},\s*"
                           r"\{%r\d+, %r\d+, %r\d+, %r\d+\},\s*%rd\d+", body)
        assert a_reg, name
        # e4m3 -> f16 only where x's hi part is read back for its lo part (8 in each of the two staging
        # loops: the block's, all of K, and PROBE_XSUB's, the warpgroup's slice); the committed
        # tensor-core gate/up converts every weight
        assert body.count("cvt.rn.f16x2.e4m3x2") == 16 and "mma.sync" not in body, name
        assert "cp.async.bulk.prefetch.L2.global" in body and "wgmma.wait_group.sync.aligned 0" in body, name
        # x staged in the block (generic stores, fenced for wgmma's async reads) or bulk-copied (xprep)
        assert "fence.proxy.async.shared::cta" in body and "cp.async.bulk.shared::cluster.global" in body, name
        # PROBE_XSUB: each warpgroup waits only for its own x slice (a named 128-thread barrier)
        assert re.search(r"bar\.sync\s+%r\d+, 128;", body), name
    assert sorted(n for n in bodies if "x_prepare" in n) == [f"_Z9x_prepareILi{nt}EEv4Args" for nt in (1, 2, 3, 4, 5)]
    check = [b for n, b in bodies.items() if "fragment_check" in n]
    assert len(check) == 1 and re.search(r"m64n8k32\.f32\.e4m3\.e4m3\s*\{[^}]*\},\s*%rd\d+,\s*%rd\d+", check[0])


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed on this machine (the CUDA compile check needs it)")
def test_mxfp4_tma_probe_decodes_e2m1_into_wgmma_registers(tmp_path):
    """examples/wgmma/mxfp4_tma_probe.cu (the MXFP4 gate/up on wgmma, recorded in examples/results
    "h200-mxtma") builds for sm_90a against hip/ as its header says, with warnings as errors and without
    spills in its own kernels; each of its gate/up kernels (8 to 40 columns; the diagnostic modes at 8 and 16
    columns) streams W13 and its e8m0 scales by tensor-map tiles on transaction barriers; where it computes, it decodes e2m1
    by byte permutes (the e4m3 magnitude table and the two sign selectors) into wgmma's A registers as
    e4m3 and keeps one group of k-steps in flight while the previous one is waited for; none uses
    mma.sync."""
    bodies = _example_ptx(tmp_path, "wgmma/mxfp4_tma_probe.cu", "-I", HIP, spill_free="2mx")
    gateups = {n: b for n, b in bodies.items() if "2mx6gateup" in n}
    kinds = sorted(tuple(map(int, re.search(r"gateupILi(\d)ELi(\d)E", n).groups())) for n in gateups)
    assert kinds == sorted([(nt, 0) for nt in (1, 2, 3, 4, 5)] + [(nt, m) for nt in (1, 2) for m in (1, 2, 3)]), sorted(bodies)
    for name, body in gateups.items():
        nt, mode = map(int, re.search(r"gateupILi(\d)ELi(\d)E", name).groups())
        assert "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in body, name
        assert "mbarrier.try_wait.parity" in body and "mma.sync" not in body, name
        a_reg = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{8 * nt}k32\.f32\.e4m3\.e4m3\s*\{{[^}}]*\}},\s*"
                           r"\{%r\d+, %r\d+, %r\d+, %r\d+\},\s*%rd\d+", body)
        if mode in (0, 3):
            assert a_reg and "wgmma.wait_group.sync.aligned 1" in body, name
        else:
            assert not a_reg, name
        if mode in (0, 2):  # the decode: the e4m3 magnitudes' table (0x3C383000, 0x4C484440) and the sign selectors
            assert "prmt.b32" in body and "1010315264" in body and "1279804480" in body, name
            assert "55752" in body and "64490" in body, name  # 0xD9C8, 0xFBEA
    assert any("reference_h" in n for n in bodies) and any("read_floor" in n for n in bodies)


def test_read_floor_kernel_can_be_a_programmatic_dependent(sm90a_build):
    """The bench's two-launch floors: the read-floor kernel lets the next one launch at its entry and, when
    launched as a programmatic dependent, waits for the grid before it before its first weight load."""
    r, text = sm90a_build("smallm_readfloor")
    assert r.returncode == 0 and text, r.stderr[-4000:]
    (name, body), = [(n, b) for n, b in _ptx_entries(text).items() if "smallm_read_floor_kernel" in n]
    launch, wait = body.find("griddepcontrol.launch_dependents"), body.find("griddepcontrol.wait")
    weight_loads = [m.start() for m in re.finditer(r"ld\.global[.\w]*\.v4\.", body)]  # 16-byte weight loads
    assert weight_loads and 0 <= launch < wait < min(weight_loads), name


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed on this machine (the CUDA compile check needs it)")
def test_barrier_floor_probe_builds(tmp_path):
    """examples/floorprobe/barrier_floor.cu (one-launch read floors with a grid-wide barrier, recorded in
    examples/results "h200-s37" runs 3 and 5; the co-resident form, "h200-s38" run 1) builds for sm_90a with
    warnings as errors, every block size, no spills; its barrier spins on a volatile generation word and
    resets its counter by atomics; its PDL floor kernel waits for the grid before it before its first weight
    load; its co-resident W2 kernel reads its weights before it waits and h after."""
    root = HIP.parent
    r = _nvcc_sm90a("-Xptxas", "-v", "-keep", "-keep-dir", tmp_path, "-I", root / "examples",
                    root / "examples" / "floorprobe" / "barrier_floor.cu", "-o", tmp_path / "bf", timeout=600,
                    target=("-gencode", "arch=compute_90a,code=sm_90a"))
    assert r.returncode == 0, r.stderr[-4000:]
    assert not _ptxas_spills(r.stderr), r.stderr
    entries = re.split(r"\n\s*(?:\.visible\s+)?\.entry\s+", next(tmp_path.glob("*.ptx")).read_text())[1:]
    persist = {e.split("(")[0]: e for e in entries if "persist_floor" in e.split("(")[0]}
    assert len(persist) == 2, [e.split("(")[0] for e in entries]  # 256 and 1024 threads
    for name, body in persist.items():
        assert "ld.volatile.global.u32" in body and "atom.global.add.u32" in body and "atom.global.exch" in body, name
    (dep,) = [e for e in entries if "dep_floor" in e.split("(")[0]]  # the floor's PDL launch forms
    loads = [m.start() for m in re.finditer(r"ld\.global[.\w]*\.v4\.", dep)]
    assert loads and 0 <= dep.find("griddepcontrol.launch_dependents") < dep.find("griddepcontrol.wait") < min(loads)
    # the co-resident form ("h200-s38" run 1): W13's launch lets the next start at entry and never waits;
    # W2's reads its weights before it waits, and h only after
    co13 = [e for e in entries if "co_w13" in e.split("(")[0]]
    co2 = [e for e in entries if "co_w2" in e.split("(")[0]]
    assert len(co13) == 2 and len(co2) == 2, [e.split("(")[0] for e in entries]  # 256 and 512 threads
    for body in co13:
        assert "griddepcontrol.launch_dependents" in body and "griddepcontrol.wait" not in body
    for body in co2:
        wait = body.find("griddepcontrol.wait")
        weights = [m.start() for m in re.finditer(r"ld\.global\.cs\.v4\.", body)]
        h = [m.start() for m in re.finditer(r"ld\.global\.cg\.", body)]
        assert 0 <= body.find("griddepcontrol.launch_dependents") < wait
        assert weights and h and max(weights) < wait < min(h)


@pytest.mark.skipif(_nvcc() is None, reason="nvcc not installed on this machine (the CUDA compile check needs it)")
def test_loadpattern_harness_builds(tmp_path):
    """examples/loadpattern/loadpattern.cu (the gate/up's weight loads alone, recorded in
    examples/results "h200-ab") builds for sm_90a with warnings as errors and without spills."""
    root = HIP.parent
    r = _nvcc_sm90a("-Xptxas", "-v", root / "examples" / "loadpattern" / "loadpattern.cu", "-o", tmp_path / "loadpattern",
                    timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    spills = _ptxas_spills(r.stderr)
    assert not spills, spills


def _cuobjdump():
    """cuobjdump (with nvdisasm beside it, which -sass needs): $CUOBJDUMP, PATH, or the
    nvidia-cuda-cuobjdump wheel that `make setup` installs."""
    for c in (os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")):
        if c and os.path.exists(c):
            return c
    try:
        import nvidia
    except ImportError:
        return None
    found = [p for d in nvidia.__path__ for p in sorted(pathlib.Path(d).glob("*/bin/cuobjdump"))]
    return str(found[0]) if found else None


@pytest.fixture(scope="module")
def sm90a_sass(sm90a_build, scoreboards):
    """The package build's sm_90a SASS, by kernel: {mangled name: [(instruction, control bits)]}."""
    cuobjdump = _cuobjdump()
    if cuobjdump is None:
        pytest.skip("cuobjdump not installed (make setup installs the nvidia-cuda-cuobjdump wheel)")
    r, _ = sm90a_build("smallm_moe")
    assert r.returncode == 0, r.stderr[-4000:]
    cubins = sorted(sm90a_build.dirs["smallm_moe"].glob("*.sm_90a.cubin"))
    assert len(cubins) == 1, cubins
    d = subprocess.run([cuobjdump, "-sass", str(cubins[0])], capture_output=True, text=True, timeout=300)
    assert d.returncode == 0, d.stderr[-2000:]
    return scoreboards.parse(d.stdout)


def _waits_before_mma(events):
    """Whether the kernel's last group of 128-bit weight loads (the job loop's next-job loads, in the
    path compiled last) is waited for before the MMA that follows it: then the next job's loads
    overlap no compute (examples/sass/scoreboards.py, examples/results "h200-ab11")."""
    last = max(i for i, (_, name, _) in enumerate(events) if name.startswith("LDG"))
    board = events[last][1][3:]
    for _, name, _ in events[last + 1:]:
        if name == "HMMA":
            return False
        if name.startswith(f"W{board}:"):
            return True
    raise AssertionError("no MMA after the last weight loads")


@pytest.mark.parametrize("kernel,waits", [
    # MXFP4 row-major, kJ = 4 (Qwen3.5), one team (1-9 tokens) and two (10-20): kSettle orders the wait first
    ("_ZN6smallm24smallm_gateup_mma_kernelILi1ELi0ELi4ELi1EEEvNS_7MoeArgsE", False),
    ("_ZN6smallm24smallm_gateup_mma_kernelILi1ELi0ELi4ELi2EEEvNS_7MoeArgsE", False),
    # FP8 row-major, kJ = 8 (Qwen3.5): one team (1 token: kFp8TeamsMinTokens) and two teams (2-20 tokens)
    # through kSettle (the one-team loop waited in this order without it until the kernels took MoeArgs::Iw as
    # a stride, "h200-s50"; this check caught the change)
    ("_ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi8ELi1EEEvNS_7MoeArgsE", False),
    ("_ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi8ELi2EEEvNS_7MoeArgsE", False),
    # FP8 row-major, kJ = 4 (D <= 2048), one team and two, through kSettle: without it both waited
    # ("h200-s43" SASS entry); with it I = 256 at D = 2048 4-15 % faster ("h200-s44" run 1)
    ("_ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi4ELi1EEEvNS_7MoeArgsE", False),
    ("_ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi4ELi2EEEvNS_7MoeArgsE", False),
    # MXFP4 row-major, kJ = 8 (D > 4096, MiniMax-M3-like), two teams (from 7 tokens at D = 6144) through
    # kSettle since "h200-s46" run 3 (8-24 tokens 7-8 % faster); before it waited
    ("_ZN6smallm24smallm_gateup_mma_kernelILi1ELi0ELi8ELi2EEEvNS_7MoeArgsE", False),
    # MXFP4 shuffled, one team (no kSettle; not a layout the H200 runs in practice): still waits; here
    # the check's proof that it finds such a wait in real SASS. Should it stop waiting, move it up.
    ("_ZN6smallm24smallm_gateup_mma_kernelILi1ELi1ELi4ELi1EEEvNS_7MoeArgsE", True),
])
def test_gateup_job_loop_wait_order(sm90a_sass, scoreboards, kernel, waits):
    """Where the tensor-core gate/up waits for its weight loads, from the control bits of its sm_90a
    SASS: all of a job's and the next job's loads count on one scoreboard, so a wait placed after the
    next job's loads are issued also waits for them. The measured gains (MXFP4 1-9 tokens 5-9 %,
    10-20 tokens 7-11 %, "h200-ab12") rest on this order, which the compiler, not the source, decides."""
    assert kernel in sm90a_sass, sorted(k for k in sm90a_sass if "gateup_mma" in k)
    assert _waits_before_mma(scoreboards.events(sm90a_sass[kernel])) == waits


@pytest.mark.parametrize("kernel", [
    "_ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi8ELi2EEEvNS_7MoeArgsE",  # FP8 row-major, two teams
    "_ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi8ELi1EEEvNS_7MoeArgsE",  # one team (1 token)
    "_ZN6smallm24smallm_gateup_mma_kernelILi0ELi1ELi8ELi1EEEvNS_7MoeArgsE",  # shuffled
    "_ZN6smallm22smallm_down_mma_kernelILi0ELi0ELi2ELb1ELi4ELb0EEEvNS_7MoeArgsE",
    "_ZN6smallm22smallm_down_mma_kernelILi0ELi0ELi1ELb0ELi4ELb0EEEvNS_7MoeArgsE",
    "_ZN6smallm22smallm_down_mma_kernelILi0ELi0ELi2ELb1ELi4ELb1EEEvNS_7MoeArgsE",  # jobs split along I (I > 256)
])
def test_fp8_mma_converts_the_upper_pair_in_place(sm90a_sass, kernel):
    """The FP8 tensor-core kernels convert each weight word's two e4m3 pairs with two F2FP, the second
    reading the word's upper half itself (`Rw.H1`, e4m3x2_hi_to_f16x2) rather than a shifted copy: a
    shift per pair was ~3 % of the gate/up's instructions, and without it FP8 was 0.5-3 % faster
    (examples/results "h200-s31" run 5). Half of the conversions read an upper half."""
    assert kernel in sm90a_sass, sorted(k for k in sm90a_sass if "mma_kernel" in k)
    cvts = [insn for insn, _ in sm90a_sass[kernel] if "F2FP.F16.E4M3.UNPACK_B" in insn]
    upper = [insn for insn in cvts if re.search(r"\.H1\b", insn.split(",")[-1])]  # source Rw.H1, with or without .reuse
    assert cvts and 2 * len(upper) == len(cvts), (len(cvts), len(upper))
