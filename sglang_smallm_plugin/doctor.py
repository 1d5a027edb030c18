"""`sglang-smallm doctor`: what is installed, what SGLang exposes, what would run and why."""

import importlib.metadata
import os

import torch

from . import envs, gate, hookspecs, kernels, measured_caps, sort_gate

# token counts of the decision table where --tokens is not given (with the shape's cap and cap + 1)
DOCTOR_TOKENS = (1, 2, 4, 8, 16, 20, 21, 32, 48, 49, 64)


def _line(label, value):
    print(f"  {label:28} {value}")


def main(a) -> int:
    from .sglang_integration import compat

    print("sglang-smallm doctor")
    print("SGLang")
    ok, msg = compat.probe()
    _line("version / APIs", msg)
    eps = [ep for ep in importlib.metadata.entry_points(group="sglang.srt.plugins") if ep.name == "smallm"]
    _line("entry point", f"{eps[0].name} -> {eps[0].value} (visible to importlib.metadata)" if eps
          else "MISSING: reinstall the package")
    allowed = os.environ.get("SGLANG_PLUGINS")
    if allowed and "smallm" not in allowed.split(","):
        _line("SGLANG_PLUGINS", f"{allowed!r} excludes smallm: the plugin will not load")
    if ok:
        from .sglang_integration.entry import hooks_status, register

        register()
        from sglang.srt.server_args import add_moe_runner_backend_choices

        _line("--moe-runner-backend smallm", "registered" if "smallm" in add_moe_runner_backend_choices.__self__
              else "NOT registered")
        for target, applied in hooks_status():
            _line("hook", f"{'ok ' if applied is True else 'NOT APPLIED '}{target}" +
                  ("" if applied is True or applied is False else f" ({applied})"))
        from .sglang_integration.sort import aiter_wrapper_status

        _line("AITER sort wrapper", aiter_wrapper_status())
        from .sglang_integration.upstream_smallm import status as upstream_status

        _line("SGLang's own small-M kernel", upstream_status())
    print("Device")
    info = kernels.device_info()
    _line("device", f"{info.name} ({info.kind}, arch {info.arch})")
    _line("torch", f"{torch.__version__} (cuda {torch.version.cuda}, hip {torch.version.hip})")
    mod, why = kernels.load_compiled()
    _line("compiled kernels", why)
    _line("kernel variant", kernels.variant_note())
    from . import emulated

    emu_why = emulated.unavailable_reason()
    _line("gfx950 emulation", f"cannot be built here: {emu_why}" if emu_why else
          f"can be built here ({emulated.host_clang()}): `sglang-smallm selftest --emulate` runs the gfx950 build's "
          "checks on this CPU (code paths, not speed)")
    print("Kernel providers (pluggy, project 'sglang_smallm')")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for p in hookspecs.moe_providers():
        can, reason = p.available(device)
        _line(f"moe  {p.name} (prio {p.priority})", f"{'can serve' if can else 'cannot serve'}: {reason}")
    for p in hookspecs.sort_providers():
        can, reason = p.available(device)
        _line(f"sort {p.name} (prio {p.priority})", f"{'can serve' if can else 'cannot serve'}: {reason}")
    print("Environment switches")
    for sw in envs.ALL:
        problem = sw.problem()
        _line(sw.name, f"NOT TAKEN: {problem}" if problem else f"{sw.get()!r}  ({sw.meaning})")
    arch = a.arch or (info.arch if info.kind != "cpu" else "gfx950")
    layout = a.layout or gate.default_layout(arch)
    cap, cap_source = gate.token_cap(arch, a.format, a.inter, a.top_k, a.hidden, a.experts, layout)
    if a.tokens:
        tokens = list(a.tokens)
    else:  # the usual counts, and where this shape's cap switches to the fallback
        tokens = sorted(set(DOCTOR_TOKENS) | ({cap, cap + 1} if cap > 0 else set()))
    print(f"Gate decisions for D={a.hidden} I={a.inter} E={a.experts} K={a.top_k} {a.format} {layout} on {arch}"
          + ("" if a.arch or info.kind != "cpu" else " (no GPU here: showing MI355X)"))
    _line("token cap", f"{cap} ({cap_source})")
    caps_path = measured_caps.file_path()
    if caps_path and not envs.CAPS_FILE.problem():
        meta, caps = measured_caps.load(caps_path)
        other = info.kind != "cpu" and meta["arch"] != info.arch
        _line("measured caps", measured_caps.describe(caps_path, meta, caps)
              + (f" (NOT USABLE HERE: measured on {meta['arch']}, this device is {info.arch}; the server refuses it)"
                 if other else ""))
    if a.format == "fp8_block128" and arch.startswith("sm_"):
        from .sglang_integration.triton_configs import tuned_fallback_note, user_fp8_configs

        own = user_fp8_configs(a.experts, a.inter)
        _line("Triton fallback config", tuned_fallback_note(a.experts, a.inter, own, gate.user_max_tokens() is not None)
              or (f"yours: {own[0]} (SGLANG_SMALLM_MAX_TOKENS set)" if own else
                  "the configurations SGLang ships (no SGLANG_MOE_CONFIG_DIR file for this E and N)"))
    for t, eligible, reason in gate.decision_table(arch, a.format, a.hidden, a.inter, a.experts, a.top_k, tokens,
                                                      layout):
        plan = (f"; runs {kernels.kernel_plan(arch, a.format, t, a.top_k, a.hidden, a.inter, layout=layout)}"
                if eligible else "")
        _line(f"tokens={t}", f"{'kernel  ' if eligible else 'fallback'}  {reason}{plan}")
    print("Rules (in order; the first failing one is the recorded reason)")
    print("  " + ", ".join(r.name for r in gate.RULES))
    fmt = "triton" if arch.startswith("sm_") else "aiter"
    block = 16 if fmt == "triton" else 32
    print(f"Sort decisions for E={a.experts} K={a.top_k} block {block}, {fmt} format, on {arch} "
          f"(calls above the MoE cap sort first)")
    for t, path, reason in sort_gate.decision_table(arch, a.experts, a.top_k, block, tokens, fmt):
        _line(f"tokens={t}", f"{path or 'hand over':11} {reason}")
    print("Sort rules (in order): " + ", ".join(r.name for r in sort_gate.SORT_RULES) + "; paths: "
          + "; ".join(f"{p.arch} {p.path}: {p.rule}" for p in sort_gate.PATHS))
    if a.format == "mxfp4" and info.kind == "cuda":
        print("Note: SGLang's Quark MXFP4 MoE scheme runs only through AITER (ROCm); on CUDA there is no fallback,"
              " so `--moe-runner-backend smallm` refuses such checkpoints at startup.")
    return 0 if ok and eps else 1
