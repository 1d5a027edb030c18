"""The H200 job scripts under examples/ and the CI scripts parse, the A/B job's summary reads the timeline log it
writes, the wgmma job's summary reads the probe logs, and .ci/local removes the clone it ran CI in."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "examples").rglob("*.sh")) + [ROOT / ".ci" / "run", ROOT / ".ci" / "local"]


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(p.relative_to(ROOT)) for p in SCRIPTS])
def test_job_script_parses(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _git(cwd, *args):
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                   capture_output=True)


@pytest.mark.parametrize("ci_rc", [0, 3])
def test_ci_local_runs_ci_in_a_clone_it_removes(tmp_path, ci_rc):
    """.ci/local runs the repo's .ci/run in a fresh clone of HEAD (not the working tree), then make demo where
    CI passed, keeps the log, passes on CI's exit status and leaves no clone behind (clones left in /tmp
    took the disk that a later CI run needed)."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    (repo / ".ci" / "local").write_text((ROOT / ".ci" / "local").read_text())
    (repo / ".ci" / "run").write_text(f'#!/bin/bash\necho "ran in $PWD"; cat marker; echo "1 passed"; exit {ci_rc}\n')
    (repo / "Makefile").write_text("demo:\n\techo demo-ran\n")
    (repo / "marker").write_text("committed\n")
    for f in (".ci/local", ".ci/run"):
        (repo / f).chmod(0o755)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "x")
    (repo / "marker").write_text("uncommitted\n")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    log = tmp_path / "ci.log"
    r = subprocess.run(["bash", str(repo / ".ci" / "local")], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TMPDIR": str(tmp), "CI_LOG": str(log)})
    assert r.returncode == ci_rc, r.stdout + r.stderr
    text = log.read_text()
    assert "committed" in text and "uncommitted" not in text  # HEAD, not the working tree
    assert "uncommitted changes are not in the clone" in r.stderr
    assert f"exit {ci_rc}" in r.stdout
    assert ("demo-ran" in text) == (ci_rc == 0)
    assert list(tmp.iterdir()) == []  # the clone is gone
    ran_in = text.split("ran in ", 1)[1].split()[0]
    assert ran_in.startswith(str(tmp)) and not pathlib.Path(ran_in).exists()


def _ab_summary_source() -> str:
    text = (ROOT / "examples" / "h200_ab_job.sh").read_text()
    body = text.split("<<'EOF'\n", 1)[1]
    return body.split("\nEOF", 1)[0]


def _ab_summary(tmp_path, rounds) -> list:
    """The A/B job's summary over a timeline log of `rounds` (each a list of (label, us) for case 0 1 256): its lines."""
    log = tmp_path / "timeline_ab.log"
    lines = []
    for rnd, entries in enumerate(rounds, 1):
        for name, us in entries:
            lines += [f"## {name} round {rnd}: 0 1 256",
                      f"timeline fmt=fp8 T=1 I=256 iters=40  clock 1.8 GHz  event time per call {us} us (median, incl. launch)"]
    log.write_text("\n".join(lines) + "\n")
    src = tmp_path / "summary.py"
    src.write_text(_ab_summary_source())
    r = subprocess.run([sys.executable, str(src), str(log)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_ab_summary_takes_min_over_rounds_and_divides_by_base(tmp_path):
    out = _ab_summary(tmp_path, [[("base", b), ("new", n), ("new[SMALLM_PDL=0]", e)]
                                 for b, n, e in [(20.0, 19.0, 21.0), (22.0, 18.0, 20.0)]])
    header, row = out[1], out[2]
    assert header.split()[-3:] == ["base", "new", "new[SMALLM_PDL=0]"]
    assert row.startswith("0 1 256")
    assert "20.0 (1.000)" in row and "18.0 (0.900)" in row and "20.0 (1.000)" in row.split(")", 2)[-1]


def test_ab_summary_reads_settings_of_several_variables(tmp_path):
    # NEW_ENVS="A=1 B=1" is labelled new[A=1,B=1]; a label with spaces must not be mistaken for another case
    out = _ab_summary(tmp_path, [[("base", 20.0), ("new", 19.0), ("new[SMALLM_GATEUP_PER_SM=1,SMALLM_DOWN_PER_SM=1]", 15.0),
                                  ("new[A=1 B=2]", 30.0)]])
    row = out[2]
    assert "15.0 (0.750)" in row and "30.0 (1.500)" in row and "19.0 (0.950)" in row


def test_sgl_kernel_stub_imports_anything_and_raises_when_called():
    """examples/sglang_gpu/stubs (the H200 layer job's sgl_kernel): any submodule and attribute chain
    imports, as SGLang's CUDA import branches need; calling any of them raises its own error, but for
    moe_align_block_size, which goes to SGLang's JIT build of the op (here a stand-in module that echoes
    its arguments) unless SMALLM_STUB_ALIGN=0 or with ignore_invalid_expert (no JIT build of that), and
    for moe_sum_reduce, which goes to SGLang's Triton op of the same sum unless SMALLM_STUB_ALIGN=0."""
    code = """
import os, sys, types
jit = types.ModuleType('sglang.kernels.ops.moe.moe_align')
jit.moe_align_block_size = lambda *a: print('JIT', a)
for name in ('sglang', 'sglang.kernels', 'sglang.kernels.ops', 'sglang.kernels.ops.moe'):
    sys.modules[name] = types.ModuleType(name)
sys.modules[jit.__name__] = jit
tri = types.ModuleType('sglang.kernels.ops.moe.fused_moe_triton_kernels')
tri.moe_sum_reduce_triton = lambda *a: print('TRITON', a)
sys.modules[tri.__name__] = tri
import sgl_kernel
sgl_kernel.moe_sum_reduce('in', 'out', 2.5)
from sgl_kernel.quantization import ggml_dequantize
from sgl_kernel.scalar_type import scalar_types
kinds = [scalar_types.uint4b8, scalar_types.uint8b128]
sgl_kernel.moe_align_block_size(*range(7))
sgl_kernel.moe_align_block_size(*range(8))
try:
    sgl_kernel.moe_align_block_size(*range(7), True, True)
except sgl_kernel.SglKernelStubCalled as e:
    print('RAISED', e)
os.environ['SMALLM_STUB_ALIGN'] = '0'
try:
    sgl_kernel.moe_align_block_size(*range(7))
except sgl_kernel.SglKernelStubCalled as e:
    print('RAISED', e)
try:
    sgl_kernel.moe_sum_reduce('in', 'out', 1.0)
except sgl_kernel.SglKernelStubCalled as e:
    print('RAISED', e)
try:
    ggml_dequantize()
except sgl_kernel.SglKernelStubCalled as e:
    print('RAISED', e)
print('KINDS', kinds)
"""
    stubs = ROOT / "examples" / "sglang_gpu" / "stubs"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(stubs)})
    assert r.returncode == 0, r.stderr
    assert "JIT (0, 1, 2, 3, 4, 5, 6, False)" in r.stdout and "JIT (0, 1, 2, 3, 4, 5, 6, 7)" in r.stdout
    assert "moe_align_block_size called, but sgl_kernel here is an import-only stub (ignore_invalid_expert" in r.stdout
    assert "moe_align_block_size called, but sgl_kernel here is an import-only stub (SMALLM_STUB_ALIGN=0)" in r.stdout
    assert "TRITON ('in', 'out', 2.5)" in r.stdout  # moe_sum_reduce: SGLang's Triton op of the same sum
    assert "moe_sum_reduce called, but sgl_kernel here is an import-only stub (SMALLM_STUB_ALIGN=0)" in r.stdout
    assert "RAISED sgl_kernel.quantization.ggml_dequantize called" in r.stdout
    assert "<sgl_kernel stub sgl_kernel.scalar_type.scalar_types.uint4b8>" in r.stdout


def test_wgmma_summary_puts_settings_side_by_side(tmp_path):
    """examples/wgmma/summarize.py: one column per probe log, named by its setting; a row per (shape, T) with
    the gate/up time and its floor ratio; a row a log lacks is "-"; a failed check is marked."""
    run1 = (ROOT / "examples" / "results" / "h200-wgmma" / "run1" / "probe.log").read_text()
    (tmp_path / "probe_m0_p0_d2_x0.log").write_text(run1)
    (tmp_path / "probe_m1_p0_d2_x0.log").write_text(
        "shape   T    U  gateup_us    sum_us  floor_us  x_floor   W13_MB    rel_err\n"
        "TP4     8   85       41.0       2.2      39.6    1.04x    173.8   9.99e+08\n")
    (tmp_path / "probe_m0_p1_d3_x1.log").write_text(
        "TP8    20  177       50.1       2.5      42.8    1.17x    189.9   2.00e+09  FAIL\n")
    logs = sorted(tmp_path.glob("probe_*.log"))
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "wgmma" / "summarize.py"), *map(str, logs)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "as run 1" in lines[0] and "pf 2 ahead xprep" in lines[0] and "mode 1" in lines[0]
    rows = {tuple(line.split()[:2]): line for line in lines[1:] if line.startswith("TP")}
    assert len(rows) == 8  # run 1's counts; the other logs add none
    assert "55.0 (1.39x)" in rows[("TP4", "8")] and "41.0 (1.04x)" in rows[("TP4", "8")]
    assert "50.1 (1.17x)!" in rows[("TP8", "20")] and rows[("TP4", "1")].count("-") == 2
    assert lines[-1].startswith("!:")


def test_tma_bench_table_sets_modes_side_by_side(tmp_path):
    """examples/tma_bench_table.py (examples/h200_tma_job.sh's summary): a column per bench log with its floor
    ratio, and each later log over the first, from "h200-tma" run 1's logs; a row a log lacks is "-"."""
    run1 = ROOT / "examples" / "results" / "h200-tma" / "run1"
    short = tmp_path / "bench_m2.log"
    short.write_text("qwen35-tp4     fp8_block128 row_major    T=  8 distinct=  76.4    240.4 MB kernel    "
                     "62.0 us  read floor    55.5 us (1.12x)  roofline    56.7 us    80%  [plan]\n")
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "tma_bench_table.py"), str(run1 / "bench_off.log"),
                        str(run1 / "bench_on.log"), str(short)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = {tuple(line.split()[:2]): line for line in r.stdout.splitlines()[1:]}
    assert len(rows) == 14  # Qwen3.5 TP4 and TP8 at 1, 2, 4, 8, 12, 16, 20 tokens
    assert rows[("qwen35-tp4", "8")].split()[2:] == ["71.0", "(1.28x)", "83.5", "(1.50x)", "62.0", "(1.12x)", "1.176", "0.873"]
    assert rows[("qwen35-tp8", "1")].split()[-2:] == ["1.484", "-"]


@pytest.mark.parametrize("foreground", [False, True])
def test_a_jobs_timeout_stops_what_its_inner_timeouts_started(tmp_path, foreground):
    """A timeout around a whole job (the device command's) must stop the benches the job started. A plain
    inner `timeout` puts its command in a process group of its own, which outlives the job's ("h200-s47" run 7:
    a bench went on timing into the next job); `timeout --foreground` keeps it in the job's group."""
    import time

    mark = tmp_path / "outlived"
    inner = f"timeout {'--foreground ' if foreground else ''}30 bash -c 'sleep 2; touch {mark}'"
    subprocess.run(["timeout", "1", "bash", "-c", f"{inner}; true"], capture_output=True)
    time.sleep(2.5)
    assert mark.exists() == (not foreground)


def test_common_inner_timeouts_that_start_python_are_foreground():
    """Every `timeout` that starts python or SGLang's peer in examples/h200_common.sh (the benches, the GPU
    test file, the peer) and in the SGLang layer job takes --foreground (the test above shows why)."""
    for name in ("h200_common.sh", "h200_sglang_layer_job.sh"):
        lines = [ln for ln in (ROOT / "examples" / name).read_text().splitlines()
                 if "timeout " in ln and ("python3" in ln or ".peer/run.sh" in ln) and not ln.lstrip().startswith("#")]
        assert lines, name
        assert all("timeout --foreground" in ln for ln in lines), [ln for ln in lines if "--foreground" not in ln]
