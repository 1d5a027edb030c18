"""The block kernel's pairs taken two at a time give the output of one at a time, bit for bit (the gfx950 build,
emulated on this CPU; hip/smallm_moe.h `kPairsByTwo`). A one-off check, not a test: it needs two builds of the
kernels, one with `kPairsByTwo` set to false by hand.

    python examples/emu_pairs_bitcheck.py save /tmp/two.pt          # hip/ as committed (pairs two at a time)
    # edit hip/smallm_moe.h: `constexpr bool kPairsByTwo = false;` on the SMALLM_HIP branch, then
    python examples/emu_pairs_bitcheck.py compare /tmp/two.pt       # prints how many calls are bit-identical
    git checkout hip/smallm_moe.h

The calls: MiniMax-M3-like and Qwen3.5 TP8, FP8 and MXFP4, row-major and AITER-shuffled, 3, 8 and 24 tokens, seed 7
(experts with one pair and with several, odd and even counts). Recorded in examples/results/README.md ("cpu-emu-s54").
"""
import sys

import torch

from sglang_smallm_plugin import emulated, kernels, testdata
from sglang_smallm_plugin.shapes import SHAPES


def outputs() -> dict:
    ops = emulated.load()
    out = {}
    for shape in ("minimax-m3", "qwen35-tp8"):
        for fmt in ("fp8_block128", "mxfp4"):
            for layout in ("row_major", "shuffle16x16"):
                for tokens in (3, 8, 24):
                    call = testdata.make_call(SHAPES[shape], fmt, layout, tokens, 7, "cpu")
                    out[(shape, fmt, layout, tokens)] = kernels.run_moe(call, ops=ops).clone()
    return out


def main(argv) -> int:
    if len(argv) != 3 or argv[1] not in ("save", "compare"):
        print(__doc__)
        return 2
    got = outputs()
    if argv[1] == "save":
        torch.save(got, argv[2])
        print(f"saved {len(got)} outputs to {argv[2]}")
        return 0
    ref = torch.load(argv[2])
    differ = [k for k in got if not torch.equal(got[k].view(torch.int16), ref[k].view(torch.int16))]
    print(f"bit-identical: {len(got) - len(differ)}/{len(got)}" + (f"; differ: {differ}" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
