"""The command-line tool runs on CPU and prints what it claims."""

import argparse
import os
import subprocess
import sys

import pytest


def _cli(*args, env=None, timeout=900):
    e = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "sglang_smallm_plugin.cli", *args], capture_output=True, text=True,
                          env=e, timeout=timeout)


def test_doctor():
    r = _cli("doctor")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    out = r.stdout
    assert "SGLang 0.5.23 (plugin APIs present" in out
    assert "smallm -> sglang_smallm_plugin:register" in out
    assert "--moe-runner-backend smallm  registered" in out
    assert "NOT APPLIED" not in out and out.count("hook ") >= 7
    assert "moe  smallm-compiled (prio 100) cannot serve: no GPU" in out
    assert "moe  reference (prio 0)      can serve: CPU tensors" in out
    assert "SGLANG_ROCM_SMALLM_MOE" in out
    assert "tokens=20                    kernel" in out and "tokens=21                    fallback  tokens: 21 tokens > cap 20" in out


def test_doctor_shows_where_the_cap_switches():
    # without --tokens the table adds the shape's cap and cap + 1 (H200 FP8 at I=384: 13, measured 2026-12-04)
    r = _cli("doctor", "--inter", "384", "--arch", "sm_90")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "token cap                    13 (H200 crossover vs SGLang Triton" in r.stdout
    assert "tokens=13                    kernel    13 tokens <= cap 13" in r.stdout
    assert "tokens=14                    fallback  tokens: 14 tokens > cap 13" in r.stdout
    assert "tokens=12 " not in r.stdout  # only the usual counts and the cap's two


def test_doctor_decision_table_for_other_shapes():
    r = _cli("doctor", "--inter", "128", "--arch", "gfx950", "--tokens", "48,49")
    assert "tokens=48                    kernel" in r.stdout and "tokens=49                    fallback" in r.stdout
    assert ("cap 48 (crossover vs AITER measured upstream on MI355X, for SGLang's own gfx950 kernel: `sglang-smallm "
            "bench --write-caps` measures this one's on yours); runs block kernel (variant 0)") in r.stdout


def test_doctor_names_the_kernels_per_token_count():
    r = _cli("doctor", "--inter", "128", "--arch", "sm_90", "--tokens", "20,40,48,59,60")
    assert "tokens=20 " in r.stdout and "runs two-pass (variant 5): gate/up on tensor cores (2 teams per block" in r.stdout
    assert "shared-memory carveout), down on tensor cores (2 teams per block: 220 pairs >= 22 at I=128)" in r.stdout
    assert "tokens=40                    kernel    40 tokens <= cap 59" in r.stdout
    assert "runs 2 calls of at most 20 tokens (x as f16 is 327680 B, over the 163840 B stage), each two-pass" in r.stdout
    assert "tokens=48                    kernel    48 tokens <= cap 59" in r.stdout
    assert "runs 3 calls of at most 16 tokens (x as f16 is 393216 B, over the 163840 B stage)" in r.stdout
    assert "tokens=59                    kernel    59 tokens <= cap 59" in r.stdout
    assert "runs 3 calls of at most 20 tokens" in r.stdout
    assert "tokens=60                    fallback  tokens: 60 tokens > cap 59" in r.stdout


def test_doctor_names_a_tuned_triton_config_of_the_users(tmp_path):
    """With SGLANG_MOE_CONFIG_DIR holding a config for the shape, doctor names the file, says the caps were
    measured against SGLang's own configurations and gives the fix; with SGLANG_SMALLM_MAX_TOKENS set, the
    lowered cap and the file."""
    name = "E=513,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"
    (tmp_path / "configs" / "triton_3_6_0").mkdir(parents=True)
    (tmp_path / "configs" / "triton_3_6_0" / name).write_text("{}")
    plain = _cli("doctor", "--arch", "sm_90", "--tokens", "8")
    assert "Triton fallback config       the configurations SGLang ships" in plain.stdout
    own = _cli("doctor", "--arch", "sm_90", "--tokens", "8", env={"SGLANG_MOE_CONFIG_DIR": str(tmp_path)})
    assert "Triton fallback config       sglang-smallm: SGLang's Triton fallback for E=513 N=256 loads" in own.stdout
    assert name in own.stdout and "Fix: set SGLANG_SMALLM_MAX_TOKENS" in own.stdout
    lowered = _cli("doctor", "--arch", "sm_90", "--tokens", "8,20",
                   env={"SGLANG_MOE_CONFIG_DIR": str(tmp_path), "SGLANG_SMALLM_MAX_TOKENS": "19"})
    assert "token cap                    19 (SGLANG_SMALLM_MAX_TOKENS=19, under the measured cap 30:" in lowered.stdout
    assert "tokens=20                    fallback  tokens: 20 tokens > cap 19" in lowered.stdout
    assert f"yours: {tmp_path}" in lowered.stdout


def test_doctor_plans_for_the_given_layout():
    # FP8 at 8 tokens (D=4096): two gate/up teams for row-major weights (kFp8TeamsMinTokens), one for
    # AITER-shuffled ones (the rule was measured on the row-major kernel only)
    row = _cli("doctor", "--arch", "sm_90", "--tokens", "8")
    shuf = _cli("doctor", "--arch", "sm_90", "--tokens", "8", "--layout", "shuffle16x16")
    assert "fp8_block128 row_major on sm_90" in row.stdout and "fp8_block128 shuffle16x16 on sm_90" in shuf.stdout
    assert "gate/up on tensor cores (2 teams per block: FP8 row-major, 8 tokens >= 2" in row.stdout
    assert "runs two-pass (variant 5): gate/up on tensor cores, down on tensor cores" in shuf.stdout


def test_doctor_flags_whitelist_exclusion():
    r = _cli("doctor", env={"SGLANG_PLUGINS": "other"})
    assert "excludes smallm" in r.stdout


def test_demo_on_cpu():
    r = _cli("demo", "--tokens", "1,8,48", "--experts", "17", "--no-emulate")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    lines = [l for l in r.stdout.splitlines() if l.strip()[:2].strip().isdigit()]
    assert [int(l.split()[0]) for l in lines] == [1, 8, 48]
    assert all("kernel:reference" in l and "CPU tensors" in l for l in lines)
    assert "runner=smallm, fallback=triton" in r.stdout
    assert "kernel path on CPU: the pure-torch reference provider" in r.stdout
    assert "worst relative error" in r.stdout and ": OK" in r.stdout


def test_demo_on_cpu_runs_the_emulated_gfx950_kernels_within_the_cap():
    """The main job's CPU default where a host clang++ can build the emulation: the calls gfx950's gate admits
    (20 tokens at Qwen3.5 TP4) through the gfx950 build emulated, the rest through the reference."""
    from sglang_smallm_plugin import emulated

    why = emulated.unavailable_reason()
    if why:
        r = _cli("demo", "--tokens", "1", "--experts", "17")
        assert r.returncode == 0 and f"cannot be built here: {why}" in r.stdout, r.stdout
        return
    r = _cli("demo", "--tokens", "1,20,21", "--experts", "17")
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rows = {int(l.split()[0]): l for l in r.stdout.splitlines() if l.strip()[:2].strip().isdigit()}
    assert "kernel:gfx950-emulated" in rows[1] and "kernel:gfx950-emulated" in rows[20], r.stdout
    assert "kernel:reference" in rows[21] and ": OK" in r.stdout, r.stdout


@pytest.mark.parametrize("cmd", [("bench",), ("selftest",), ("bench", "--sort"), ("selftest", "--what", "sort"),
                                 ("selftest", "--what", "edge")])
def test_gpu_commands_explain_themselves_on_cpu(cmd):
    r = _cli(*cmd)
    assert r.returncode != 0
    assert "needs a GPU" in (r.stdout + r.stderr)


def test_isa_command(tmp_path):
    r = _cli("isa", "--arch", "gfx950", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "moe fp8_block128 row_major" in r.stdout and "v_cvt_scalef32_pk_bf16_fp8" in r.stdout
    assert (tmp_path / "smallm_moe.gfx950.s").exists()
    assert "sort aiter compact" in r.stdout and "sort triton distributed" in r.stdout
    assert (tmp_path / "smallm_sort.gfx950.s").exists()


def test_bench_csv_keeps_the_kernel_plan_in_one_column(tmp_path):
    """bench.csv rows carry the kernel plan, which holds commas: it must stay one field."""
    import csv

    from sglang_smallm_plugin import bench, kernels

    plan = kernels.kernel_plan("sm_90", "fp8_block128", 1, 11, 4096, 256)
    assert "," in plan
    rows = [dict(shape="qwen35-tp4", tokens=1, kernel_us=22.4, kernels=plan),
            dict(shape="qwen35-tp4", tokens=9, kernel_us=150.0, kernels=kernels.kernel_plan("sm_90", "fp8_block128", 9, 11, 4096, 256))]
    bench.write_csv(rows, tmp_path / "b.csv")
    back = list(csv.DictReader(open(tmp_path / "b.csv")))
    assert [r["kernels"] for r in back] == [r["kernels"] for r in rows]
    assert back[1]["tokens"] == "9" and float(back[0]["kernel_us"]) == 22.4


@pytest.mark.parametrize("fmt", ["fp8_block128", "mxfp4"])
def test_bench_two_launch_floor_splits_each_expert_at_its_w13_bytes(fmt):
    """The bench's two-launch floors read W13's bytes (weights + scales) in one launch and W2's in a
    second: the split is W13's bytes by the format's byte model, 16-byte aligned for the floor kernel."""
    from sglang_smallm_plugin.shapes import SHAPES

    for shape in SHAPES.values():
        D, I = shape.hidden, shape.inter
        if fmt == "mxfp4":  # e2m1 two a byte, one e8m0 per 32 values
            w13, w2 = 2 * D * I // 2 + 2 * D * I // 32, D * I // 2 + D * I // 32
        else:  # e4m3, one fp32 per 128 x 128 block
            w13, w2 = 2 * D * I + 4 * (2 * I // 128) * (D // 128), D * I + 4 * (D // 128) * (I // 128)
        assert shape.w13_bytes(fmt) == w13, shape.name
        assert shape.expert_bytes(fmt) == w13 + w2, shape.name
        assert w13 % 16 == 0 and w2 % 16 == 0, shape.name


def test_launch_token_parts_follow_the_launcher_split(monkeypatch):
    """The token counts of the launcher's consecutive calls (consecutive token ranges of mma_split_tokens'
    size): one call where x fits the tensor-core stage, near-equal parts above; one call where no split
    runs (gfx950, SMALLM_MMA_SPLIT=0, the block kernel)."""
    from sglang_smallm_plugin import kernels

    for var in ("SMALLM_MMA_SPLIT", "SMALLM_MMA_SPLIT_TOKENS", "SMALLM_KERNEL_VARIANT", "SMALLM_MMA"):
        monkeypatch.delenv(var, raising=False)
    assert kernels.launch_token_parts("sm_90", "fp8_block128", 20, 11, 4096, 256) == [20]
    assert kernels.launch_token_parts("sm_90", "fp8_block128", 21, 11, 4096, 256) == [11, 10]
    assert kernels.launch_token_parts("sm_90", "fp8_block128", 28, 11, 4096, 256) == [14, 14]
    assert kernels.launch_token_parts("sm_90", "mxfp4", 41, 11, 4096, 256) == [14, 14, 13]
    assert kernels.launch_token_parts("gfx950", "fp8_block128", 28, 11, 4096, 256) == [28]
    monkeypatch.setenv("SMALLM_MMA_SPLIT_TOKENS", "10")
    assert kernels.launch_token_parts("sm_90", "fp8_block128", 19, 11, 4096, 256) == [10, 9]
    monkeypatch.setenv("SMALLM_MMA_SPLIT", "0")
    assert kernels.launch_token_parts("sm_90", "fp8_block128", 28, 11, 4096, 256) == [28]
    monkeypatch.delenv("SMALLM_MMA_SPLIT")
    monkeypatch.setenv("SMALLM_KERNEL_VARIANT", "1")
    assert kernels.launch_token_parts("sm_90", "fp8_block128", 28, 11, 4096, 256) == [28]
    # each part appears in the plan the logs print
    monkeypatch.delenv("SMALLM_KERNEL_VARIANT")
    monkeypatch.delenv("SMALLM_MMA_SPLIT_TOKENS")
    assert kernels.kernel_plan("sm_90", "fp8_block128", 28, 11, 4096, 256, sms=132).startswith("2 calls of at most 14 tokens")


def test_bench_call_weight_bytes_counts_an_expert_once_per_part():
    """The bench's byte model for split calls: an expert routed from two parts is read by both, once per
    part; ids outside [0, E) (SGLang's -1 padding) are not weights read."""
    import torch

    from sglang_smallm_plugin import bench
    from sglang_smallm_plugin.shapes import shape_by_name

    shape = shape_by_name("qwen35-tp4")
    eb = shape.expert_bytes("fp8_block128")
    ids = torch.tensor([[1, 2], [2, 3], [2, 5], [1, -1]], dtype=torch.int32)
    assert bench.call_weight_bytes(ids, shape, "fp8_block128", [4]) == 4 * eb            # 1, 2, 3, 5
    assert bench.call_weight_bytes(ids, shape, "fp8_block128", [2, 2]) == (3 + 3) * eb   # {1,2,3} + {1,2,5}
    assert bench.call_weight_bytes(ids, shape, "fp8_block128", [1, 1, 1, 1]) == (2 + 2 + 2 + 1) * eb


def test_bench_shape_rows_carry_the_split_calls_bytes(monkeypatch):
    """bench_shape's own bookkeeping on CPU (the timings stubbed: they need the GPU): rows say how many calls
    the launcher makes and what weight bytes those calls read beside the floor's."""
    from sglang_smallm_plugin import bench, kernels, launch_plan
    from sglang_smallm_plugin.shapes import shape_by_name

    for var in ("SMALLM_MMA_SPLIT", "SMALLM_MMA_SPLIT_TOKENS", "SMALLM_KERNEL_VARIANT", "SMALLM_MMA"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(kernels, "device_info", lambda device=None: kernels.DeviceInfo("cuda", "stub", "sm_90"))
    monkeypatch.setattr(launch_plan, "_device_sms", lambda: 132)
    monkeypatch.setattr(bench, "time_graph", lambda calls: 100.0)
    monkeypatch.setattr(bench, "time_read_floor", lambda *a, **k: 80.0)
    lines = []
    rows = bench.bench_shape(shape_by_name("D4096-E33-K11-I128"), "fp8_block128", "row_major", [4, 28], bw=4e12, copies=2,
                             device="cpu", echo=lines.append, fallback=False)
    one, split = rows
    assert one["calls"] == 1 and one["calls_weight_mbytes"] == one["floor_weight_mbytes"]
    assert split["calls"] == 2 and split["calls_weight_mbytes"] > split["floor_weight_mbytes"]
    assert "2 calls read" in lines[1] and "calls read" not in lines[0]


@pytest.mark.parametrize("cmd, bad", [("doctor", "1,x"), ("bench", "0"), ("selftest", "-3"), ("demo", "2.5")])
def test_bad_token_counts_end_the_command_with_the_reason(cmd, bad):
    """--tokens is parsed once, by the argparse type every command shares: a value that is not a positive
    integer is a usage error naming it (exit 2), before anything runs."""
    r = _cli(cmd, f"--tokens={bad}")
    assert r.returncode == 2, r.stdout + r.stderr[-2000:]
    wrong = bad.split(",")[-1]
    assert f"argument --tokens: '{wrong}' is not a token count (a positive integer)" in r.stderr
    assert "Traceback" not in r.stderr


def test_token_counts_parses_lists():
    from sglang_smallm_plugin.cli import token_counts

    assert token_counts("1, 2,,48") == (1, 2, 48)
    assert token_counts("") == ()
    for bad in ("x", "0", "-1", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a token count"):
            token_counts(bad)


@pytest.mark.parametrize("emulate", [(), ("--emulate",)])
def test_selftest_refuses_a_shape_the_shuffled_mxfp4_weights_cannot_take(emulate):
    """AITER's e8m0_shuffle tiles 256 rows of [E*N, K/32]: shuffled MXFP4 test weights of 3 experts at D = 384
    cannot exist. The selftest says so, naming the case and what to use, before loading or running anything
    (on CPU and emulated alike), not with a traceback from a reshape."""
    r = _cli("selftest", *emulate, "--what", "moe", "--seeds", "1", "--shapes", "D384-E3-K2-I128,qwen35-tp8",
             "--formats", "mxfp4", "--layouts", "row_major,shuffle16x16", "--tokens", "1", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "needs a GPU" not in r.stderr
    assert ("D384-E3-K2-I128 mxfp4 shuffle16x16: shuffle16x16 MXFP4 weights need experts x rows in multiples of 256"
            in r.stderr), r.stderr
    assert "w2_scale has 3 x 384 = 1152 rows: use row_major for this shape" in r.stderr
    assert "qwen35-tp8" not in r.stderr and "row_major:" not in r.stderr  # only the case that cannot be made


def test_test_weights_refuse_untiled_shuffled_mxfp4_and_take_every_registered_shape():
    from sglang_smallm_plugin.shapes import SHAPES, shape_by_name
    from sglang_smallm_plugin.testdata import UnsupportedLayout, layout_refusal, make_weights

    for name in SHAPES:
        for fmt in ("fp8_block128", "mxfp4"):
            for layout in ("row_major", "shuffle16x16"):
                assert layout_refusal(shape_by_name(name), fmt, layout) is None, (name, fmt, layout)
    odd = shape_by_name("D384-E3-K2-I128")
    assert layout_refusal(odd, "mxfp4", "row_major") is None
    assert layout_refusal(odd, "fp8_block128", "shuffle16x16") is None
    assert "w2_scale has 3 x 384" in layout_refusal(odd, "mxfp4", "shuffle16x16")
    assert layout_refusal(shape_by_name("D384-E4-K2-I128"), "mxfp4", "shuffle16x16") is None  # 4 x 384 = 6 tiles
    with pytest.raises(UnsupportedLayout, match="w2_scale has 3 x 384 = 1152 rows"):
        make_weights(odd, "mxfp4", "shuffle16x16", 0, "cpu")
    w = make_weights(shape_by_name("D384-E4-K2-I128"), "mxfp4", "shuffle16x16", 0, "cpu")
    assert w["w2_scale"].shape == (4, 384, 8)  # K/32 = 4 columns padded to AITER's 8
