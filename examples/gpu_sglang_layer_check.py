"""SGLang's own FusedMoE on a GPU with --moe-runner-backend smallm, and the same layer with the backend its
fallback is (triton on CUDA, aiter on ROCm; SMALLM_CHECK_PEER overrides), built from the same weights: FP8
block-scale (Fp8Config, the default) or,
with SMALLM_CHECK_FORMAT=mxfp4, the Quark W4A4 MXFP4 scheme. Checks, per token count:
  - calls the gate sends to the kernel: the compiled kernel ran inside SGLang's layer, within the
    format's tolerance of the reference;
  - calls it sends to the fallback: bit-identical to that backend's layer (on ROCm with SGLANG_ROCM_SMALLM_MOE
    as the call has it, since it also switches SGLang's own small-M kernel in the AITER runner);
  - SGLANG_ROCM_SMALLM_MOE=0: every call decided for the fallback, and bit-identical to that backend's layer;
  - both ways, the layer captured in a CUDA graph (as SGLang's decode runs it: the runner's Python code,
    the gate and, for calls over 20 tokens, the split run during the capture) on other inputs, the call's
    inputs copied in and the output poisoned, then replayed: bit-identical to the eager call
    (SMALLM_CHECK_GRAPH=0 skips this);
  - with SMALLM_CHECK_COMPILE=1, with the plugin's kernels on, the layer's call under torch.compile (inductor,
    dynamic=False, as SGLang's --enable-torch-compile compiles its forward per batch size), eagerly and then
    captured in a CUDA graph and replayed: bit-identical to the eager call;
  - FP8 where SGLang leaves the weights row-major (CUDA), unless SMALLM_CHECK_SHUFFLED=0: a layer whose processing
    leaves AITER's (16,16) shuffle without the is_shuffled flag: the layout read from the bytes, the kernel within the tolerance on those weights;
  - unless SMALLM_CHECK_CAPS=0, a caps file (SGLANG_SMALLM_CAPS_FILE, as `bench --write-caps` writes it) for this
    layer's shape with a cap of the smallest token count checked: a layer built with it sends that count to the
    kernel and the larger ones to the fallback (bit-identical to that backend's layer), each decision naming the
    file; a file measured on another arch fails the layer's construction.
Where a path cannot run on the machine (the H200 image has no sgl_kernel: SGLang's Triton runner on CUDA
calls its silu_and_mul, moe_align_block_size and moe_sum_reduce, which our import-only stub raises on;
the Quark MXFP4 scheme's own path is AITER's, ROCm only), that check is reported as "not runnable here"
with the reason, and the run passes or fails on the checks that did run. On the H200:
examples/h200_sglang_layer_job.sh."""

import logging
import os
import sys

import torch

logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")

from sglang_smallm_plugin.shapes import MoeShape, shape_by_name  # noqa: E402
from sglang_smallm_plugin.sglang_integration import layer_harness as H  # noqa: E402
from sglang_smallm_plugin.testdata import make_call, make_weights, reference_of  # noqa: E402
from sglang_smallm_plugin.tolerances import moe_tolerance, rel_l2  # noqa: E402

# SMALLM_CHECK_SHAPE: a registered shape's name or a D..-E..-K..-I.. spec; default Qwen3.5 TP8 with 33 experts
_spec = os.environ.get("SMALLM_CHECK_SHAPE", "")
shape = shape_by_name(_spec) if _spec else MoeShape("qwen35-tp8-reduced", 4096, 33, 11, 128, 1)
DEV = os.environ.get("SMALLM_CHECK_DEVICE", "cuda")
FMT = os.environ.get("SMALLM_CHECK_FORMAT", "fp8_block128")
TOL = moe_tolerance(FMT)
TOKENS = tuple(int(t) for t in os.environ.get("SMALLM_CHECK_TOKENS", "1,2,3,8,40,41").split(","))
w = make_weights(shape, FMT, "row_major", 0, DEV)
calls = {T: make_call(shape, FMT, "row_major", T, 50 + T, DEV, w) for T in TOKENS}
results = {"pass": [], "fail": [], "not runnable here": []}


def record(kind, line):
    results[kind].append(line)
    print(f"[{kind}] {line}", flush=True)


def run(layer, c):
    """The layer's output, or the reason it cannot run here (an sgl_kernel stub called)."""
    try:
        return H.forward(layer, c.x, c.topk_weights, c.topk_ids).clone(), None
    except Exception as e:  # noqa: BLE001 - only the stub's own error is a "not runnable" reason
        if type(e).__name__ == "SglKernelStubCalled":
            return None, f"{type(e).__name__}: {e}"
        raise


# The backend the smallm layer's fallback is: Triton on CUDA, AITER on ROCm (SMALLM_CHECK_PEER overrides). Its
# layer's outputs are taken with SGLANG_ROCM_SMALLM_MOE as each comparison below has it: on ROCm that switch also
# turns SGLang's own small-M kernel in the AITER runner on or off (README, Disable); on CUDA the two are the same.
PEER = os.environ.get("SMALLM_CHECK_PEER", "aiter" if torch.version.hip else "triton")
H.setup(PEER)
try:
    peer_layer = H.build_layer(shape, FMT, {k: v.clone() for k, v in w.items()}, device=DEV)
    out_peer = {}
    for switch in ("1", "0"):
        os.environ["SGLANG_ROCM_SMALLM_MOE"] = switch
        out_peer[switch] = {T: run(peer_layer, c) for T, c in calls.items()}
        for T, c in calls.items():  # the comparison below needs SGLang's own path to repeat itself
            again, _ = run(peer_layer, c)
            first = out_peer[switch][T][0]
            if first is not None and again is not None and not torch.equal(first, again):
                record("fail", f"T={T}: the {PEER} backend's layer gave different bits on a second call")
    os.environ.pop("SGLANG_ROCM_SMALLM_MOE")
except Exception as e:  # noqa: BLE001 - e.g. a scheme whose own path is ROCm's: reported, not raised
    os.environ.pop("SGLANG_ROCM_SMALLM_MOE", None)
    print(f"the {PEER}-backend layer cannot run here: {type(e).__name__}: {e}", flush=True)
    out_peer = {sw: {T: (None, f"{PEER}-backend layer: {type(e).__name__}: {e}") for T in calls} for sw in ("1", "0")}
H.setup("smallm")
layer = H.build_layer(shape, FMT, {k: v.clone() for k, v in w.items()}, device=DEV, layer_id=1)
core = H.moe_method(layer).runner.runner_core
print("smallm runner:", type(core).__name__, "fallback:", core.fallback_backend.value, flush=True)


def check_call(T, c, label, lyr=None):
    lyr = layer if lyr is None else lyr
    d = H.decide(lyr, c)
    out, why = run(lyr, c)
    ref, ref_why = out_peer["0" if os.environ.get("SGLANG_ROCM_SMALLM_MOE") == "0" else "1"][T]
    head = f"{label}T={T} path={d.path} ({d.reason})"
    if d.is_kernel:
        err = rel_l2(out.float(), reference_of(c).float())
        record("pass" if err <= TOL else "fail", f"{head}: kernel inside SGLang's layer, rel_err {err:.2e} (tol {TOL:g})")
    elif why or ref_why:
        record("not runnable here", f"{head}: fallback vs {PEER} not compared: {why or ref_why}")
    else:
        same = torch.equal(out, ref)
        record("pass" if same else "fail", f"{head}: bit-identical to the {PEER} backend: {same}")
    return d


GRAPH = os.environ.get("SMALLM_CHECK_GRAPH", "1") != "0"


def check_graph(T, c, label):
    """The layer's call captured in one CUDA graph on other inputs of the same shape, then the call's own inputs
    copied in, the graph's output poisoned (NaN) and the graph replayed: the output must be the eager call's, bit
    for bit (the kernel and SGLang's Triton path are both deterministic)."""
    from sglang_smallm_plugin.timing import capture

    d = H.decide(layer, c)
    eager, why = run(layer, c)
    head = f"{label}T={T} path={d.path}"
    if why:
        record("not runnable here", f"{head}: CUDA graph not tried: {why}")
        return
    x, tw, ti = torch.randn_like(c.x), torch.rand_like(c.topk_weights), torch.flip(c.topk_ids, dims=(0,)).contiguous()
    box = {}

    def body():
        box["out"] = H.forward(layer, x, tw, ti)

    try:
        g = capture(body)
    except Exception as e:  # noqa: BLE001 - a capture that fails is this check's finding
        record("fail", f"{head}: the layer could not be captured in a CUDA graph: {type(e).__name__}: {e}")
        return
    x.copy_(c.x), tw.copy_(c.topk_weights), ti.copy_(c.topk_ids)
    box["out"].fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    same = torch.equal(box["out"], eager)
    record("pass" if same else "fail", f"{head}: captured in a CUDA graph, replayed on the call's inputs: "
           f"bit-identical to the eager call: {same}")


COMPILE = os.environ.get("SMALLM_CHECK_COMPILE", "0") == "1"
_compiled = []


def check_compile(T, c):
    """The layer's call through torch.compile (inductor; one compiled function, re-traced per token count as
    SGLang's compiled forward is per batch size), then that compiled call captured in a CUDA graph and replayed on
    the call's inputs with the output poisoned: both bit-identical to the eager call."""
    from sglang.srt.layers.moe.topk import StandardTopKOutput

    from sglang_smallm_plugin.timing import capture

    if not _compiled:
        _compiled.append(torch.compile(lambda x, tw, ti: layer(x.clone(), StandardTopKOutput(tw, ti, torch.empty(
            0, device=x.device))), dynamic=False))
    f = _compiled[0]
    d = H.decide(layer, c)
    head = f"torch.compile T={T} path={d.path}"
    eager, why = run(layer, c)
    if why:
        record("not runnable here", f"{head}: not tried: {why}")
        return
    try:
        out = f(c.x, c.topk_weights, c.topk_ids)
        x, tw, ti = c.x.clone(), c.topk_weights.clone(), c.topk_ids.clone()
        box = {}
        g = capture(lambda: box.__setitem__("out", f(x, tw, ti)))
        box["out"].fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - a compile or capture that fails is this check's finding
        record("fail", f"{head}: {type(e).__name__}: {str(e)[:500]}")
        return
    same, same_graph = torch.equal(out, eager), torch.equal(box["out"], eager)
    record("pass" if same and same_graph else "fail",
           f"{head}: compiled call bit-identical to the eager call: {same}; in a CUDA graph: {same_graph}")


SHUFFLED = os.environ.get("SMALLM_CHECK_SHUFFLED", "1") != "0"


def check_shuffled():
    """Another smallm layer whose processing (through the plugin's hook) ends with the weights in AITER's (16,16)
    shuffle and no is_shuffled flag, as SGLang 0.5.23's FP8 path for FP4 experts dequantised to FP8 leaves them on
    gfx950: the plugin must read the layout from the bytes (layout_check) and the compiled kernel, reading the
    shuffled weights inside SGLang's layer, must stay within the tolerance. FP8 only (the Quark MXFP4 scheme has
    no such processing on CUDA); calls the gate sends to the fallback are not run (Triton reads row-major)."""
    from sglang_smallm_plugin import reference as R
    from sglang_smallm_plugin.calls import SHUFFLE16
    from sglang_smallm_plugin.sglang_integration import fp8 as fp8_hooks

    lyr = H.build_layer(shape, FMT, {k: v.clone() for k, v in w.items()}, device=DEV, layer_id=2)
    method = H.moe_method(lyr)

    def aiter_shuffle_without_flag(self, target):
        for name in ("w13_weight", "w2_weight"):
            p = getattr(target, name)
            p.data = R.shuffle_weight(p.data)

    fp8_hooks.around_process_weights_after_loading(aiter_shuffle_without_flag, method, lyr)
    got = method.runner.runner_core.weight_layout
    record("pass" if got == SHUFFLE16 else "fail", f"shuffled without the flag: layout read from the bytes: {got}")
    for T, c in calls.items():
        d = H.decide(lyr, c)
        if not d.is_kernel:
            continue
        out, _ = run(lyr, c)
        err = rel_l2(out.float(), reference_of(c).float())
        record("pass" if err <= TOL else "fail", f"shuffled without the flag T={T} path={d.path}: kernel reading "
               f"AITER's layout inside SGLang's layer, rel_err {err:.2e} (tol {TOL:g})")


CAPS = os.environ.get("SMALLM_CHECK_CAPS", "1") != "0"


def check_measured_caps():
    """A caps file for this layer's shape, its cap the smallest count checked: the layer built with it decides by
    it (the kernel up to the cap, the fallback above, each naming the file); one measured on another arch is
    refused when the layer is built."""
    import tempfile

    from sglang_smallm_plugin import kernels, measured_caps

    info = kernels.device_info(DEV)
    cap = min(TOKENS)
    # the layout the layer's calls are read in (the bytes', or SGLang's flag where those did not decide)
    layout = H.describe(layer, calls[cap]).layout
    entry = dict(weight_format=FMT, layout=layout, hidden=shape.hidden, inter=shape.inter, experts=shape.experts,
                 top_k=shape.slots, cap=cap, against="this check", faster_at_last=False, measured=[])
    folder = tempfile.mkdtemp(prefix="smallm_caps_")
    for arch, name in ((info.arch, "caps.json"), ("gfx999", "foreign.json")):
        measured_caps.write(os.path.join(folder, name), [entry], dict(device=info.name, arch=arch, date="check"))
    try:
        measured_caps.forget()
        os.environ["SGLANG_SMALLM_CAPS_FILE"] = os.path.join(folder, "foreign.json")
        try:
            H.build_layer(shape, FMT, {k: v.clone() for k, v in w.items()}, device=DEV, layer_id=4)
            record("fail", "caps file of another arch: the layer was built")
        except ValueError as e:
            record("pass" if "but this device is" in str(e) else "fail", f"caps file of another arch refused: {e}")
        os.environ["SGLANG_SMALLM_CAPS_FILE"] = os.path.join(folder, "caps.json")
        lyr = H.build_layer(shape, FMT, {k: v.clone() for k, v in w.items()}, device=DEV, layer_id=3)
        for T, c in calls.items():
            d = check_call(T, c, "caps file ", lyr)
            named = "measured on this machine" in d.reason
            if T <= cap and not (d.is_kernel and named):
                record("fail", f"caps file T={T}: not the kernel by the file's cap ({d.path}: {d.reason})")
            if T > cap and (d.is_kernel or (d.reason.startswith("smallm-compiled: tokens:") and not named)):
                record("fail", f"caps file T={T}: the file's cap {cap} not applied ({d.path}: {d.reason})")
    finally:
        os.environ.pop("SGLANG_SMALLM_CAPS_FILE", None)
        measured_caps.forget()


for T, c in calls.items():
    check_call(T, c, "")
    if GRAPH and DEV == "cuda":
        check_graph(T, c, "")
    if COMPILE and DEV == "cuda":
        check_compile(T, c)
if SHUFFLED and FMT == "fp8_block128" and core.weight_layout == "row_major":  # where SGLang left them row-major
    check_shuffled()
if CAPS and DEV == "cuda":
    check_measured_caps()
os.environ["SGLANG_ROCM_SMALLM_MOE"] = "0"
for T, c in calls.items():
    d = check_call(T, c, "SGLANG_ROCM_SMALLM_MOE=0 ")
    if d.is_kernel:
        record("fail", f"SGLANG_ROCM_SMALLM_MOE=0 T={T}: decided for the kernel")
    if GRAPH and DEV == "cuda":
        check_graph(T, c, "SGLANG_ROCM_SMALLM_MOE=0 ")
n = {k: len(v) for k, v in results.items()}
ok = n["fail"] == 0 and n["pass"] > 0
print(f"GPU SGLang layer check, {FMT}: {'PASS' if ok else 'FAIL'} ({n['pass']} passed, {n['fail']} failed, "
      f"{n['not runnable here']} not runnable here)")
sys.exit(0 if ok else 1)
