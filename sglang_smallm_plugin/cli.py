"""`sglang-smallm`: doctor | demo | bench | selftest | isa."""

import argparse
import sys

from .calls import FP8_BLOCK128, MXFP4, ROW_MAJOR, SHUFFLE16
from .shapes import SHAPE_SPEC_FORM, SHAPES, shape_by_name


def _csv(s, conv=str):
    return tuple(conv(x) for x in s.split(",") if x.strip())


def token_counts(s):
    """--tokens: comma-separated token counts, each a positive integer (argparse type: a bad one ends the
    command with argparse's usage error and this reason, not a traceback). Empty: () (the command's default)."""
    out = []
    for x in s.split(","):
        x = x.strip()
        if not x:
            continue
        if not x.isdigit() or int(x) < 1:
            raise argparse.ArgumentTypeError(f"{x!r} is not a token count (a positive integer); e.g. 1,2,4,8")
        out.append(int(x))
    return tuple(out)


def _shapes(s):
    """The --shapes names, each a registered shape or a D-E-K-I spec; a bad one ends the command with why."""
    names = _csv(s)
    for name in names:
        try:
            shape_by_name(name)
        except ValueError as e:
            raise SystemExit(f"sglang-smallm: {e}")
    return names


def cmd_selftest(a):
    from . import selftest

    ok = True
    if a.what in ("all", "moe"):
        res = selftest.run(formats=_csv(a.formats), shapes=_shapes(a.shapes), layouts=_csv(a.layouts),
                           seeds=range(a.seeds), tokens=a.tokens or None, pad=a.pad, emulate=a.emulate)
        ok = all(r.ok for r in res)
    if a.what in ("all", "edge"):
        from . import edge_cases

        ok = all(r.ok for r in edge_cases.run(formats=_csv(a.formats), emulate=a.emulate)) and ok
    if a.what in ("all", "sort"):
        from . import sort_selftest

        ok = all(r.ok for r in sort_selftest.run(seeds=range(a.seeds), emulate=a.emulate)) and ok
    return 0 if ok else 1


def cmd_bench(a):
    if a.sort:
        from . import sort_bench

        sort_bench.run()
        return 0
    from . import bench

    bench.run(shapes=_shapes(a.shapes), formats=_csv(a.formats), layouts=_csv(a.layouts),
              tokens=a.tokens, out_dir=a.out, copies=a.copies, fallback=not a.no_fallback, write_caps=a.write_caps)
    return 0


def cmd_isa(a):
    from . import isa

    return isa.main(a.arch, a.out)


def cmd_doctor(a):
    from . import doctor

    return doctor.main(a)


def cmd_demo(a):
    from . import demo

    return demo.main(a)


def main(argv=None):
    p = argparse.ArgumentParser(prog="sglang-smallm", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    d = sub.add_parser("doctor", help="what is installed, what SGLang exposes, what would run and why")
    d.add_argument("--hidden", type=int, default=4096)
    d.add_argument("--inter", type=int, default=256, help="MoE intermediate size per partition")
    d.add_argument("--experts", type=int, default=513)
    d.add_argument("--top-k", type=int, default=11, help="slots per token incl. fused shared experts")
    d.add_argument("--format", default=FP8_BLOCK128, choices=(FP8_BLOCK128, MXFP4))
    d.add_argument("--layout", default=None, choices=(ROW_MAJOR, SHUFFLE16),
                   help="weight layout of the decision table (default: the one SGLang gives its runner there, "
                        "shuffle16x16 on gfx950 with AITER, row_major on CUDA)")
    d.add_argument("--arch", default=None, help="decision table for this arch instead of the local device")
    d.add_argument("--tokens", type=token_counts, default="",
                   help="token counts for the decision table (default: 1,2,4,8,16,20,21,32,48,49,64 and the "
                        "shape's cap and cap + 1)")
    d.set_defaults(fn=cmd_doctor)

    m = sub.add_parser("demo", help="the main job: a Qwen3.5-397B-shaped MoE layer through SGLang + the plugin")
    m.add_argument("--tokens", type=token_counts, default="1,2,4,8,16,32,48")
    m.add_argument("--experts", type=int, default=None, help="experts (default 513 on GPU, 33 on CPU)")
    m.add_argument("--format", default=FP8_BLOCK128, choices=(FP8_BLOCK128, MXFP4))
    m.add_argument("--emulate", dest="emulate", action="store_true", default=None,
                   help="CPU: the gfx950 build emulated serves the calls gfx950's gate admits (the default where a host "
                        "clang++ can build it; with this flag, fail where it cannot)")
    m.add_argument("--no-emulate", dest="emulate", action="store_false",
                   help="CPU: the pure-torch reference provider serves every call")
    m.set_defaults(fn=cmd_demo)

    b = sub.add_parser("bench", help="layer benchmark vs the byte roofline and the read floors (GPU)")
    b.add_argument("--shapes", default="qwen35-tp4,qwen35-tp8",
                   help=f"shape names ({', '.join(SHAPES)}) or {SHAPE_SPEC_FORM}")
    b.add_argument("--formats", default=FP8_BLOCK128)
    b.add_argument("--layouts", default=ROW_MAJOR)
    b.add_argument("--tokens", type=token_counts, default="1,2,4,8,12,16,20,24,32,48")
    b.add_argument("--copies", type=int, default=8)
    b.add_argument("--out", default="bench_out")
    b.add_argument("--sort", action="store_true", help="the sort benchmark instead (ours vs the fallback's sort)")
    b.add_argument("--no-fallback", action="store_true",
                   help="do not time the fallback (SGLang's own FusedMoE with the kernels off) beside the kernel")
    b.add_argument("--write-caps", metavar="FILE", default=None,
                   help="derive each shape's token cap from this run (the largest count up to which the kernel was "
                        "faster than SGLang's own path at every count measured), check the kernel at those counts, "
                        "and write them to FILE for SGLANG_SMALLM_CAPS_FILE (needs row_major among --layouts and 1 "
                        "among --tokens; measure every count you serve, e.g. --tokens $(seq -s, 1 48))")
    b.set_defaults(fn=cmd_bench)

    s = sub.add_parser("selftest", help="kernel numerics on this GPU against the reference")
    s.add_argument("--formats", default=f"{FP8_BLOCK128},{MXFP4}")
    s.add_argument("--shapes", default="qwen35-tp4,qwen35-tp8,minimax-m3,qwen3-235b-tp4",
                   help=f"shape names ({', '.join(SHAPES)}) or {SHAPE_SPEC_FORM}")
    s.add_argument("--layouts", default=f"{ROW_MAJOR},{SHUFFLE16}")
    s.add_argument("--seeds", type=int, default=5)
    s.add_argument("--tokens", type=token_counts, default="", help="default: 1,3,8 and the cap")
    s.add_argument("--pad", type=int, default=0,
                   help="MoE checks on layers padded by this much of I, as SGLang pads Quark MXFP4 for AITER "
                        "(I = 128 -> 256 at --pad 128), the padding poisoned: the output must equal the unpadded "
                        "layer's bit for bit (a multiple of 128)")
    s.add_argument("--what", default="all", choices=("all", "moe", "edge", "sort"),
                   help="which checks: the MoE matrix, MoE edge-case inputs, the sort (all: every one)")
    s.add_argument("--emulate", action="store_true",
                   help="run the gfx950 build of the kernels on this CPU (wave64, its own code paths and the gfx950 "
                        "caps; hip/smallm_emu.h) instead of this GPU's: checks the AMD code where no AMD GPU is; needs a "
                        "host clang++ >= 16; slow (Qwen3.5 shapes take minutes per seed); no timing, no CUDA graphs")
    s.set_defaults(fn=cmd_selftest)

    i = sub.add_parser("isa", help="compile every kernel for an AMD arch without ROCm and summarise the ISA")
    i.add_argument("--arch", default="gfx950")
    i.add_argument("--out", default="isa_out")
    i.set_defaults(fn=cmd_isa)

    for sp in (m, b, s):  # the commands that run kernels refuse a switch set to a value it does not take
        sp.set_defaults(check_switches=True)
    a = p.parse_args(argv)
    if getattr(a, "check_switches", False):
        from . import envs

        try:
            envs.check()
        except ValueError as e:
            raise SystemExit(str(e))
    from .testdata import UnsupportedLayout

    try:
        return a.fn(a)
    except UnsupportedLayout as e:  # a shape/layout the test weights cannot take: the reason, not a traceback
        raise SystemExit(f"sglang-smallm: {e}")


if __name__ == "__main__":
    sys.exit(main())
