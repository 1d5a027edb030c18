"""Model shapes the plugin is built and measured for (one MoE layer per tensor-parallel rank)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class MoeShape:
    name: str
    hidden: int        # D
    experts: int       # E, routed + fused shared
    slots: int         # K, routed top-k + shared
    inter: int         # I per partition
    shared: int = 0    # fused shared experts (ids E-shared .. E-1, always selected)
    note: str = ""

    def expert_bytes(self, weight_format: str) -> int:
        """Weight + scale bytes of one expert: its W13's, then its W2's."""
        return self.w13_bytes(weight_format) + self.w2_bytes(weight_format)

    def w13_bytes(self, weight_format: str) -> int:
        """Gate/up (W13, 2I x D) weight + scale bytes of one expert."""
        return 2 * self._matrix_bytes(weight_format)

    def w2_bytes(self, weight_format: str) -> int:
        """Down (W2, D x I) weight + scale bytes of one expert."""
        return self._matrix_bytes(weight_format)

    def _matrix_bytes(self, weight_format: str) -> int:
        """One D x I matrix: MXFP4 e2m1 two a byte and an e8m0 per 32 values; FP8 e4m3 and an fp32 per
        128 x 128 block (D and I are multiples of 128)."""
        D, I = self.hidden, self.inter
        if weight_format == "mxfp4":
            return D * I // 2 + D * I // 32
        return D * I + 4 * (D * I // (128 * 128))

    def distinct_experts(self, tokens: int) -> float:
        """Expected distinct experts touched by `tokens` tokens with uniform random routing."""
        routed = self.experts - self.shared
        k = self.slots - self.shared
        return self.shared + routed * (1 - (1 - k / routed) ** tokens)


SHAPES = {
    s.name: s
    for s in (
        MoeShape("qwen35-tp4", 4096, 513, 11, 256, 1, "Qwen3.5-397B-A17B at TP4: 512 routed + 1 shared, top-10 + shared"),
        MoeShape("qwen35-tp8", 4096, 513, 11, 128, 1, "Qwen3.5-397B-A17B at TP8"),
        MoeShape("minimax-m3", 6144, 129, 5, 384, 1, "MiniMax-M3-like: 128 routed + 1 shared, top-4 + shared"),
        MoeShape("qwen3-235b-tp4", 4096, 128, 8, 384, 0, "Qwen3-235B-A22B-like at TP4: 128 experts, top-8"),
    )
}


# A shape not in SHAPES, written as D<hidden>-E<experts>-K<slots>-I<inter>[-S<shared>], e.g. D4096-E129-K5-I384-S1
# (MiniMax-M3-like at hidden 4096): `sglang-smallm bench --shapes` and `selftest --shapes` take it beside the names.
_SPEC_KEYS = {"D": "hidden", "E": "experts", "K": "slots", "I": "inter", "S": "shared"}
SHAPE_SPEC_FORM = "D<hidden>-E<experts>-K<slots>-I<inter>[-S<shared>]"


def shape_by_name(name: str) -> MoeShape:
    """A registered shape by name, or one written as SHAPE_SPEC_FORM. Raises ValueError that names both."""
    if name in SHAPES:
        return SHAPES[name]
    fields = {}
    for part in name.split("-"):
        key, digits = part[:1].upper(), part[1:]
        if key not in _SPEC_KEYS or not digits.isdigit() or _SPEC_KEYS[key] in fields:
            fields = None
            break
        fields[_SPEC_KEYS[key]] = int(digits)
    if not fields or any(k not in fields for k in ("hidden", "experts", "slots", "inter")):
        raise ValueError(f"unknown shape {name!r}: use one of {', '.join(SHAPES)} or {SHAPE_SPEC_FORM} "
                         f"(e.g. D4096-E129-K5-I384-S1)")
    shape = MoeShape(name, fields["hidden"], fields["experts"], fields["slots"], fields["inter"],
                     fields.get("shared", 0), "given on the command line")
    why = _spec_problem(shape)
    if why:
        raise ValueError(f"shape {name!r}: {why}")
    return shape


def _spec_problem(s: MoeShape) -> str:
    """Why the kernel cannot take a given shape at all (the gate's shape_problem, then the shared experts'
    own limits), or ""."""
    from .gate import shape_problem

    why = shape_problem(s.hidden, s.inter, s.experts, s.slots)
    if why:
        return why
    if not 0 <= s.shared < s.slots:
        return f"S ({s.shared}) must be fewer than K ({s.slots})"
    if s.experts < s.slots:  # E - S routed experts for K - S routed slots
        return f"E ({s.experts}) leaves fewer routed experts than the routed slots ({s.slots - s.shared})"
    return ""
