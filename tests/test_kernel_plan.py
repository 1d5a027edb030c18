"""kernels.kernel_plan (launch_plan.py): the launcher's choice of kernels, mirrored in Python for the logs. Its
constants are read from the C++ headers here, so the mirror cannot drift from them silently."""
import re
from pathlib import Path

import pytest

from sglang_smallm_plugin import kernels, launch_plan

HIP = Path(__file__).resolve().parents[1] / "hip"


def _cpp_const(name: str) -> int:
    for f in sorted(HIP.glob("*.h")) + sorted(HIP.glob("*.hip")):
        m = re.search(rf"constexpr int {name} = ([0-9 *]+);", f.read_text())
        if m:
            return eval(m.group(1))  # only digits, spaces and '*' (the regex)
    raise AssertionError(f"{name} not found in hip/*.h, hip/*.hip")


def test_constants_match_the_headers():
    assert kernels.THREADS == _cpp_const("kThreads")
    assert kernels.X_STAGE_BYTES == _cpp_const("kXStageBytes")
    assert kernels.MMA_MAX_PAIRS == _cpp_const("kMmaMaxPairs")
    assert kernels.DOWN_MMA_SMEM_BYTES == _cpp_const("kDownMmaSmemBytes")
    assert kernels.DOWN_MMA_ROWS == _cpp_const("kDownMmaRows")
    assert kernels.MAX_YS_MMA_BYTES == _cpp_const("kMaxYsMmaBytes")
    assert kernels.DOWN_LO16_CARVEOUT_BYTES == _cpp_const("kDownLo16CarveoutBytes")
    assert kernels.DOWN_MMA_CHUNKS == _cpp_const("kDownMmaChunks")
    assert kernels.DOWN_SPLIT_CHUNKS == _cpp_const("kDownSplitChunks")
    assert kernels.TWO_BLOCK_CARVEOUT_BYTES == _cpp_const("kTwoBlockCarveoutBytes")
    assert kernels.BLOCK_RESERVED_SMEM_BYTES == _cpp_const("kBlockReservedSmemBytes")
    assert kernels.DOWN_TEAMS_MIN_PAIRS == _cpp_const("kDownTeamsMinPairs")
    assert kernels.DOWN_TEAMS_NARROW_MAX_INTER == _cpp_const("kDownTeamsNarrowMaxInter")
    assert kernels.DOWN_TEAMS_NARROW_MIN_PAIRS == _cpp_const("kDownTeamsNarrowMinPairs")
    assert kernels.DOWN_TEAMS_WIDE_MIN_PAIRS == _cpp_const("kDownTeamsWideMinPairs")
    assert kernels.FP8_TEAMS_MIN_TOKENS == _cpp_const("kFp8TeamsMinTokens")
    assert kernels.TMA_SLICE == _cpp_const("kTmaSlice") and kernels.TMA_WARPGROUPS == _cpp_const("kTmaWarpgroups")
    assert kernels.TMA_MAX_TOKENS == _cpp_const("kTmaMaxTokens") and kernels.TMA_MAX_PAIRS == _cpp_const("kTmaMaxPairs")
    assert kernels.WARPS == _cpp_const("kThreads") // 32  # CUDA's kWarp (the tensor-core kernels are CUDA's)
    # the fixed counters of the sync workspace (ticket, exit) precede done1 and used1
    assert kernels.SYNC_FIXED_WORDS == _cpp_const("kSyncDone1") + 2 * _cpp_const("kMaxPairs")


def _format_elems(fmt_enum: str) -> int:
    """kElems of `struct Format<fmt_enum>` in hip/smallm_moe.h."""
    text = (HIP / "smallm_moe.h").read_text()
    body = text[text.index(f"struct Format<{fmt_enum}> {{"):]
    return int(re.search(r"static constexpr int kElems = (\d+);", body).group(1))


def test_mma_step_values_match_the_headers():
    # mma_step_values<Fmt>() = 4 * Format<Fmt>::kElems (hip/smallm_moe_twopass.h)
    assert "return 4 * Format<Fmt>::kElems;" in (HIP / "smallm_moe_twopass.h").read_text()
    assert launch_plan._mma_step_values("fp8_block128") == 4 * _format_elems("kFp8Block128")
    assert launch_plan._mma_step_values("mxfp4") == 4 * _format_elems("kMxfp4")


def test_every_switch_the_launcher_reads_is_documented():
    """Each environment variable hip/smallm_moe.hip reads (getenv, env_switch_on, env_int) is an envs.Switch
    (doctor lists them)."""
    from sglang_smallm_plugin import envs

    read = set(re.findall(r'(?:env_switch_on|env_int|getenv)\("(\w+)"', (HIP / "smallm_moe.hip").read_text()))
    assert "SMALLM_GATEUP_TEAMS" in read and "SMALLM_MMA" in read and "SMALLM_DOWN_PER_SM" in read
    assert read <= {s.name for s in envs.ALL}, read - {s.name for s in envs.ALL}


@pytest.fixture
def env(monkeypatch):
    for name in ("SMALLM_KERNEL_VARIANT", "SMALLM_MMA", "SMALLM_MMA_DOWN", "SMALLM_GATEUP_TEAMS", "SMALLM_DOWN_TEAMS",
                 "SMALLM_DOWN_LO8", "SMALLM_DOWN_RING", "SMALLM_MMA_SPLIT", "SMALLM_MMA_SPLIT_TOKENS",
                 "SMALLM_GATEUP_TMA", "SMALLM_MMA_SPLIT_DOWN"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("T, K, I, expect", [
    (1, 11, 256, "gate/up on tensor cores, down on tensor cores"),        # Qwen3.5 TP4
    (2, 11, 128, "gate/up on tensor cores (2 teams per block: FP8 row-major, 2 tokens >= 2, where its job loop "
                 "settles each job's loads), down on tensor cores (2 teams per block: 22 pairs >= 22 at I=128)"),  # 22 pairs
    (3, 11, 256, "3 tokens >= 2, where its job loop settles each job's loads), down on tensor cores (2 teams per block: 33 pairs >= 22 at I=256)"),
    (8, 11, 128, "8 tokens >= 2, where its job loop settles each job's loads), down on tensor cores (2 teams"),  # Qwen3.5 TP8
    (8, 11, 256, "loads), down on tensor cores (2 teams"),                 # h: 88 * 264 * 4 B
    (9, 11, 256, "gate/up on tensor cores (2 teams per block: FP8 row-major, 9 tokens"),  # though 2 x (19712 + 73776 + 1024) B fit 196 KB
    (10, 11, 256, "gate/up on tensor cores (2 teams per block, x once per SM: two blocks of x 81920 B would pass "
                  "the 196 KB shared-memory carveout), down on tensor cores (2 teams per block: 110 pairs >= 22 at I=256)"),
    (14, 11, 256, "x once per SM"),
    (13, 11, 256, "down on tensor cores (2 teams per block: 143 pairs >= 22 at I=256)"),  # f16 lo: its block 170464 + 10624 + 1024 B
    (14, 11, 256, "down on tensor cores (2 teams per block: 154 pairs >= 22 at I=256)"),  # f16 lo: 183584 + 10624 + 1024 B
    (15, 11, 256, "down on tensor cores (2 teams per block: 165 pairs >= 22 at I=256), h's lo half as e5m2 (as f16 its block "
                  "would take 208352 B, past the 196 KB shared-memory carveout)"),
    (16, 11, 256, "h's lo half as e5m2 (as f16 its block would take 221440 B"),  # stage 209792 B: fits, but the L1
    (17, 11, 256, "down on tensor cores (2 teams per block: 187 pairs >= 22 at I=256), h's lo half as e5m2 (as f16 its "
                  "stage would take 222912 B, over the 211968 B of a block)"),
    (20, 11, 256, "h's lo half as e5m2"),    # h 220 * 256 * 3 B (e5m2 rows unpadded) + y 220 * 16 * 2 * 4 B + 2^e, tw: 198880 B fit
    (1, 8, 384, "down on tensor cores, each job in 2 parts along I (256 + 128)"),  # Qwen3-235B-like: split jobs, 8 pairs one team
    (4, 8, 384, "down on tensor cores (2 teams per block: 32 pairs >= 16 at I=384, jobs split along I: from 2 tokens), "
                "each job in 2 parts along I (256 + 128)"),
    (2, 8, 512, "down on tensor cores (2 teams per block: 16 pairs >= 16 at I=512, jobs split along I: from 2 tokens), "
                "each job in 2 parts along I (256 + 256)"),
    (2, 8, 640, "down on CUDA cores (I=640 over 512)"),
    (21, 11, 256, "2 calls of at most 11 tokens (x as f16 is 172032 B, over the 163840 B stage), each two-pass"),
])
def test_h200_fp8_plan(env, T, K, I, expect):
    assert expect in kernels.kernel_plan("sm_90", "fp8_block128", T, K, 4096, I)


@pytest.mark.parametrize("T, D, layout, expect", [
    (8, 4096, "shuffle16x16", "gate/up on tensor cores, down"),      # the rule is for the row-major kernel (measured)
    (8, 2048, "row_major", "gate/up on tensor cores, down"),      # kJ = 4: 32 steps of 64 values, 4 per warp
    (8, 3072, "row_major", "gate/up on tensor cores (2 teams per block: FP8 row-major, 8 tokens"),  # 48 steps: kJ = 8
    (1, 4096, "row_major", "gate/up on tensor cores, down"),      # one token: one team (TP8 0.2 us faster)
])
def test_h200_fp8_gateup_teams_rule(env, T, D, layout, expect):
    assert expect in kernels.kernel_plan("sm_90", "fp8_block128", T, 11, D, 256, layout=layout)


def test_forced_gateup_teams_override_the_fp8_rule(env):
    env.setenv("SMALLM_GATEUP_TEAMS", "1")
    assert "gate/up on tensor cores (1 team per block: SMALLM_GATEUP_TEAMS=1)" in kernels.kernel_plan(
        "sm_90", "fp8_block128", 8, 11, 4096, 256)


@pytest.mark.parametrize("T, K, I, expect", [
    (1, 11, 256, "gate/up on tensor cores, down on tensor cores"),        # Qwen3.5 TP4
    (8, 11, 128, "gate/up on tensor cores, down on tensor cores (2 teams"),
    (4, 8, 384, "gate/up on tensor cores, down on tensor cores"),         # 3 chunks of 128: fits (FP8 does not); 32 pairs: one team
    (2, 8, 640, "down on CUDA cores (I=640 over 512)"),
    (16, 11, 128, "x once per SM"),                                        # x: 16 * 4096 * 2 B
    (16, 11, 128, "down on tensor cores"),                                 # h: 176 * 136 * 4 B
    (16, 11, 256, "down on tensor cores (2 teams per block: 176 pairs >= 22 at I=256)"),   # f16 lo half (MXFP4)
    (20, 11, 256, "h's lo half as e5m2"),
    (48, 11, 256, "3 calls of at most 16 tokens (x as f16 is 393216 B"),   # x: 48 * 4096 * 2 B over 160 KB
])
def test_h200_mxfp4_plan(env, T, K, I, expect):
    assert expect in kernels.kernel_plan("sm_90", "mxfp4", T, K, 4096, I)


def test_down_stage_at_the_smallest_grid(env):
    # Qwen3.5 TP4, 16 tokens on 132 SMs: 256 row-blocks over 132 blocks, 2 per block
    assert kernels.down_mma_smem_at("fp8", 176, 256, 4096, 132, 2) == 176 * 16 * 2 * 4 + 2 * 176 * 4 + 176 * 264 * 4
    # MXFP4's lo rows from 180 (the least >= 176 that is 4 mod 8): 4 rows more
    assert kernels.down_mma_smem_at("mxfp4", 176, 256, 4096, 132, 2) == 176 * 16 * 2 * 4 + 2 * 176 * 4 + (180 + 176) * 264 * 2
    assert kernels.down_mma_smem_at("fp8", 176, 256, 4096, 132, 1) == 176 * 16 * 2 * 4 + 2 * 176 * 4 + 176 * 256 * 3  # unpadded
    assert kernels.down_mma_smem_at("mxfp4", 176, 256, 4096, 132, 1) == kernels.down_mma_smem_at("fp8", 176, 256, 4096, 132, 1)
    # 114 SMs: 3 row-blocks' y (33792 B) pass 32 KB, so the launcher adds blocks up to 2 per block
    assert kernels.down_mma_smem_at("fp8", 176, 256, 4096, 114, 2) == kernels.down_mma_smem_at("fp8", 176, 256, 4096, 132, 2)
    # 32 SMs, 16 pairs: y of 8 row-blocks per block (8192 B) fits 32 KB as it is
    assert kernels.down_mma_smem_at("fp8", 16, 256, 4096, 32, 2) == 16 * 16 * 8 * 4 + 2 * 16 * 4 + 16 * 264 * 4
    # an I the MMA chunks take whose stage cannot fit at 20 tokens: the down-fit split (two calls of 10), or with
    # it off CUDA cores, with the bytes
    assert kernels.kernel_plan("sm_90", "mxfp4", 20, 8, 4096, 512, sms=132).startswith(
        "2 calls of at most 10 tokens (the down's staged h and y at 20 tokens would not fit a block)")
    env.setenv("SMALLM_MMA_SPLIT_DOWN", "0")
    assert ("down on CUDA cores (its staged h and y take 267520 B even with h's lo half as e5m2, over the 211968 B "
            "of a block)") in kernels.kernel_plan("sm_90", "mxfp4", 20, 8, 4096, 512, sms=132)  # 160 * 512 * 3 B of h alone


def test_down_h_rows_pad_only_the_f16_lo_half():
    # the mirror's row stride is the header's (padded by 8 values with an f16 lo half, not with e5m2)
    text = (HIP / "smallm_moe_twopass.h").read_text()
    assert "inline int down_mma_hstride(int I, bool lo8) { return lo8 ? I : I + 8; }" in text
    assert "down_mma_stage_rows<Fmt>(N, lo8) * down_mma_hstride(I, lo8) * 2 + (lo8 ? N * I : 0)" in text
    assert "inline int down_mma_lo_row0(int N) { return N + ((4 - N) & 7); }" in text
    assert [kernels.down_mma_lo_row0(n) for n in (11, 12, 13, 20, 176, 220)] == [12, 12, 20, 20, 180, 220]
    assert (kernels.down_mma_hstride(256, False), kernels.down_mma_hstride(256, True)) == (264, 256)
    # what the unpadded e5m2 rows are for: Qwen3.5 TP4 19 tokens (209 pairs), the down's block within the
    # 196 KB carveout (with the pad, 209 * 8 * 3 B more, it was 4920 B past it)
    block = kernels.down_mma_smem_at("fp8", 209, 256, 4096, 132, 1) + kernels.MMA_ROUTING_BYTES + kernels.BLOCK_RESERVED_SMEM_BYTES
    assert block <= 196 * 1024 < block + 209 * 8 * 3


def test_mma_routing_bytes_match_the_struct():
    # struct alignas(128) RoutingFor<kP, kE> (hip/smallm_moe.h): id, ulead, ufill, plist [kP], ucnt [kP + 1],
    # e2u [kE], nd. The tensor-core down holds MmaRouting (kMmaMaxPairs, kMaxExperts) as its static shared
    # memory; test_kernel_compile checks ptxas's figure (10624 bytes).
    text = (HIP / "smallm_moe.h").read_text()
    body = text[text.index("struct alignas(128) RoutingFor {"):]
    body = body[:body.index("};")]
    assert body.count("[kP]") == 4 and "[kP + 1]" in body and "[kE]" in body
    assert "using Routing = RoutingFor<kMaxPairs, kMaxExperts>;" in text
    assert "using MmaRouting = RoutingFor<kMmaMaxPairs, kMaxExperts>;" in (HIP / "smallm_moe_twopass.h").read_text()
    words = 5 * _cpp_const("kMmaMaxPairs") + 1 + _cpp_const("kMaxExperts") + 1
    assert kernels.MMA_ROUTING_BYTES == -(-4 * words // 128) * 128 == 10624


@pytest.mark.parametrize("D, lane", [(2048, True), (4096, True), (4224, False), (7168, False)])
def test_mxfp4_gateup_scales_in_the_plan(D, lane):
    """The MXFP4 tensor-core gate/up takes each lane's e8m0 on fp32 sums for an expert with one pair where
    a warp holds four steps of 128 values (D <= 4096: kJ = 4), and f16 scales relative to a quad's largest
    otherwise (hip/smallm_moe_twopass.h, gateup_mma_job); the plan says which. FP8's plan says neither."""
    plan = kernels.kernel_plan("sm_90", "mxfp4", 3, 8, D, 256, sms=132)
    assert plan.startswith("two-pass (variant 5): gate/up on tensor cores"), plan
    lane_text = "; gate/up e8m0 per lane on fp32 sums for an expert with one pair, in f16 relative to a quad's largest for more"
    assert plan.endswith(lane_text if lane else "; gate/up e8m0 in f16 relative to a quad's largest"), plan
    assert "gate/up e8m0" not in kernels.kernel_plan("sm_90", "fp8_block128", 3, 8, D, 256, sms=132)


def test_down_lo_half(env):
    plan = lambda T: kernels.kernel_plan("sm_90", "fp8_block128", T, 11, 4096, 256, sms=132)  # noqa: E731
    assert plan(14).endswith("down on tensor cores (2 teams per block: 154 pairs >= 22 at I=256)")  # f16 lo half
    assert "h's lo half as e5m2" in plan(15)
    # MXFP4 keeps f16 while it fits (its down is bound by the weights' decode)
    assert "(2 teams per block: 176 pairs >= 22 at I=256), each e8m0 block's scale on its MMA's fp32 sums;" in kernels.kernel_plan(
        "sm_90", "mxfp4", 16, 11, 4096, 256, sms=132)
    assert "h's lo half as e5m2 (as f16 its stage would take 223440 B" in kernels.kernel_plan(  # lo rows from 188
        "sm_90", "mxfp4", 17, 11, 4096, 256, sms=132)
    env.setenv("SMALLM_DOWN_LO8", "0")
    assert plan(16).endswith("(2 teams per block: 176 pairs >= 22 at I=256)")  # f16 wherever it fits
    assert plan(17).startswith("2 calls of at most 9 tokens (the down's staged h and y at 17 tokens would not fit")
    env.setenv("SMALLM_MMA_SPLIT_DOWN", "0")
    assert plan(17).endswith("down on CUDA cores (its staged h and y take 222912 B with h's lo half as f16, over "
                             "the 211968 B of a block: SMALLM_DOWN_LO8=0)")
    env.delenv("SMALLM_MMA_SPLIT_DOWN")
    env.setenv("SMALLM_DOWN_LO8", "1")
    assert plan(1).endswith("down on tensor cores, h's lo half as e5m2 (SMALLM_DOWN_LO8=1)")


@pytest.mark.parametrize("fmt, I, chunks", [
    ("mxfp4", 128, 2), ("mxfp4", 256, 2), ("mxfp4", 384, 4), ("mxfp4", 512, 4),   # 128 values of I per chunk
    ("fp8_block128", 128, 2), ("fp8_block128", 256, 4),                           # 64 per chunk
    ("fp8_block128", 384, 4), ("fp8_block128", 512, 4),                           # split: parts of four chunks
])
def test_down_ring_chunks(env, fmt, I, chunks):
    """kernels.down_mma_ring_chunks mirrors the launcher's choice of the down kernel's kCh (three jobs' W2 in
    flight per warp where a job holds two chunks); SMALLM_DOWN_RING=2 forces two jobs and the plan says so,
    except for FP8's split jobs, which the launcher runs on the two-chunk kernel whatever it says."""
    assert kernels.down_mma_ring_chunks(fmt, I) == chunks
    split = kernels.down_mma_split(fmt, I)
    assert split == (fmt == "fp8_block128" and I > 256)
    env.setenv("SMALLM_DOWN_RING", "2")
    plan = kernels.kernel_plan("sm_90", fmt, 1, 8, 4096, I, sms=132)
    assert ("two jobs' W2 in flight per warp (SMALLM_DOWN_RING=2)" in plan) == (chunks == 2 and not split)
    assert ("parts along I" in plan) == split
    assert kernels.down_mma_parts(fmt, I) == ([256] * (I // 256) + [I % 256] * (I % 256 > 0) if split else [I])


@pytest.mark.parametrize("I, ring, per_block", [(128, "", True), (256, "", True), (256, "2", False), (384, "", False)])
def test_mxfp4_down_scale_mode(env, I, ring, per_block):
    """The MXFP4 down's scales, as the plan words them: where a job holds two chunks (kCh = 2, the
    header's kBlockMma) each MMA takes one e8m0 block and its scale goes on the fp32 sums; with four
    chunks (I over 256, or SMALLM_DOWN_RING=2) the scales are applied in f16 relative to the largest."""
    env.setenv("SMALLM_DOWN_RING", ring)
    plan = kernels.kernel_plan("sm_90", "mxfp4", 1, 8, 4096, I, sms=132)
    assert ("each e8m0 block's scale on its MMA's fp32 sums" in plan) == per_block, plan
    assert ("e8m0 scales in f16 relative to the largest of 128 values" in plan) == (not per_block), plan
    assert "block" not in kernels.kernel_plan("sm_90", "fp8_block128", 1, 8, 4096, I, sms=132).split("down on")[1]
    text = (HIP / "smallm_moe_twopass.h").read_text()
    assert "constexpr bool kBlockMma = kFp4 && kCh == 2;" in text


@pytest.mark.parametrize("T, K, D, part", [
    (1, 11, 4096, 1), (20, 11, 4096, 20), (21, 11, 4096, 11), (32, 11, 4096, 16), (41, 11, 4096, 14),
    (48, 11, 4096, 16), (60, 11, 4096, 20), (61, 11, 4096, 16), (8, 11, 16384, 0),
    (20, 16, 4096, 20),                      # 320 pairs: both limits at once
    (29, 11, 2048, 29), (30, 11, 2048, 15),  # x fits 40 tokens at D = 2048; the pairs 29 with 11 slots
    (41, 11, 2048, 21), (21, 16, 2048, 11), (320, 1, 128, 320), (321, 1, 128, 161),
])
def test_mma_split_tokens(env, T, K, D, part):
    """The mirror of the launcher's split of a call whose x is over the f16 stage or whose pairs are over
    kMmaMaxPairs: the fewest parts that fit (20 tokens at D = 4096), near-equal; none where D does not suit
    the tensor-core gate/up. The plan says how many calls and why; SMALLM_MMA_SPLIT=0 keeps the CUDA-core
    kernels and says so."""
    assert kernels.mma_split_tokens("mxfp4", T, K, D) == part
    if 0 < part < T:
        parts = -(-T // part)
        assert part * parts >= T and part * (parts - 1) < T
        assert part * 2 * D <= kernels.X_STAGE_BYTES and part * K <= kernels.MMA_MAX_PAIRS
        why = ("x as f16 is %d B, over the %d B stage" % (T * D * 2, kernels.X_STAGE_BYTES) if T * D * 2 > 160 * 1024
               else "%d pairs, over the 320 of a tensor-core call" % (T * K))
        plan = kernels.kernel_plan("sm_90", "mxfp4", T, K, D, 256, sms=132)
        assert plan.startswith(f"{parts} calls of at most {part} tokens ({why}), each two-pass"), plan
        assert "CUDA cores" not in plan, plan
        env.setenv("SMALLM_MMA_SPLIT", "0")
        assert kernels.kernel_plan("sm_90", "mxfp4", T, K, D, 256, sms=132).endswith(
            f"gate/up and down on CUDA cores ({why}: SMALLM_MMA_SPLIT=0)")


@pytest.mark.parametrize("setting, T, part", [("10", 19, 10), ("10", 20, 10), ("10", 10, 10), ("7", 8, 4),
                                              ("10", 32, 8), ("30", 21, 11), ("0", 19, 19), ("x", 19, 19)])
def test_split_tokens_switch(env, setting, T, part):
    """SMALLM_MMA_SPLIT_TOKENS=N (A/B runs): parts of at most N tokens also where one call fits (near-equal:
    8 tokens at N = 7 -> 4 + 4); never more than the stage allows (32 -> 8 x 4 at N = 10, 21 -> 11 + 10 at
    N = 30); 0 or no number (atoi) leaves the rule alone. The plan names the switch where it alone splits."""
    env.setenv("SMALLM_MMA_SPLIT_TOKENS", setting)
    plan = kernels.kernel_plan("sm_90", "fp8_block128", T, 11, 4096, 256, sms=132)
    if part == T:
        assert not plan.startswith(("2 calls", "3 calls", "4 calls")), plan
        return
    parts = -(-T // part)
    why = "x as f16 is" if T > 20 else f"SMALLM_MMA_SPLIT_TOKENS={setting}"
    assert plan.startswith(f"{parts} calls of at most {part} tokens ({why}"), plan
    assert kernels.mma_split_tokens("fp8_block128", T, 11, 4096, int(setting)) == part


def test_mma_split_rule_matches_the_header():
    text = (HIP / "smallm_moe_twopass.h").read_text()
    body = text[text.index("inline int mma_split_tokens(int T, int K, int D, int most_tokens = 0) {"):]
    body = body[:body.index("\n}")]
    assert "kXStageBytes / gateup_x_stage_bytes(1, D)" in body and "kMmaMaxPairs / (K > 0 ? K : 1)" in body
    assert "if (most_tokens > 0 && most_tokens < most) most = most_tokens;" in body
    assert "(T + most - 1) / most" in body and "(T + parts - 1) / parts" in body
    fits = text[text.index("inline bool gateup_mma_fits(int T, int K, int D) {"):]
    assert "T * K <= kMmaMaxPairs" in fits[:fits.index("\n}")]
    launcher = (HIP / "smallm_moe.hip").read_text()
    assert 'env_switch_on("SMALLM_MMA_SPLIT")' in launcher and 'env_int("SMALLM_MMA_SPLIT_TOKENS", 0)' in launcher
    assert "mma_split_tokens<Fmt>(a.T, a.K, a.D, split_tokens)" in launcher
    assert "gateup_mma_fits<Fmt>(a.T, a.K, a.D)" in launcher


def _down_fits(fmt, T, K, D, I):
    return kernels.down_mma_lo_bytes(fmt, T * K, I, D, 132)[0] > 0


@pytest.mark.parametrize("fmt", ["fp8_block128", "mxfp4"])
@pytest.mark.parametrize("D, I, K", [(2048, 256, 10), (2048, 384, 10), (2048, 512, 10), (4096, 384, 11),
                                     (4096, 256, 11), (4096, 128, 11), (4096, 256, 8)])
def test_split_down_switch(env, fmt, D, I, K):
    """The down-fit split (on by default; SMALLM_MMA_SPLIT_DOWN=0 turns it off for A/B runs): a tensor-core
    call whose down's staged h and y would not fit a block runs as the fewest calls whose downs do, of
    ceil(T / calls) tokens but the last (D = 2048, I = 256, top-10: 26 tokens -> 13 + 13), on top of the
    x/pairs split; the down then never runs on CUDA cores where a part of one token would fit (from 33
    tokens there the pairs already split the call into parts that fit). Off, the launcher splits by x and
    the pairs alone; unset, empty or 1 is on (the launcher's env_switch_on); the Qwen3.5 shapes (D = 4096,
    I <= 256) split the same either way at every count to 48."""
    env.setenv("SMALLM_MMA_SPLIT_DOWN", "0")
    parts_off = {T: kernels.launch_token_parts("sm_90", fmt, T, K, D, I, sms=132) for T in range(1, 49)}
    env.delenv("SMALLM_MMA_SPLIT_DOWN")
    parts_on = {T: kernels.launch_token_parts("sm_90", fmt, T, K, D, I, sms=132) for T in range(1, 49)}
    for value in ("", "1"):
        env.setenv("SMALLM_MMA_SPLIT_DOWN", value)
        assert {T: kernels.launch_token_parts("sm_90", fmt, T, K, D, I, sms=132) for T in range(1, 49)} == parts_on
    env.delenv("SMALLM_MMA_SPLIT_DOWN")
    changed = []
    for T in range(1, 49):
        parts = parts_on[T]
        assert sum(parts) == T and set(parts[:-1]) <= {parts[0]} and parts[-1] <= parts[0], (T, parts)
        assert len(parts) >= len(parts_off[T])
        if parts != parts_off[T]:
            changed.append(T)
            assert all(_down_fits(fmt, p, K, D, I) for p in parts), (T, parts)
            assert not _down_fits(fmt, max(parts_off[T]), K, D, I), (T, parts_off[T])
            fewer = -(-T // (len(parts) - 1))  # one part fewer: some part's down would not fit
            assert not _down_fits(fmt, fewer, K, D, I), (T, parts)
            plan = kernels.kernel_plan("sm_90", fmt, T, K, D, I, sms=132)
            assert plan.startswith(f"{len(parts)} calls of at most {max(parts)} tokens (") and (
                f"the down's staged h and y at {max(parts_off[T])} tokens would not fit a block") in plan, plan
            assert "down on CUDA cores" not in plan, plan
        elif _down_fits(fmt, 1, K, D, I):
            assert all(_down_fits(fmt, p, K, D, I) for p in parts), (T, parts)
    if D == 4096 and I <= 256:
        assert changed == []  # the Qwen3.5 shapes (and top-8 at I = 256)
    if (D, I) == (2048, 256):
        assert changed == list(range(26, 33)) and parts_on[26] == [13, 13] and parts_off[26] == [26]
        env.setenv("SMALLM_MMA_SPLIT_DOWN", "0")
        assert "down on CUDA cores" in kernels.kernel_plan("sm_90", fmt, 26, K, D, I, sms=132)


def test_split_down_rule_matches_the_launcher():
    """down_fit_part's mirror reads like the launcher's: the part kept where its down fits, else the most
    tokens that fit found downwards, then near-equal parts; the switch on unless it starts with 0
    (env_switch_on), and only where the down may take tensor cores."""
    text = (HIP / "smallm_moe.hip").read_text()
    body = text[text.index("int down_fit_part(const smallm::MoeArgs& a, int part) {"):]
    body = body[:body.index("\n}")]
    for line in ("if (!smallm::down_mma_takes<Fmt>(a.I)) return part;", "b.T = part < a.T ? part : a.T;",
                 "if (down_mma_lo_bytes<Fmt>(b)) return part;", "while (b.T > 1) {",
                 "const int parts = (a.T + b.T - 1) / b.T;", "return (a.T + parts - 1) / parts;"):
        assert line in body, line
    assert 'static const bool split_down = env_switch_on("SMALLM_MMA_SPLIT_DOWN");' in text
    assert "bool env_switch_on(const char* name) {\n  const char* v = getenv(name);\n  return !(v && v[0] == '0');" in text
    assert "if (split_down && mma_down && part > 0) part = down_fit_part<Fmt>(a, part);" in text


def test_down_ring_rule_matches_the_header():
    text = (HIP / "smallm_moe_twopass.h").read_text()
    body = text[text.index("inline int down_mma_ring_chunks(int I) {"):]
    body = body[:body.index("}")]
    assert "return down_mma_chunks<Fmt>(I) <= 2 ? 2 : kDownMmaChunks;" in body
    assert "static_assert(!kSplit || (!kFp4 && kCh == kDownMmaChunks)" in text
    assert "const int nparts = kSplit ? (nch + kCh - 1) / kCh : 1;" in text
    assert "static_assert(kCh == 2 || kCh == kDownMmaChunks" in text
    split = text[text.index("inline bool down_mma_split(int I) {"):]
    assert "Fmt == kFp8Block128 && down_mma_chunks<Fmt>(I) > kDownMmaChunks" in split[:split.index("}")]
    takes = text[text.index("inline bool down_mma_takes(int I) {"):]
    assert "(Fmt == kFp8Block128 ? kDownSplitChunks : kDownMmaChunks)" in takes[:takes.index("}")]
    launcher = (HIP / "smallm_moe.hip").read_text()
    assert "down_mma_ring_chunks<Fmt>(a.I) == 2" in launcher and 'getenv("SMALLM_DOWN_RING")' in launcher
    assert "if (smallm::down_mma_split<Fmt>(a.I)) return launch_down_mma_teams_ch<Fmt, Layout, smallm::kDownMmaChunks, true>" in launcher


def test_switches_and_other_targets(env):
    assert kernels.kernel_plan("gfx950", "fp8_block128", 1, 11, 4096, 256) == "block kernel (variant 0)"
    env.setenv("SMALLM_KERNEL_VARIANT", "5")
    assert "CUDA cores (no tensor-core path for this arch" in kernels.kernel_plan("gfx950", "fp8_block128", 1, 11, 4096, 256)
    assert "CUDA cores (no tensor-core path for this arch" in kernels.kernel_plan("gfx950", "mxfp4", 1, 11, 4096, 256)
    env.setenv("SMALLM_KERNEL_VARIANT", "1")
    assert kernels.kernel_plan("sm_90", "fp8_block128", 1, 11, 4096, 256) == "block kernel (variant 1)"
    assert kernels.kernel_plan("gfx950", "fp8_block128", 1, 11, 4096, 256) == "block kernel (variant 0)"  # 1: CUDA only
    env.setenv("SMALLM_KERNEL_VARIANT", "")
    env.setenv("SMALLM_MMA_DOWN", "0")
    assert kernels.kernel_plan("sm_90", "fp8_block128", 1, 11, 4096, 256).endswith("down on CUDA cores (SMALLM_MMA_DOWN=0)")
    env.setenv("SMALLM_MMA_DOWN", "1")
    env.setenv("SMALLM_DOWN_TEAMS", "2")
    assert kernels.kernel_plan("sm_90", "fp8_block128", 1, 11, 4096, 256).endswith(
        "down on tensor cores (2 teams per block: SMALLM_DOWN_TEAMS=2)")
    env.setenv("SMALLM_DOWN_TEAMS", "1")
    assert kernels.kernel_plan("sm_90", "fp8_block128", 8, 11, 4096, 256).endswith(
        "down on tensor cores (1 team per block: SMALLM_DOWN_TEAMS=1)")
    env.delenv("SMALLM_DOWN_TEAMS")
    env.setenv("SMALLM_MMA_DOWN", "0")
    env.setenv("SMALLM_MMA", "0")
    assert kernels.kernel_plan("sm_90", "fp8_block128", 1, 11, 4096, 256).endswith("(SMALLM_MMA=0)")
    # a row too wide for the two-pass gate/up (fp8 D > 8192): the block kernel
    env.delenv("SMALLM_MMA")
    assert kernels.kernel_plan("sm_90", "fp8_block128", 1, 8, 16384, 256).startswith("block kernel (variant 1): D=16384")


@pytest.mark.parametrize("D, sms, grid", [(4096, 132, 132), (6144, 132, 132), (7168, 132, 126), (2048, 132, 132),
                                          (4096, 114, 112), (512, 1, 1), (16384, 4, 0)])
def test_gateup_tma_grid(D, sms, grid):
    """The TMA gate/up's blocks: the most up to one per SM whose two warpgroups divide into D / 512 slices."""
    assert kernels.gateup_tma_grid(D, sms) == grid
    text = (HIP / "smallm_moe.hip").read_text()
    assert "if ((smallm::kTmaWarpgroups * g) % S == 0) return g;" in text


def test_gateup_tma_plan(env):
    """SMALLM_GATEUP_TMA=1 words the TMA gate/up where the launcher takes it (FP8 row-major, sm_90a,
    <= 20 tokens, D % 512 == 0), and the reason elsewhere; unset, the plan is the mma.sync one."""
    plan = lambda fmt, T, layout=kernels.ROW_MAJOR, arch="sm_90", build="sm_90a", D=4096: kernels.kernel_plan(
        arch, fmt, T, 11, D, 256, 132, layout, build)
    assert "TMA" not in plan("fp8_block128", 8)
    env.setenv("SMALLM_GATEUP_TMA", "1")
    assert "gate/up by TMA tiles on wgmma" in plan("fp8_block128", 8)
    assert "gate/up by TMA tiles on wgmma" in plan("fp8_block128", 21)  # two calls of 11 and 10, each TMA
    assert "TMA" not in plan("mxfp4", 8) and "TMA" not in plan("fp8_block128", 8, kernels.SHUFFLE16)
    # the device's arch (what device_info gives the bench, doctor and the runner's log) and the build's
    assert "TMA" not in plan("fp8_block128", 8, build="sm_90") and "TMA" not in plan("fp8_block128", 8, arch="sm_100")
    assert "sm_90a builds only" in kernels.gateup_tma_why_not("sm_90", "fp8_block128", kernels.ROW_MAJOR, 8, 11, 4096,
                                                              256, 132, build=None if kernels.compiled_arch() is None else "sm_90")
    why = lambda D: kernels.gateup_tma_why_not("sm_90", "fp8_block128", kernels.ROW_MAJOR, 8, 11, D, 256, 132, "sm_90a")
    assert why(4160).startswith("D=4160") and why(4096) == ""
    assert "per 128-wide K block" in plan("fp8_block128", 8)
    env.setenv("SMALLM_GATEUP_TMA", "2")
    assert "SMALLM_GATEUP_TMA=2" in plan("fp8_block128", 8) and "per 32-k step" in plan("fp8_block128", 8)
    env.setenv("SMALLM_GATEUP_TMA", "3")  # one kernel up to 10 tokens and I = 256, else as 2
    assert plan("fp8_block128", 8).startswith("one kernel by TMA tiles on wgmma (SMALLM_GATEUP_TMA=3")
    assert "SMALLM_GATEUP_TMA=3, 11 tokens over 10 for the one-kernel MoE, so as 2" in plan("fp8_block128", 11)
    assert "TMA" not in plan("mxfp4", 8) and "TMA" not in plan("fp8_block128", 8, build="sm_90")
    # the workspace: y holds the groups' sums and h at D = 512 only for few pairs; the counters need D
    assert kernels.tma_fused_why_not(1, 11, 4096, 256, 132) == "" and kernels.tma_fused_why_not(10, 11, 4096, 256, 132) == ""
    assert kernels.tma_fused_why_not(10, 16, 512, 256, 132).startswith("its sums and h over the workspace's y")
    assert kernels.tma_fused_why_not(1, 16, 512, 256, 132).startswith("its counters over the workspace's")
    assert kernels.tma_fused_why_not(8, 8, 4096, 384, 132) == "I=384 over 256"
    assert kernels.tma_fused_why_not(1, 8, 256, 128, 132) == "D=256 (a multiple of 512)"
    text = (HIP / "smallm_gateup_tma.h").read_text()
    assert "return (long)groups * T * D + P * I * 8 * nt2 / 4 + P * (I / 32) * 2 * nt2;" in text
    assert "return P * (I / 32) + P + D / kTmaDownRows + 1;" in text
    assert "const int g = blocks * kTmaWarpgroups / (D / kTmaDownRows);" in text
    env.setenv("SMALLM_GATEUP_TMA", "4")  # the launcher takes 1 to 3 only
    assert "TMA" not in plan("fp8_block128", 8)
    text = (HIP / "smallm_moe.hip").read_text()
    assert "return v && v[0] >= '1' && v[0] <= '3' ? v[0] - '0' : 0;" in text
    assert "if (gateup_tma_mode() != 3 || a.T > kTmaFusedMaxTokens || a.I > kTmaFusedMaxInter" in text
    tma = (HIP / "smallm_gateup_tma.h").read_text()
    assert (f"constexpr int kTmaFusedMaxTokens = {kernels.TMA_FUSED_MAX_TOKENS};" in tma
            and f"constexpr int kTmaFusedMaxInter = {kernels.TMA_FUSED_MAX_INTER};" in tma)


def test_two_team_gateup_fits_the_164_kb_carveout_at_19_tokens():
    """The per-token scales after x and the teams' sums in the routing's expert map keep the two-team
    gate/up's block at D = 4096 and 19 tokens within the 164 KB carveout (92 KB of L1 beside it), where
    both as static members (16128 B) took it to 168.75 KB (examples/results "h200-s35" run 3)."""
    # the mirror's dynamic bytes are the header's (x as f16, then a word per token, 16-byte padded)
    text = (HIP / "smallm_moe_twopass.h").read_text()
    assert ("inline long gateup_mma_smem_bytes(int T, int D) { return gateup_x_stage_bytes(T, D) + (T * 4 + 15) / 16 * 16; }"
            in text)
    assert "inline long gateup_x_stage_bytes(int T, int D) { return (long)T * D * 2; }" in text
    assert "const int smem = (int)gateup_mma_smem_bytes(a.T, a.D);" in (HIP / "smallm_moe.hip").read_text()
    static_two_teams = kernels.MMA_ROUTING_BYTES + 128  # test_kernel_compile checks it against ptxas
    block = lambda T: static_two_teams + kernels.gateup_mma_smem_bytes(T, 4096) + kernels.BLOCK_RESERVED_SMEM_BYTES  # noqa: E731
    assert kernels.gateup_mma_smem_bytes(19, 4096) == 19 * 8192 + 80
    assert block(19) <= 164 * 1024 < block(20)
    assert 16128 + 19 * 8192 + kernels.BLOCK_RESERVED_SMEM_BYTES > 164 * 1024  # before


@pytest.mark.parametrize("fmt, T, K, D, I, teams", [
    ("fp8_block128", 1, 11, 4096, 256, 1), ("fp8_block128", 2, 11, 4096, 256, 2),   # Qwen3.5 TP4: 11 / 22 pairs
    ("mxfp4", 2, 11, 4096, 128, 2),                                                 # Qwen3.5 TP8
    ("mxfp4", 1, 11, 6144, 256, 1), ("mxfp4", 4, 5, 6144, 128, 1),                # I <= 256: 22 pairs over SMs row-blocks
    # D / 16 <= SMs (D = 2048): from 10 pairs at I >= 256 ("h200-s44" run 1, "h200-s43" run 3), 22 at I = 128
    ("fp8_block128", 1, 5, 2048, 256, 1), ("fp8_block128", 2, 5, 2048, 256, 2), ("fp8_block128", 4, 5, 2048, 256, 2),
    ("fp8_block128", 1, 10, 2048, 256, 2), ("fp8_block128", 1, 10, 2048, 512, 2), ("mxfp4", 1, 10, 2048, 384, 2),
    ("fp8_block128", 2, 10, 2048, 128, 1), ("fp8_block128", 3, 10, 2048, 128, 2),
    ("mxfp4", 2, 8, 4096, 384, 1), ("mxfp4", 3, 8, 4096, 384, 1), ("mxfp4", 4, 8, 4096, 384, 1),  # Qwen3-235B-like
    ("mxfp4", 5, 8, 4096, 384, 2),                                                 # 40 pairs >= 33
    ("mxfp4", 4, 5, 4096, 384, 1),                                                 # D=4096: one row-block per one-team block
    ("mxfp4", 1, 5, 6144, 384, 1), ("mxfp4", 2, 5, 6144, 384, 2),                  # MiniMax-M3-like: from 2 tokens
    ("mxfp4", 1, 8, 6144, 384, 1), ("mxfp4", 2, 8, 6144, 384, 2),
    ("mxfp4", 2, 5, 2048, 384, 2), ("mxfp4", 2, 8, 5120, 384, 2), ("mxfp4", 2, 5, 7168, 384, 2),
    ("mxfp4", 4, 2, 6144, 384, 1), ("mxfp4", 5, 2, 6144, 384, 2),                  # few slots: at least 10 pairs
    # FP8 at I = 384, jobs split along I: from 2 tokens at D = 4096 too ("h200-s40" run 4)
    ("fp8_block128", 1, 8, 4096, 384, 1), ("fp8_block128", 2, 8, 4096, 384, 2), ("fp8_block128", 4, 8, 4096, 384, 2),
    ("fp8_block128", 1, 11, 4096, 384, 1), ("fp8_block128", 2, 11, 4096, 384, 2)])
def test_down_teams_rule(env, fmt, T, K, D, I, teams):
    """Two down teams from 22 pairs where I <= 256 (Qwen3.5, "h200-s38" run 3). Wider I from 2 tokens
    (at least 10 pairs), except where a one-team grid gives each block one row-block (D / 16 in (SMs,
    2 SMs], D = 4096 on the H200), which keeps 33: Qwen3-235B-like MXFP4 slower with two teams at 24 and 32
    pairs ("h200-s38" run 5, "h200-s39" run 2), the other D faster from 2 tokens ("h200-s39" runs 2-3)."""
    plan = kernels.kernel_plan("sm_90", fmt, T, K, D, I, sms=kernels.H200_SMS)
    assert ("down on tensor cores (2 teams per block:" in plan) == (teams == 2), plan
    assert "down on tensor cores" in plan, plan


def test_down_teams_rule_follows_the_sm_count():
    # D = 4096: 256 row-blocks; one row-block per one-team block where 128 <= SMs < 256
    assert kernels.down_teams_rule(384, 4096, 8, 132)[0] == kernels.DOWN_TEAMS_MIN_PAIRS
    assert kernels.down_teams_rule(384, 4096, 8, 114)[0] == 16       # H100 PCIe: uneven counts, from 2 tokens
    assert kernels.down_teams_rule(384, 4096, 8, 256)[0] == kernels.DOWN_TEAMS_WIDE_MIN_PAIRS  # one block a SM: from 10 pairs
    assert kernels.down_teams_rule(256, 4096, 8, 114)[0] == kernels.DOWN_TEAMS_NARROW_MIN_PAIRS
    assert kernels.down_teams_rule(384, 4096, 8, 132, split=True)[0] == 16  # FP8 split jobs: from 2 tokens at any SM count
    launcher = (HIP / "smallm_moe.hip").read_text()  # the launcher's rule has the same split case
    assert kernels.down_teams_rule(256, 2048, 10, 132)[0] == kernels.DOWN_TEAMS_WIDE_MIN_PAIRS  # 128 row-blocks
    assert kernels.down_teams_rule(256, 2048, 10, 114)[0] == kernels.DOWN_TEAMS_NARROW_MIN_PAIRS  # 114 SMs: more blocks
    assert kernels.down_teams_rule(128, 2048, 10, 132)[0] == kernels.DOWN_TEAMS_NARROW_MIN_PAIRS
    assert kernels.DOWN_TEAMS_FEW_BLOCKS_MIN_INTER == _cpp_const("kDownTeamsFewBlocksMinInter")
    assert "if (nrb <= sms && I >= kDownTeamsFewBlocksMinInter) return kDownTeamsWideMinPairs;" in launcher
    assert "if (!split && nrb > sms && nrb <= 2 * sms) return kDownTeamsMinPairs;" in launcher
    assert "down_teams_min_pairs(a.I, a.D, a.K, sms, kSplit)" in launcher
