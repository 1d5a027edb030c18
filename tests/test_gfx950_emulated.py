"""The gfx950 build of the kernels, run on this CPU (sglang_smallm_plugin/emulated.py, hip/smallm_emu.h).

No AMD GPU is reachable, so these are the only runs anywhere of the code the MI355X build executes: wave64
(kWarp = 64, its reductions and lane maps), the gfx950 paths of every `#if SMALLM_HIP` (the in-order load
drain, the ds_bpermute scans, ballot), the block kernel that gfx950 runs by default (variant 0, its items
chained across blocks by counters and tickets), the opt-in two-pass kernels (variant 5) and the sort with
its fused MXFP8 quantisation, with the gfx950 conversions and dot product as the ISA describes them. Each
check is the selftest's: fresh seeded inputs, the output poisoned, the pure-torch reference within the
tolerance table, a second launch bit-identical. The emulation itself is checked first (its cross-lane
operations, barriers, deadlock report, conversions), and four builds with a deliberate fault must fail.
What it cannot show: timing, the silicon's own rounding, the real toolchain's code (the ISA and ROCm build
checks in test_kernel_compile.py cover what the compilers make of the same source).
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from test_rocm_aiter_path import rocm_fp8, rocm_mxfp4  # noqa: F401  (fixtures: SGLang's layers as on ROCm)

from sglang_smallm_plugin import edge_cases, emulated, gate, selftest, sort_selftest
from sglang_smallm_plugin.calls import FP8_BLOCK128, MXFP4, ROW_MAJOR, SHUFFLE16
from sglang_smallm_plugin.reference.quant import FP4_VALUES
from sglang_smallm_plugin.shapes import shape_by_name

ROOT = pathlib.Path(__file__).resolve().parents[1]
WHY = emulated.unavailable_reason()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"gfx950 emulation: {WHY}")

# Small shapes that keep the kernels' structure (D, I, top-k, shared expert) at a fraction of the experts:
# I = 128 and 256 (Qwen3.5 TP8 / TP4), 384 (Qwen3-235B-like, MiniMax-M3-like), D = 6144 (MiniMax-M3-like).
SMALL = ("D1024-E16-K4-I256", "D512-E9-K3-I128-S1", "D2048-E12-K5-I384-S1", "D6144-E6-K3-I384-S1")


def _env(**extra):
    env = dict(os.environ)
    env.update({k: str(v) for k, v in extra.items()})
    return env


@pytest.fixture(scope="module")
def ops():
    return emulated.load()


def test_emulation_itself(tmp_path):
    """The emulator's own behaviour, in a C++ program without torch (tests/emu/emu_selfcheck.cpp): cross-lane
    operations within each 64-lane wave, block barriers, blocks waiting on each other, a deadlock reported
    (not hung), launches no GPU would take refused; blocks dispatched a few at a time (the resident ones),
    each finding its dynamic shared memory poisoned, and blocks waiting on one never dispatched reported; and its gfx950 conversions equal torch's e4m3 and the
    reference's e2m1 decoders for every code, times the scale."""
    exe = tmp_path / "selfcheck"
    cmd = [emulated.host_clang(), "-std=c++20", "-O1", "-DSMALLM_EMU", "-D__gfx950__", "-Wall", "-Werror",
           f"-I{ROOT / 'hip'}", str(ROOT / "tests" / "emu" / "emu_selfcheck.cpp"), "-o", str(exe), "-lpthread"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    checks = [ln for ln in r.stdout.splitlines() if not ln.startswith(("fp8 ", "fp4 ", "order "))]
    assert r.returncode == 0 and len(checks) == 13 and all(ln.startswith("ok ") for ln in checks), r.stdout
    stuck = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                           env=_env(SMALLM_SELFCHECK_UNDISPATCHED=1, SMALLM_EMU_TIMEOUT_S=2))
    assert stuck.returncode == 0 and ("ok a block waiting on a block not yet dispatched hangs, reported at the "
                                      "timeout") in stuck.stdout.splitlines(), stuck.stdout
    fp8 = {int(p[1]): (float(p[2]), float(p[3])) for p in (ln.split() for ln in r.stdout.splitlines())
           if p[0] == "fp8"}
    want = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    for b in range(256):
        w = float(want[b])
        if w != w:
            assert fp8[b][0] != fp8[b][0] and fp8[b][1] != fp8[b][1], b  # 0x7f, 0xff: NaN
        else:
            assert fp8[b] == (w, 2 * w), (b, fp8[b], w)  # f32 at scale 1; bf16 at scale 2 (exact)
    fp4 = {int(p[1]): (float(p[2]), float(p[3])) for p in (ln.split() for ln in r.stdout.splitlines())
           if p[0] == "fp4"}
    assert fp4 == {n: (float(FP4_VALUES[n]), float(FP4_VALUES[n]) / 2) for n in range(16)}
    # threads run first to last: only the last saw its neighbour's (thread 0's) write; reversed, all but thread 0
    assert "order 1" in r.stdout.splitlines(), r.stdout
    rev = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=_env(SMALLM_EMU_ORDER="reverse"))
    assert rev.returncode == 0 and "order 255" in rev.stdout.splitlines(), rev.stdout


def _run(formats, shapes, layouts, seeds, tokens=None, pad=0):
    """selftest's own matrix loop on the emulation (selftest.run(emulate=True)), quietly."""
    return selftest.run(formats=formats, shapes=shapes, layouts=layouts, seeds=seeds, tokens=tokens, pad=pad,
                        echo=lambda *_: None, emulate=True)


@pytest.mark.parametrize("layout", [ROW_MAJOR, SHUFFLE16])
@pytest.mark.parametrize("fmt", [FP8_BLOCK128, MXFP4])
def test_block_kernel_small_shapes(ops, fmt, layout):
    """gfx950's default kernel (variant 0) on four shapes, 1, 3, 8 tokens and the gfx950 cap, 3 seeds."""
    results = _run((fmt,), SMALL, (layout,), range(3))
    counts = [selftest.default_tokens(shape_by_name(spec), fmt, emulated.ARCH, layout) for spec in SMALL]
    assert all(len(c) == 4 for c in counts) and len(results) == 3 * 4 * len(SMALL), counts  # 1, 3, 8 and the cap
    bad = [r for r in results if not r.ok]
    assert not bad, bad


@pytest.mark.parametrize("fmt", [FP8_BLOCK128, MXFP4])
@pytest.mark.parametrize("name", ["qwen35-tp8", "qwen35-tp4"])
def test_block_kernel_qwen35(ops, name, fmt):
    """Qwen3.5-397B as served on an MI355X (AITER-shuffled weights, E = 513, top-10 + shared) at 1 token and
    at the gfx950 cap (FP8 48 at TP8, 20 at TP4; MXFP4 40), one seed (the full matrix: `sglang-smallm
    selftest --emulate`, recorded in examples/results)."""
    shape = shape_by_name(name)
    cap = gate.shape_cap(emulated.ARCH, fmt, shape, SHUFFLE16)
    assert cap >= 20
    results = _run((fmt,), (name,), (SHUFFLE16,), range(1), tokens=[1, cap])
    assert len(results) == 2 and all(r.ok for r in results), results


def test_edge_cases(ops):
    """The selftest's edge-case inputs (extreme activations, wide scale ranges, invalid ids, a token with no
    valid slot whose row must be exactly zero, a crowded expert, a routed scaling factor), both formats."""
    bad = []
    for case in edge_cases.EDGE_CASES:
        for fmt in (FP8_BLOCK128, MXFP4):
            r = edge_cases.check_edge_case(case, fmt, 0, "cpu", shape_name="D1024-E17-K9-I128-S1", ops=ops)
            if not r.ok:
                bad.append(r)
    assert not bad, bad


def test_sort_every_case(ops):
    """The sort's whole selftest matrix (compact over Qwen3.5, distributed over E = 129, both formats, the
    fused MXFP8, five routing kinds), one seed: exact against the reference, tails untouched, deterministic."""
    results = [sort_selftest.check_sort_case(*c[:7], "cpu", fused=c[7], path=c[8], ops=ops)
               for c in sort_selftest.cases(seeds=range(1))]
    bad = [r for r in results if not r.ok]
    assert len(results) > 600 and not bad, bad[:5]


_GRID_SCRIPT = r"""
import sys, torch
from sglang_smallm_plugin import emulated, kernels
from sglang_smallm_plugin.shapes import shape_by_name
from sglang_smallm_plugin.testdata import make_call, reference_of
from sglang_smallm_plugin.tolerances import moe_tolerance, rel_l2
ops, outs = emulated.load(), []
for spec, fmt, layout, T in [("D1024-E16-K4-I256", "fp8_block128", "shuffle16x16", 8),
                             ("D1024-E16-K4-I256", "mxfp4", "row_major", 20),
                             ("D512-E9-K3-I128-S1", "fp8_block128", "row_major", 3)]:
    call = make_call(shape_by_name(spec), fmt, layout, T, 1, "cpu")
    out = torch.full_like(call.x, float("nan"))
    kernels.run_moe(call, out=out, ops=ops)
    err = rel_l2(out.float(), reference_of(call).float())
    assert bool(out.isfinite().all()) and err <= moe_tolerance(fmt), (spec, fmt, layout, T, err)
    sync = kernels.Workspace.ensure("cpu", call.hidden, call.inter).sync
    assert int((sync != 0).sum()) == 0, (spec, fmt, layout, T, "counters left set")  # what a graph replay needs
    outs.append(out)
torch.save(outs, sys.argv[1])
"""


def test_grid_size_thread_order_and_variant5(tmp_path):
    """The kernels' outputs do not depend on how many blocks run them or on the order of their threads: 1, 4 and
    9 compute units (grids of 2, 8 and 18 blocks, so blocks take many items or few), and a block's threads
    resumed last to first between barriers (SMALLM_EMU_ORDER=reverse: a missing barrier between waves would
    show), give bit-identical outputs, for the block kernel and for the two-pass kernels
    (SMALLM_KERNEL_VARIANT=5, opt-in on gfx950), each within the tolerance; and every call leaves the
    workspace's counters zero (the kernels reset what they use: the next call and a graph replay need it)."""
    script = tmp_path / "grid.py"
    script.write_text(_GRID_SCRIPT)
    outs = {}
    for variant in (0, 5):
        for cus, order in ((1, "forward"), (4, "forward"), (9, "forward"), (4, "reverse"), (9, "reverse")):
            f = tmp_path / f"out_{variant}_{cus}_{order}.pt"
            r = subprocess.run([sys.executable, str(script), str(f)], capture_output=True, text=True, timeout=900,
                               env=_env(SMALLM_KERNEL_VARIANT=variant, SMALLM_EMU_CUS=cus, SMALLM_EMU_ORDER=order))
            assert r.returncode == 0, r.stderr[-3000:]
            outs[variant, cus, order] = torch.load(f)
    for (variant, cus, order), got in outs.items():
        assert all(torch.equal(a, b) for a, b in zip(got, outs[variant, 4, "forward"])), (variant, cus, order)


_READS_SCRIPT = r"""
import dataclasses, json, sys
from sglang_smallm_plugin import emulated
from sglang_smallm_plugin.shapes import shape_by_name
from sglang_smallm_plugin.testdata import make_call, make_padded_weights, make_weights
ops, rows = emulated.load(), []
for spec, fmt, layout, tokens, pad in json.loads(sys.argv[1]):
    shape = shape_by_name(spec)
    w = (make_padded_weights(shape, fmt, layout, 3, "cpu", pad) if pad else make_weights(shape, fmt, layout, 3, "cpu"))
    for T in tokens:
        call = dataclasses.replace(make_call(shape, fmt, layout, T, 3, "cpu", weights=w), inter_pad=pad)
        problem, extra = emulated.run_checking_reads(ops, call)
        rows.append(dict(case=f"{spec} {fmt} {layout} pad={pad} T={T}", problem=problem, row_end_extra_bytes=extra))
print(json.dumps(rows))
"""

# (shape, format, layout, token counts, intermediate padding): gfx950's caps (FP8 TP4 20, TP8 48, MXFP4 40), SGLang's
# padding of Quark MXFP4 at Qwen3.5 TP8 (I = 128 stored as 256), the split down (I = 512), and rows of 512 bytes
# (FP8 D = 512, MXFP4 D = 1024), where the block kernel's lanes past a row's end load its last vector again
_READ_CASES = {
    0: [("qwen35-tp8", FP8_BLOCK128, SHUFFLE16, [1, 48], 0), ("qwen35-tp4", MXFP4, SHUFFLE16, [40], 0),
        ("qwen35-tp8", MXFP4, SHUFFLE16, [8], 128), ("minimax-m3", FP8_BLOCK128, ROW_MAJOR, [16], 0),
        ("D2048-E64-K8-I512", FP8_BLOCK128, ROW_MAJOR, [8], 0), ("D512-E9-K3-I128-S1", FP8_BLOCK128, ROW_MAJOR, [5], 0),
        ("D512-E9-K3-I128-S1", FP8_BLOCK128, SHUFFLE16, [5], 0), ("D1024-E16-K4-I256", MXFP4, SHUFFLE16, [3], 0)],
    5: [("qwen35-tp8", FP8_BLOCK128, SHUFFLE16, [1, 20, 48], 0), ("qwen35-tp4", MXFP4, SHUFFLE16, [20], 0),
        ("qwen35-tp8", MXFP4, SHUFFLE16, [8], 128), ("D2048-E64-K8-I512", FP8_BLOCK128, ROW_MAJOR, [8], 0),
        ("D512-E9-K3-I128-S1", FP8_BLOCK128, ROW_MAJOR, [5], 0)],
}


@pytest.mark.parametrize("variant", sorted(_READ_CASES))
def test_each_touched_experts_weights_are_read_once_and_nothing_else(tmp_path, variant):
    """The byte model behind every roofline here, checked on the gfx950 build's own loads: the emulation counts
    every weight load (load_weights / load_weight_word) per 16 bytes of w13 and w2. Each expert the routing
    touches has every byte of its real rows read, and exactly once (the down's w2 and the gate/up's w13), no
    untouched expert and none of SGLang's padding is read, and no weight load falls outside the two tensors;
    for the block kernel (gfx950's default) and the two-pass kernels. The one exception, by design
    (kLoadsDrainInOrder, hip/smallm_moe.h): the block kernel's lanes past a row's end load the row's last
    vector again (value unused) rather than sit under a guard; only rows of 512 bytes have such lanes, and those
    loads hit the line the row's own load just read, so they add no memory traffic."""
    script = tmp_path / "reads.py"
    script.write_text(_READS_SCRIPT)
    r = subprocess.run([sys.executable, str(script), json.dumps(_READ_CASES[variant])], capture_output=True,
                       text=True, timeout=1200, env=_env(SMALLM_KERNEL_VARIANT=variant))
    assert r.returncode == 0, r.stderr[-3000:]
    rows = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(rows) == sum(len(c[3]) for c in _READ_CASES[variant])
    for row in rows:
        assert row["problem"] is None, row
        if variant == 0 and row["case"].startswith(("D512-", "D1024-")):
            assert row["row_end_extra_bytes"] > 0, row  # the clamped lanes are there, and counted
        else:
            assert row["row_end_extra_bytes"] == 0, row


def _selftest_cli(fmt, fault):
    cmd = [sys.executable, "-m", "sglang_smallm_plugin.cli", "selftest", "--emulate", "--what", "moe",
           "--shapes", "D1024-E16-K4-I256", "--formats", fmt, "--layouts", ROW_MAJOR, "--seeds", "1",
           "--tokens", "1,8"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=_env(SMALLM_EMU_FAULT=fault))


def test_selftest_cli_emulated():
    """`sglang-smallm selftest --emulate` (what an AMD developer without the GPU runs) passes, and says what ran."""
    r = _selftest_cli(f"{FP8_BLOCK128},{MXFP4}", 0)
    assert r.returncode == 0 and "FAIL" not in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
    assert "gfx950 build emulated on this CPU" in r.stdout and "selftest: 4/4 cases pass" in r.stdout, r.stdout


@pytest.mark.parametrize("fault,fmt", [(1, FP8_BLOCK128), (2, MXFP4), (3, FP8_BLOCK128), (4, MXFP4)])
def test_a_faulty_emulation_fails_the_selftest(fault, fmt):
    """The checks above can fail: an emulation whose ds_bpermute reads the wrong lane (1), whose fp4
    conversion swaps a byte's nibbles (2), whose waves are 32 lanes wide (3, as if a kernel assumed CUDA's
    warp), or whose block barriers do not wait (4) makes `selftest --emulate` fail (or crash: 4 reads shared
    memory before it is written)."""
    r = _selftest_cli(fmt, fault)
    assert r.returncode != 0, r.stdout[-2000:]
    if r.returncode > 0:
        assert "FAIL" in r.stdout and "cases pass" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


_BOUNDS_SCRIPT = r"""
import dataclasses, sys, torch
from sglang_smallm_plugin import emulated, kernels
from sglang_smallm_plugin.shapes import shape_by_name
from sglang_smallm_plugin.testdata import make_call
spec, fmt, layout, T, where, expose = sys.argv[1:7]
ops, shape = emulated.load(), shape_by_name(spec)
call = make_call(shape, fmt, layout, int(T), 0, "cpu")
ids = call.topk_ids.clone()
ids[0, 0], ids[-1, 1] = shape.experts - 1, 0  # the first and the last expert's weights are read
call = dataclasses.replace(call, topk_ids=ids)
plain = torch.full_like(call.x, float("nan"))
kernels.run_moe(call, out=plain, ops=ops)
kernels.Workspace._by_device.clear()
gcall, names = emulated.guard_call(call, where)
if expose == "x":  # the edge's last 16 bytes of x themselves inaccessible: the kernels must fault
    gcall = dataclasses.replace(gcall, x=emulated.guarded(call.x, where, exposed=16))
out = emulated.guarded(torch.full_like(call.x, float("nan")), where)
kernels.run_moe(gcall, out=out, ops=ops)
print("guarded", ",".join(names), "identical", torch.equal(out, plain))
"""


@pytest.mark.parametrize("where", ["end", "start"])
@pytest.mark.parametrize("fmt,layout,spec,tokens", [(FP8_BLOCK128, SHUFFLE16, "D1024-E16-K3-I256", 5),
                                                    (MXFP4, SHUFFLE16, "D512-E9-K3-I128-S1", 8),
                                                    (FP8_BLOCK128, ROW_MAJOR, "D512-E9-K3-I128-S1", 13),
                                                    (MXFP4, ROW_MAJOR, "D1024-E16-K3-I256", 2)])
def test_no_access_past_any_tensor(tmp_path, fmt, layout, spec, tokens, where):
    """A CPU stand-in for compute-sanitizer's memcheck on the gfx950 build: every tensor the kernels read or
    write (x, weights, scales, routing, out, the workspace's h, y and counters) copied so that it ends just
    below an inaccessible page ("end") or starts just above one ("start"), the first and last experts routed
    to: the kernels run without a fault and give the unguarded output bit for bit. With x's last 16 bytes
    inside the page the same run must fault (the check can fail)."""
    script = tmp_path / "bounds.py"
    script.write_text(_BOUNDS_SCRIPT)
    args = [sys.executable, str(script), spec, fmt, layout, str(tokens), where]
    r = subprocess.run(args + ["none"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "identical True" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "guarded topk_ids,topk_weights,w13,w13_scale,w2,w2_scale,x" in r.stdout, r.stdout
    if where == "end":
        r = subprocess.run(args + ["x"], capture_output=True, text=True, timeout=600)
        assert r.returncode < 0, (r.returncode, r.stdout)  # killed by the fault (SIGSEGV)


@pytest.fixture
def emulated_providers(monkeypatch):
    """SGLANG_SMALLM_EMULATE=1: the plugin manager registers the emulated gfx950 providers."""
    from sglang_smallm_plugin import hookspecs

    monkeypatch.setenv("SGLANG_SMALLM_EMULATE", "1")
    hookspecs.reset_for_tests()
    yield
    hookspecs.reset_for_tests()  # the next manager is made after monkeypatch has unset the switch


def _layer_checks(harness, layer, fmt, w, seeds_at, calls):
    """Within gfx950's cap the layer's calls are the emulated kernel's and equal the loop reference (AITER never
    runs); at cap + 1 the emulated provider declines for the cap, as the compiled one does on an MI355X (on a
    CPU the reference provider then serves the call; on the MI355X SGLang's AITER runner would)."""
    from sglang_smallm_plugin.providers.emulated import EmulatedMoeProvider

    from moe_loop import loop_moe
    from test_rocm_aiter_path import SHAPE as ROCM_SHAPE

    from sglang_smallm_plugin.testdata import make_call
    from sglang_smallm_plugin.tolerances import TOLERANCES, rel_l2

    cap = gate.call_cap(harness.describe(layer, make_call(ROCM_SHAPE, fmt, ROW_MAJOR, 1, 0, "cpu", w)),
                        emulated.ARCH)[0]
    for T in (1, 3, cap):
        c = make_call(ROCM_SHAPE, fmt, ROW_MAJOR, T, seeds_at + T, "cpu", w)
        d = harness.decide(layer, c)
        assert d.is_kernel and d.path == "kernel:gfx950-emulated", d
        out = harness.forward(layer, c.x, c.topk_weights, c.topk_ids)
        assert rel_l2(out.float(), loop_moe(c).to(torch.bfloat16).float()) < TOLERANCES["sglang_layer_vs_loop"], T
    assert calls == []
    c = make_call(ROCM_SHAPE, fmt, ROW_MAJOR, cap + 1, seeds_at, "cpu", w)
    assert harness.decide(layer, c).path != "kernel:gfx950-emulated"
    ok, why = EmulatedMoeProvider().supports(harness.describe(layer, c))
    assert not ok and why.startswith("tokens:") and f"cap {cap}" in why, why


def test_sglangs_rocm_fp8_layer_runs_the_emulated_gfx950_kernel(rocm_fp8, emulated_providers, ops):
    """SGLang 0.5.23's Fp8MoEMethod as on ROCm with AITER (tests/test_rocm_aiter_path.py's stand-ins), backend
    smallm: SGLang shuffles the weights for AITER, the plugin reads the layout from the bytes, and the calls
    gfx950's gate admits run the gfx950 build's code (emulated) on them."""
    from test_rocm_aiter_path import _layer

    harness, calls = rocm_fp8
    layer, w = _layer(harness, 0, 470)
    _layer_checks(harness, layer, FP8_BLOCK128, w, 500, calls)


def test_sglangs_quark_mxfp4_layer_padded_for_aiter_runs_the_emulated_gfx950_kernel(rocm_mxfp4, emulated_providers,
                                                                                    ops):
    """SGLang's Quark W4A4 MXFP4 scheme on gfx950 with AITER pads I = 128 to 256 and e8m0_shuffle's the scales,
    as for Qwen3.5 at TP8; with the padding poisoned after SGLang's processing, the gfx950 build's code
    (emulated) computes I = 128 and never reads it."""
    from test_rocm_aiter_path import SHAPE as ROCM_SHAPE, _poison_padding

    from sglang_smallm_plugin.testdata import make_weights

    harness, calls = rocm_mxfp4
    w = make_weights(ROCM_SHAPE, MXFP4, ROW_MAJOR, 1, "cpu")
    layer = harness.build_layer(ROCM_SHAPE, MXFP4, w, layer_id=480)
    core = harness.moe_method(layer).runner.runner_core
    assert (core.inter_pad, core.hidden_pad) == (128, 0)
    _poison_padding(layer, ROCM_SHAPE.inter)
    _layer_checks(harness, layer, MXFP4, w, 600, calls)


@pytest.mark.parametrize("fmt,layout", [(MXFP4, SHUFFLE16), (FP8_BLOCK128, ROW_MAJOR)])
def test_padded_layers_never_read_the_padding(ops, fmt, layout):
    """`selftest --pad 128` on the gfx950 build: the layer as SGLang pads it for AITER (I = 128 stored as 256, as
    Quark MXFP4 Qwen3.5 at TP8), the padding poisoned: the output equals the unpadded layer's bit for bit."""
    results = _run((fmt,), ("D1024-E16-K4-I128",), (layout,), range(2), tokens=[1, 5, 16], pad=128)
    assert len(results) == 6 and all(r.ok and r.pad_identical for r in results), results
