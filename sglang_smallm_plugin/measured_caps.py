"""Token caps measured on the machine that serves: `sglang-smallm bench --write-caps FILE` writes them, and the gate
reads them where SGLANG_SMALLM_CAPS_FILE names that file.

The built-in caps (gate.CAPS) are crossovers measured elsewhere: the H200's in this project's jobs, the MI355X's
upstream, for SGLang's own gfx950 kernel rather than this one (no AMD GPU has run this package). A cap measured on
your machine, for your model's shape, against the path SGLang takes there without the plugin, replaces the built-in
one for that shape (it may raise or lower it); every other shape keeps the built-in caps, and SGLANG_SMALLM_MAX_TOKENS
still lowers them all.

The rule (`derive`): a shape's cap is the largest measured token count up to which the kernel was faster than the
alternative at every measured count, 1 included (counts between two measured ones are taken as measured; nothing past
the last is assumed). The alternative is SGLang as shipped where the bench times it (ROCm with SGLang's own small-M
kernel enabled: what runs when the plugin hands a call over), else SGLang's fallback with the kernels off. Before the
file is written, the kernel is checked at every measured count up to each cap against the reference (the selftest's
check: tolerance, every output written, bit-identical twice and in a CUDA graph); one failure and nothing is written.

The file is JSON: {"kind": KIND, "version": VERSION, "device", "arch", "date", "command", "torch", "sglang",
"entries": [{"weight_format", "layout", "hidden", "inter", "experts", "top_k", "cap", "against", "faster_at_last",
"measured": [[tokens, kernel_us, alternative_us or null], ...]}]}. An entry applies to calls of exactly its format,
layout, D, computed I, E and K on a device of the file's arch. A file the plugin cannot read, or one measured on
another arch, fails the server's startup with the reason and the fix (envs.check, check_device).
"""

import json
import os
from dataclasses import dataclass
from typing import Optional, Sequence

from . import envs
from .calls import FP8_BLOCK128, MXFP4, ROW_MAJOR, SHUFFLE16

KIND = "sglang-smallm measured caps"
VERSION = 1
ENTRY_INTS = ("hidden", "inter", "experts", "top_k", "cap")
ENTRY_TEXTS = ("weight_format", "layout", "against")
FIX = ("Fix: write it again on this machine with `sglang-smallm bench --shapes <your shape> --layouts row_major,<your "
       "layout> --write-caps FILE`, or unset {name} for the built-in caps.")


class CapsFileError(ValueError):
    """The caps file cannot be used: what is wrong, and the fix."""


@dataclass(frozen=True)
class MeasuredCap:
    arch: str
    weight_format: str
    layout: str
    hidden: int
    inter: int
    experts: int
    top_k: int
    cap: int
    against: str
    device: str
    date: str
    faster_at_last: bool  # the kernel was still faster at the last measured count: a higher cap was not looked for

    def applies(self, arch, weight_format, layout, hidden, inter, experts, top_k) -> bool:
        return (arch == self.arch and weight_format == self.weight_format and layout == self.layout
                and hidden == self.hidden and inter == self.inter and experts == self.experts and top_k == self.top_k)

    def source(self, path: str) -> str:
        return (f"measured on this machine ({self.device}, {self.date}) against {self.against}"
                + (", still faster at the last count measured" if self.faster_at_last else "")
                + f": {envs.CAPS_FILE.name}={path}")


# ------------------------------------------------------------------ deriving caps from bench rows
ALTERNATIVES = (("shipped_us", "SGLang as shipped"), ("fallback_us", "SGLang's fallback, kernels off"))


def alternative_of(rows) -> tuple:
    """(row key, label) of the time the kernel is compared with for one shape and format's rows: SGLang as shipped
    where the bench timed it, else the fallback."""
    for key, label in ALTERNATIVES:
        if any(r.get(key) is not None for r in rows):
            return key, label
    return ALTERNATIVES[-1]


def derive(rows) -> list:
    """Bench rows (bench.bench_shape's dicts) -> one dict per (shape, format, layout): cap, against, faster_at_last,
    measured, why (how the cap ended), written (False where the alternative has no time at 1 token: no finding). The
    alternative's time of a count is the row-major row's of the same shape, format and count (the bench times the
    fallback there; SGLang lays the weights out for its own runner)."""
    groups = {}
    for r in rows:
        groups.setdefault((r["shape"], r["format"], r["layout"]), []).append(r)
    out = []
    for (shape, fmt, layout), rs in groups.items():
        same = [r for r in rows if r["shape"] == shape and r["format"] == fmt and r["layout"] == ROW_MAJOR]
        key, label = alternative_of(same)
        alt = {r["tokens"]: r.get(key) for r in same}
        measured = [[r["tokens"], r["kernel_us"], alt.get(r["tokens"])] for r in sorted(rs, key=lambda r: r["tokens"])]
        cap, why = 0, ""
        if not measured or measured[0][0] != 1:
            why = "1 token was not measured (the cap covers every count from 1)"
        else:
            for t, k, a in measured:
                at = f"{t} token{'' if t == 1 else 's'}"
                if a is None:
                    why = f"no time for {label} at {at}"
                    break
                if not k < a:
                    why = f"slower at {at} ({k:.1f} vs {a:.1f} us)"
                    break
                cap = t
            else:
                why = f"faster at every count measured, up to {cap} (a higher cap was not looked for)"
        # nothing to compare with at 1 token (e.g. MXFP4 on CUDA, where SGLang's scheme does not run): no finding,
        # so no entry (a cap of 0 would read as "the kernel lost")
        timed = bool(measured) and measured[0][0] == 1 and measured[0][2] is not None
        out.append(dict(shape=shape, weight_format=fmt, layout=layout, cap=cap, against=label,
                        faster_at_last=bool(measured) and cap == measured[-1][0], measured=measured, why=why,
                        written=timed))
    return out


def write(path: str, entries: Sequence[dict], meta: dict) -> None:
    """entries: derive's dicts with the shape's hidden, inter, experts and top_k added. meta: device, arch, date,
    command, torch, sglang."""
    keep = ("weight_format", "layout", "hidden", "inter", "experts", "top_k", "cap", "against", "faster_at_last",
            "measured")
    doc = dict(kind=KIND, version=VERSION, **meta, entries=[{k: e[k] for k in keep} for e in entries])
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)


# ------------------------------------------------------------------ reading the file
def parse(doc, path: str) -> tuple:
    """A loaded JSON document -> (meta dict, tuple of MeasuredCap). Raises CapsFileError."""
    def bad(what):
        return CapsFileError(f"{envs.CAPS_FILE.name}={path}: {what}. " + FIX.format(name=envs.CAPS_FILE.name))

    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise bad(f"not a caps file (its \"kind\" is not {KIND!r})")
    if doc.get("version") != VERSION:
        raise bad(f"version {doc.get('version')!r}; this plugin reads version {VERSION}")
    meta = {k: doc.get(k) for k in ("device", "arch", "date", "command", "torch", "sglang")}
    for k in ("device", "arch", "date"):
        if not isinstance(meta[k], str) or not meta[k]:
            raise bad(f"\"{k}\" is missing or not text")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise bad("\"entries\" is missing or not a list")
    caps = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise bad(f"entry {i} is not an object")
        for k in ENTRY_INTS:
            if not isinstance(e.get(k), int) or isinstance(e.get(k), bool) or e[k] < 0:
                raise bad(f"entry {i}: \"{k}\" is missing or not a whole number >= 0")
        for k in ENTRY_TEXTS:
            if not isinstance(e.get(k), str) or not e[k]:
                raise bad(f"entry {i}: \"{k}\" is missing or not text")
        key = (e["weight_format"], e["layout"], e["hidden"], e["inter"], e["experts"], e["top_k"])
        if any((c.weight_format, c.layout, c.hidden, c.inter, c.experts, c.top_k) == key for c in caps):
            raise bad(f"entry {i} repeats the shape of an entry before it ({key})")
        caps.append(MeasuredCap(meta["arch"], e["weight_format"], e["layout"], e["hidden"], e["inter"], e["experts"],
                                e["top_k"], e["cap"], e["against"], meta["device"], meta["date"],
                                bool(e.get("faster_at_last", False))))
    return meta, tuple(caps)


_loaded: dict = {}  # path -> (meta, caps), read once per process (the server's calls never re-read it)


def load(path: str) -> tuple:
    """-> (meta, caps) of the file at path, read once per process. Raises CapsFileError."""
    if path not in _loaded:
        try:
            with open(path) as f:
                doc = json.load(f)
        except OSError as e:
            raise CapsFileError(f"{envs.CAPS_FILE.name}={path}: cannot be read ({e.strerror or e}). "
                                + FIX.format(name=envs.CAPS_FILE.name)) from None
        except ValueError as e:
            raise CapsFileError(f"{envs.CAPS_FILE.name}={path}: not JSON ({e}). "
                                + FIX.format(name=envs.CAPS_FILE.name)) from None
        _loaded[path] = parse(doc, path)
    return _loaded[path]


def forget() -> None:
    """Drop what load() read (tests; a server reads the file once)."""
    _loaded.clear()


def file_path() -> str:
    return envs.CAPS_FILE.get().strip()


def file_problem(path: str) -> str:
    """'' where the caps file at path can be used, else what is wrong and the fix (envs.check's view)."""
    try:
        load(path)
    except CapsFileError as e:
        return str(e)
    return ""


def lookup(arch: str, weight_format: str, layout: Optional[str], hidden: Optional[int], inter: int,
           experts: Optional[int], top_k: int) -> Optional[tuple]:
    """(cap, source) from the caps file for a call of this shape, or None (no file set, or no entry for it)."""
    path = file_path()
    if not path or layout is None or hidden is None or experts is None:
        return None
    _, caps = load(path)
    for c in caps:
        if c.applies(arch, weight_format, layout, hidden, inter, experts, top_k):
            return c.cap, c.source(path)
    return None


def check_device(arch: str) -> str:
    """At startup on a GPU: raise CapsFileError where the caps file was measured on another arch; else a line for
    the log saying which caps it sets ('' where no file is set)."""
    path = file_path()
    if not path:
        return ""
    meta, caps = load(path)
    if meta["arch"] != arch:
        raise CapsFileError(f"{envs.CAPS_FILE.name}={path} was measured on {meta['device']} ({meta['arch']}), but this "
                            f"device is {arch}: its caps say nothing about this machine. "
                            + FIX.format(name=envs.CAPS_FILE.name))
    return describe(path, meta, caps)


def describe(path: str, meta: dict, caps: Sequence[MeasuredCap]) -> str:
    shapes = "; ".join(f"{c.weight_format} {c.layout} D={c.hidden} I={c.inter} E={c.experts} K={c.top_k}: cap {c.cap}"
                       for c in caps) or "no entries"
    return (f"token caps from {path} (measured on {meta['device']}, {meta['arch']}, {meta['date']}): {shapes}; other "
            "shapes keep the built-in caps")


# ------------------------------------------------------------------ bench --write-caps
def write_problem(layouts, tokens, fallback: bool) -> str:
    """Why `bench --write-caps` cannot derive caps from a run with these options ('' where it can)."""
    if not fallback:
        return "--write-caps compares the kernel with SGLang's own path: drop --no-fallback"
    if ROW_MAJOR not in layouts:
        return "--write-caps needs row_major among --layouts (the bench times SGLang's path on the row-major rows)"
    if 1 not in tokens:
        return "--write-caps needs 1 among --tokens (a cap covers every count from 1)"
    return ""


def write_from_bench(rows, path: str, meta: dict, shapes: dict, check, echo=print) -> list:
    """Caps from one bench run's rows, checked, then written to path. shapes: shape name -> shapes.MoeShape.
    check(shape, weight_format, layout, tokens) -> [ok per case] runs the selftest's check at those counts.
    Returns derive's dicts (with the shape's sizes and 'checked_at', the counts checked); raises CapsFileError,
    writing nothing, where no shape's alternative was timed or a check fails."""
    from .gate import builtin_cap  # gate reads this module: imported here, not at the top

    derived = derive(rows)
    for d in derived:
        shape = shapes[d["shape"]]
        d.update(hidden=shape.hidden, inter=shape.inter, experts=shape.experts, top_k=shape.slots,
                 checked_at=[t for t, _, _ in d["measured"] if t <= d["cap"]] if d["written"] else [])
    if not any(d["written"] for d in derived):  # before the checks: they would be run for nothing
        raise CapsFileError("SGLang's own path could not be timed for any shape of this run ("
                            + "; ".join(f"{d['shape']} {d['weight_format']} {d['layout']}: {d['why']}" for d in derived)
                            + f"): {path} was not written. The bench's fallback lines say why (SGLang importable? a "
                            "scheme SGLang runs on this machine?)")
    for d in derived:
        counts = d["checked_at"]
        if counts and not all(check(shapes[d["shape"]], d["weight_format"], d["layout"], counts)):
            raise CapsFileError(f"the kernel failed the selftest's check for {d['shape']} {d['weight_format']} "
                                f"{d['layout']} at {counts} tokens: {path} was not written. Run `sglang-smallm selftest "
                                f"--shapes {d['shape']} --formats {d['weight_format']} --layouts {d['layout']}` and "
                                "report its output")
    write(path, [d for d in derived if d["written"]], meta)
    echo(f"\ntoken caps measured on {meta['device']} ({meta['arch']}), written to {path}; serve with "
         f"{envs.CAPS_FILE.name}={path}")
    echo("| shape | format | layout | cap | built-in cap | against | kernel checked at | how the cap ended |")
    echo("|---|---|---|---|---|---|---|---|")
    for d in derived:
        builtin = builtin_cap(meta["arch"], d["weight_format"], d["inter"], d["top_k"], d["hidden"])[0]
        echo(f"| {d['shape']} | {d['weight_format']} | {d['layout']} | "
             f"{d['cap'] if d['written'] else 'not written (built-in cap kept)'} | {builtin} | {d['against']} | "
             f"{','.join(map(str, d['checked_at'])) or '-'} | {d['why']} |")
    return derived


def missing_entry(arch: str, weight_format: str, layout: str, hidden: int, inter: int, experts: int,
                  top_k: int) -> str:
    """Where a caps file is set but has no entry for a layer of this shape: a line for the log (once per shape),
    naming the entries it has (a layout measured as row_major but served shuffled is the likely slip); else ''."""
    path = file_path()
    if (not path or weight_format not in (FP8_BLOCK128, MXFP4) or layout not in (ROW_MAJOR, SHUFFLE16)
            or lookup(arch, weight_format, layout, hidden, inter, experts, top_k) is not None):
        return ""  # no file, a layer the kernel cannot take anyway (the gate says why), or an entry for it
    meta, caps = load(path)
    return (f"sglang-smallm: {envs.CAPS_FILE.name}={path} has no entry for {weight_format} {layout} D={hidden} I={inter} "
            f"E={experts} K={top_k} on {arch}, so this layer keeps the built-in caps; {describe(path, meta, caps)}. "
            f"To measure it: sglang-smallm bench --shapes D{hidden}-E{experts}-K{top_k}-I{inter} --formats "
            f"{weight_format} --layouts row_major,{layout} --write-caps FILE")
