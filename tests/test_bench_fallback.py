"""`sglang-smallm bench` times the fallback beside the kernel: SGLang's own FusedMoE layer with the kernels
off (sglang_integration/fallback_timing.py). On CPU SGLang's runners cannot run, so these tests show the
plumbing: the layer's real decision, the switch on only while the fallback runs, one row per token count
with its time or the reason it has none, the reason printed once, never a failed bench."""

import os

import pytest

from sglang_smallm_plugin import bench, kernels, launch_plan
from sglang_smallm_plugin.shapes import shape_by_name

SHAPE = "D1024-E9-K3-I128"  # small: one SGLang layer per weight copy is built on CPU


@pytest.fixture
def cpu_bench(monkeypatch, sglang_smallm):
    monkeypatch.setattr(kernels, "device_info", lambda device=None: kernels.DeviceInfo("cuda", "stub", "sm_90"))
    monkeypatch.setattr(launch_plan, "_device_sms", lambda: 132)
    monkeypatch.setattr(bench, "time_graph", lambda calls: 100.0)
    monkeypatch.setattr(bench, "time_read_floor", lambda *a, **k: 80.0)
    return sglang_smallm


def test_fallback_not_runnable_here_is_a_reason_not_a_failure(cpu_bench):
    lines = []
    rows = bench.bench_shape(shape_by_name(SHAPE), "fp8_block128", "row_major", [1, 4], bw=4e12, copies=2,
                             device="cpu", echo=lines.append)
    assert [r["fallback_us"] for r in rows] == [None, None]
    assert all("fallback:triton not runnable here" in r["fallback_note"] for r in rows)
    said = [ln for ln in lines if "fallback: no time here" in ln]
    assert len(said) == 1 and "registers CUDA kernels only" in said[0]
    assert lines.index(said[0]) == 2  # after both kernel rows
    assert os.environ.get("SGLANG_ROCM_SMALLM_MOE") is None  # the switch is back as it was


def test_fallback_time_is_the_layers_with_the_kernels_off(cpu_bench, monkeypatch):
    """A stand-in for the GPU's runner (forward) and graph timing: the bench gets their time, the layer
    decided for its fallback, and the kernels were off during the calls only."""
    from sglang_smallm_plugin import envs
    from sglang_smallm_plugin.sglang_integration import fallback_timing

    seen = []
    monkeypatch.setattr(cpu_bench, "forward", lambda layer, x, w, ids: seen.append((envs.KERNELS.enabled(), x.shape[0])))

    def fake_graph_us(body, launches):
        body()
        return 42.0

    monkeypatch.setattr(fallback_timing, "graph_us", fake_graph_us)
    lines = []
    rows = bench.bench_shape(shape_by_name(SHAPE), "fp8_block128", "row_major", [2, 5], bw=4e12, copies=3,
                             device="cpu", echo=lines.append)
    assert [r["fallback_us"] for r in rows] == [42.0, 42.0]
    assert all(r["fallback_note"] == "fallback:triton, CUDA graph" for r in rows)
    assert seen == [(False, 2)] * 3 + [(False, 5)] * 3  # each weight copy's layer once per call, kernels off
    assert envs.KERNELS.enabled()
    assert len(lines) == 4 and "fallback" not in lines[0] + lines[1]  # the kernel rows first, then the fallback's
    assert "T=  2 fallback    42.0 us (0.42x the kernel's)  [fallback:triton, CUDA graph]" in lines[2]


def test_no_fallback_timing_for_other_layouts_or_when_asked(cpu_bench, monkeypatch):
    built = []
    monkeypatch.setattr(bench, "fallback_timer", lambda *a: built.append(a))
    for layout, fallback in (("shuffle16x16", True), ("row_major", False)):
        rows = bench.bench_shape(shape_by_name(SHAPE), "fp8_block128", layout, [1], bw=4e12, copies=1,
                                 device="cpu", echo=lambda s: None, fallback=fallback)
        assert rows[0]["fallback_us"] is None and rows[0]["fallback_note"] == ""
    assert built == []


def test_where_sglang_ships_its_own_small_m_kernel_the_bench_times_sglang_as_shipped_too(cpu_bench, monkeypatch):
    """ROCm with SGLang's own gfx950 small-M kernel enabled (stand-in here): SGLANG_ROCM_SMALLM_MOE=0 turns that
    kernel off too, so the fallback column is AITER alone; the bench also times SGLang as shipped, the same layer
    with the plugin handing every call over (SGLANG_SMALLM_MAX_TOKENS=0) and SGLang's switch on."""
    from sglang_smallm_plugin import envs
    from sglang_smallm_plugin.sglang_integration import fallback_timing

    seen = []
    monkeypatch.setattr(cpu_bench, "forward", lambda layer, x, w, ids: seen.append(
        (envs.KERNELS.enabled(), envs.MAX_TOKENS.get(), x.shape[0])))
    times = iter([42.0, 30.0])
    monkeypatch.setattr(fallback_timing, "graph_us", lambda body, launches: (body(), next(times))[1])
    monkeypatch.setattr(bench, "sglang_ships_its_own_kernel", lambda: True)
    # as on a GPU, where the reference provider does not serve: the compiled kernel's gate decides (on CPU it
    # cannot serve, so its reason is the device's, and both timers' layers take their fallback)
    from sglang_smallm_plugin.providers.reference import ReferenceMoeProvider

    monkeypatch.setattr(ReferenceMoeProvider, "supports", lambda self, call: (False, "GPU stand-in"))
    lines = []
    rows = bench.bench_shape(shape_by_name(SHAPE), "fp8_block128", "row_major", [2], bw=4e12, copies=2,
                             device="cpu", echo=lines.append)
    assert rows[0]["fallback_us"] == 42.0 and rows[0]["shipped_us"] == 30.0
    assert rows[0]["shipped_note"] == "fallback:triton, CUDA graph"  # the plugin's gate handed the call over
    assert seen == [(False, "", 2)] * 2 + [(True, "0", 2)] * 2  # kernels off, then on with the plugin's cap at 0
    assert envs.KERNELS.enabled() and envs.MAX_TOKENS.get() == ""
    assert "T=  2 SGLang as shipped    30.0 us (0.30x the kernel's)" in lines[-1]


def test_bench_table_has_the_shipped_column_only_where_it_was_timed(cpu_bench, monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: 4e12)
    monkeypatch.setattr(kernels, "require_gpu_kernels", lambda *a: kernels.DeviceInfo("cuda", "stub", "sm_90"))
    monkeypatch.setattr(bench, "bench_shape", lambda shape, fmt, layout, tokens, bw, **k: [dict(
        shape=shape.name, format=fmt, layout=layout, tokens=1, distinct=1.0, mbytes=1.0, kernel_us=10.0,
        read_floor_us=8.0, over_floor=1.25, roofline_us=5.0, frac_roofline=0.5, read_floor_2launch_us=9.0,
        read_floor_2dep_us=9.5, over_floor_2dep=1.05, calls=1, calls_weight_mbytes=1.0, floor_weight_mbytes=1.0,
        fallback_us=20.0, fallback_note="x", shipped_us=shipped, shipped_note="y" if shipped else "")])
    for shipped in (None, 15.0):
        lines = []
        bench.run(shapes=("qwen35-tp4",), tokens=(1,), out_dir=str(tmp_path), echo=lines.append)
        header = next(ln for ln in lines if ln.startswith("| shape |"))
        row = next(ln for ln in lines if ln.startswith("| qwen35-tp4 |"))
        assert header.endswith("| fallback µs | SGLang as shipped µs |" if shipped else "| fallback µs |")
        assert row.endswith("| 20.0 | 15.0 |" if shipped else "| 20.0 |")
