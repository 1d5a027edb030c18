"""Checks the package's AITER layouts (sglang_smallm_plugin/reference/layouts.py, which the kernels and the
layout check read) against AITER's own code, run here: `shuffle_weight(w, (16, 16))` and `shuffle_scale`
(what `aiter.utility.fp4_utils.e8m0_shuffle` calls) from an AITER checkout's aiter/ops/shuffle.py, a pure-torch
file loaded on its own (its one AITER import, the chip query, stubbed). Nothing of AITER is copied here.

    python examples/aiter_layout_check.py PATH/aiter/ops/shuffle.py

Weights: random bytes (uint8, float8_e4m3fn) and bf16 (2-byte elements), 2-D and per expert 3-D; byte-equal.
Scales: ids 1..rows x cols split into four byte planes, so that every value is told apart; AITER pads with
uninitialised memory (torch.empty) and the package with zeros, so the pads are left out and every real value
must sit where the package puts it. Prints a table; exit 1 on any difference.
"""

import importlib.util
import sys
import types

import torch

from sglang_smallm_plugin import reference as R


def load_aiter_shuffle(path):
    for name in ("aiter", "aiter.jit", "aiter.jit.utils"):
        sys.modules.setdefault(name, types.ModuleType(name))
    chip = types.ModuleType("aiter.jit.utils.chip_info")
    chip.get_gfx = lambda: "gfx950"
    sys.modules["aiter.jit.utils.chip_info"] = chip
    spec = importlib.util.spec_from_file_location("aiter_ops_shuffle", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def weight_cases(g):
    for shape in ((16, 32), (256, 64), (512, 2048), (3, 512, 2048), (5, 4096, 128), (2, 768, 64)):
        yield "uint8", torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)
        yield "float8_e4m3fn", torch.randint(0, 256, shape, dtype=torch.uint8, generator=g).view(torch.float8_e4m3fn)
        yield "bfloat16", torch.randn(*shape, generator=g).to(torch.bfloat16)


def as_bytes(t):
    return t.contiguous().view(torch.uint8)


def main(path):
    aiter = load_aiter_shuffle(path)
    g = torch.Generator().manual_seed(2026)
    rows, bad = [], 0
    for dtype, w in weight_cases(g):
        ok = torch.equal(as_bytes(aiter.shuffle_weight(w, (16, 16))), as_bytes(R.shuffle_weight(w)))
        bad += not ok
        rows.append(("shuffle_weight (16,16)", f"{dtype} {tuple(w.shape)}", "equal" if ok else "DIFFERENT"))
    for r, c in ((32, 4), (256, 8), (300, 13), (2 * 256, 128), (513 * 512, 128), (33 * 4096, 4), (129 * 256, 8)):
        ids = torch.randperm(r * c, generator=g).view(r, c) + 1
        planes = [((ids >> s) & 0xFF).to(torch.uint8) for s in (0, 8, 16, 24)]
        ours = [R.e8m0_shuffle(p) for p in planes]
        theirs = [aiter.shuffle_scale(p) for p in planes]
        ok = all(t.shape == o.shape for t, o in zip(theirs, ours))
        if ok:
            real = torch.stack(ours).ne(0).any(0)
            ok = int(real.sum()) == r * c and all(torch.equal(t[real], o[real]) for t, o in zip(theirs, ours))
        bad += not ok
        rows.append(("shuffle_scale (e8m0_shuffle)", f"[{r}, {c}] -> {tuple(ours[0].shape)}", "equal" if ok else "DIFFERENT"))
    w = max(len(a) for a, _, _ in rows)
    v = max(len(b) for _, b, _ in rows)
    print(f"{'function':<{w}}  {'input':<{v}}  result")
    for a, b, c in rows:
        print(f"{a:<{w}}  {b:<{v}}  {c}")
    print(f"{len(rows) - bad}/{len(rows)} equal")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
