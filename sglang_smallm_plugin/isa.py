"""`sglang-smallm isa`: compile every kernel for an AMD arch without ROCm and summarise the ISA.

Uses clang 22 from the `ziglang` wheel in device-only HIP mode (no ROCm headers or libraries):
    python -m ziglang clang -x hip --offload-arch=ARCH --offload-device-only -nogpuinc -nogpulib
        -O3 -std=c++17 -Wall -Wextra -Werror -DSMALLM_DEVICE_ONLY -S hip/smallm_moe.hip
Prints per kernel its VGPR/SGPR counts, spills, scratch (private segment) bytes, LDS bytes, and
the count of the instructions the kernels rely on.
"""

import os
import pathlib
import re
import subprocess
import sys

SOURCES = ("smallm_moe.hip", "smallm_sort.hip", "smallm_readfloor.hip")
KEY_INSTRUCTIONS = (
    "v_cvt_scalef32_pk_bf16_fp8", "v_cvt_scalef32_pk_f32_fp8", "v_cvt_scalef32_pk_bf16_fp4",
    "v_cvt_scalef32_pk_f32_fp4", "v_dot2c_f32_bf16", "v_dot2_f32_bf16", "v_pk_fma_f32", "global_load_dwordx4",
    "ds_bpermute_b32", "buffer_wbl2", "buffer_inv", "scratch_store", "scratch_load", "buffer_store",
    "ds_add_u32", "v_rndne_f32", "global_store_byte",
)
SORT_FORMATS = {"0": "aiter", "1": "triton"}
SORT_PATHS = {"0": "compact", "1": "distributed"}
FORMATS = {"0": "fp8_block128", "1": "mxfp4"}
LAYOUTS = {"0": "row_major", "1": "shuffle16x16"}


def hip_dir() -> pathlib.Path:
    here = pathlib.Path(__file__).resolve().parent
    for cand in (os.environ.get("SGLANG_SMALLM_HIP_DIR"), here.parent / "hip", here / "hip_src"):
        if cand and (pathlib.Path(cand) / SOURCES[0]).exists():
            return pathlib.Path(cand)
    raise FileNotFoundError("kernel sources not found (set SGLANG_SMALLM_HIP_DIR to the repo's hip/ folder)")


def compile_asm(arch: str, out_dir, source: str = SOURCES[0], extra=()) -> pathlib.Path:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = hip_dir() / source
    out = out_dir / f"{pathlib.Path(source).stem}.{arch}.s"
    cmd = [sys.executable, "-m", "ziglang", "clang", "-x", "hip", f"--offload-arch={arch}", "--offload-device-only",
           "-nogpuinc", "-nogpulib", "-O3", "-std=c++17", "-Wall", "-Wextra", "-Werror", "-DSMALLM_DEVICE_ONLY",
           *extra, "-S", str(src), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"clang failed for {arch}:\n{' '.join(cmd)}\n{r.stderr}")
    return out


def kernel_label(mangled: str) -> str:
    m = re.search(r"smallm_moe_kernelILi(\d)ELi(\d)E", mangled)
    if m:
        return f"moe {FORMATS.get(m.group(1), '?')} {LAYOUTS.get(m.group(2), '?')}"
    m = re.search(r"smallm_gateup_kernelILi(\d)ELi(\d)ELi(\d+)ELi(\d+)E", mangled)
    if m:  # variant 5, first kernel: rows per job x vectors per thread
        return f"moe {FORMATS.get(m.group(1), '?')} {LAYOUTS.get(m.group(2), '?')} gate/up {m.group(3)}x{m.group(4)}"
    m = re.search(r"smallm_down_kernelILi(\d)ELi(\d)E", mangled)
    if m:  # variant 5, second kernel
        return f"moe {FORMATS.get(m.group(1), '?')} {LAYOUTS.get(m.group(2), '?')} down"
    m = re.search(r"smallm_sort_kernelILi(\d)ELi(\d)E", mangled)
    if m:
        return f"sort {SORT_FORMATS.get(m.group(1), '?')} {SORT_PATHS.get(m.group(2), '?')}"
    if "smallm_read_floor_kernel" in mangled:
        return "read floor (bench)"
    return mangled


def compile_all(arch: str, out_dir) -> list:
    """-> [(path of the .s, rows)] for every kernel source."""
    return [(p, summarize(p.read_text())) for p in (compile_asm(arch, out_dir, src) for src in SOURCES)]


def summarize(asm: str) -> list:
    """Per kernel: metadata counts and key-instruction counts from the function body."""
    bodies = {}
    for m in re.finditer(r"^(_Z\w+):[^\n]*$(.*?)^\.Lfunc_end\d+:", asm, re.M | re.S):
        bodies[m.group(1)] = m.group(2)
    meta = asm[asm.find(".amdgpu_metadata"):]
    items = re.split(r"^  - \.", meta, flags=re.M)  # kernels (args are indented deeper)
    rows = []
    for item in items:
        kv = dict(re.findall(r"\.?(\w+):\s+(\S+)", "." + item))
        name = kv.get("name")
        if not name or name not in bodies:
            continue
        body = bodies[name]
        counts = {ins: len(re.findall(rf"^\s+{ins}(?:_e32|_e64|_dpp|_sdwa)?\s", body, re.M)) for ins in KEY_INSTRUCTIONS}
        rows.append(dict(kernel=kernel_label(name), mangled=name,
                         vgpr=int(kv.get("vgpr_count", -1)), sgpr=int(kv.get("sgpr_count", -1)),
                         agpr=int(kv.get("agpr_count", 0)),
                         vgpr_spill=int(kv.get("vgpr_spill_count", 0)), sgpr_spill=int(kv.get("sgpr_spill_count", 0)),
                         scratch=int(kv.get("private_segment_fixed_size", 0)),
                         lds=int(kv.get("group_segment_fixed_size", 0)), counts=counts))
    return rows


def instructions(asm: str) -> dict:
    """Per kernel (mangled name): its instructions in order, without comments, labels or directives. Two builds
    of one source compile to the same code where these are equal (register numbers included)."""
    out = {}
    for m in re.finditer(r"^(_Z\w+):[^\n]*$(.*?)^\.Lfunc_end\d+:", asm, re.M | re.S):
        lines = (ln.split(";")[0].strip() for ln in m.group(2).splitlines())
        out[m.group(1)] = [ln for ln in lines if ln and not ln.startswith(".") and not ln.endswith(":")]
    return out


def main(arch: str = "gfx950", out: str = "isa_out") -> int:
    try:
        compiled = compile_all(arch, out)
    except (RuntimeError, FileNotFoundError) as e:
        print(e, file=sys.stderr)
        return 2
    rows = []
    for path, rs in compiled:
        print(f"{arch}: {path}")
        rows += rs
    print(f"{'kernel':30} {'vgpr':>5} {'agpr':>5} {'sgpr':>5} {'vspill':>6} {'sspill':>6} {'scratch':>7} {'lds':>6}  key instructions")
    for r in rows:
        keys = ", ".join(f"{k}={v}" for k, v in r["counts"].items() if v)
        print(f"{r['kernel']:30} {r['vgpr']:5d} {r['agpr']:5d} {r['sgpr']:5d} {r['vgpr_spill']:6d} {r['sgpr_spill']:6d} "
              f"{r['scratch']:7d} {r['lds']:6d}  {keys}")
    bad = [r["kernel"] for r in rows if r["scratch"] or r["vgpr_spill"]]
    if bad:
        print(f"scratch / VGPR spills in: {', '.join(bad)}")
    return 1 if bad or not rows else 0
