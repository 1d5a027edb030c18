"""examples/isa/valu_per_byte.py reads the gfx950 block kernel's pair steps from assembly: its basic blocks, phase 1's
(gate/up, v_dot2) and phase 2's (down, fp32 conversions and packed FMAs) steps taking one pair or two, the vector
instructions and LDS bytes per weight vector per pair, and the MI355X issue budget per KiB of HBM."""

import math

CVT_BF16 = "\tv_cvt_scalef32_pk_bf16_fp4 v20, v2, 1.0 op_sel:[0,0,0,0]\n"
DOT = "\tv_dot2c_f32_bf16_e32 v30, v20, v10\n"
CVT_F32 = "\tv_cvt_scalef32_pk_f32_fp4 v[20:21], v2, 1.0 op_sel:[0,0,0,0]\n"
PK_FMA = "\tv_pk_fma_f32 v[30:31], v[20:21], v[10:11], v[30:31]\n"
LDS = "\tds_read_b128 v[10:13], v1\n"

ASM = ("\t.type\t_ZN6smallm17smallm_moe_kernelILi1ELi0ELi0EEEvNS_7MoeArgsE,@function\n"
       "_ZN6smallm17smallm_moe_kernelILi1ELi0ELi0EEEvNS_7MoeArgsE:\n"
       "\ts_load_dwordx4 s[0:3], s[4:5], 0x0\n"
       ".LBB0_1:                                ; %two pairs, phase 1: one MXFP4 vector converted once, 2 x 16 dots\n"
       + LDS + CVT_BF16 * 16 + DOT * 32 + "\tv_fmac_f32_e32 v40, v41, v30\n\tv_fmac_f32_e32 v42, v41, v31\n"
       "\ts_cbranch_scc1 .LBB0_1\n"
       ".LBB0_2:                                ; %one pair, phase 1\n"
       + LDS + CVT_BF16 * 16 + DOT * 16 + "\tv_fmac_f32_e32 v40, v41, v30   ; the vector's scale\n"
       "\tv_add_u32_e32 v1, 16, v1\n"
       ".LBB0_3:                                ; %two pairs, phase 2: 2 x 128 bytes of h\n"
       + LDS * 16 + CVT_F32 * 16 + PK_FMA * 32 + "\tv_add_f32_e32 v50, v30, v31\n\tv_add_f32_e32 v51, v32, v33\n"
       ".LBB0_4:                                ; %one pair, phase 2\n"
       + LDS * 8 + CVT_F32 * 16 + PK_FMA * 16 + "\tv_add_f32_e32 v50, v30, v31\n\tv_fmac_f32_e32 v52, v53, v50\n"
       ".LBB0_5:\n" + DOT + "\ts_endpgm\n"
       "\t.type\t_ZN6smallm18smallm_down_kernelILi0ELi0EEEvNS_7MoeArgsE,@function\n"
       "_ZN6smallm18smallm_down_kernelILi0ELi0EEEvNS_7MoeArgsE:\n" + DOT * 9)


def test_blocks_and_pair_steps(valu_per_byte):
    kernels = valu_per_byte.blocks(ASM)
    bl = kernels["_ZN6smallm17smallm_moe_kernelILi1ELi0ELi0EEEvNS_7MoeArgsE"]
    assert len(bl) == 6 and bl[0] == ["s_load_dwordx4 s[0:3], s[4:5], 0x0"]
    two, one = valu_per_byte.pair_steps(bl)  # the one-dot block is not a pair step
    assert (two["valu"], two["dots"], two["cvt"]) == (50, 32, 16) and (one["valu"], one["dots"], one["cvt"]) == (34, 16, 16)
    assert [valu_per_byte.step_pairs(s, 32) for s in (two, one)] == [2, 1]
    assert valu_per_byte.per_vector_pair(two, 32) == 25.0 and valu_per_byte.per_vector_pair(one, 32) == 34.0
    assert valu_per_byte.per_vector_pair(one, 16) == 17.0  # as FP8: two vectors
    down2, down1 = valu_per_byte.down_steps(bl)
    assert (down2["cvt_f32"], down2["lds_bytes"], down1["lds_bytes"]) == (16, 256, 128)
    assert [valu_per_byte.step_pairs(s, 32) for s in (down2, down1)] == [2, 1]
    assert valu_per_byte.per_vector_pair(down2, 32) == 25.0 and valu_per_byte.per_vector_pair(down1, 32) == 34.0
    # LDS bytes a lane reads per vector and pair (this assembly's phase 1 reads only 16 bytes a step; phase 2 h, 4 a
    # value of each vector and pair)
    assert [valu_per_byte.lds_per_vector_pair(s, 32) for s in (two, one, down2, down1)] == [8.0, 16.0, 128.0, 128.0]


def test_a_down_step_over_two_rows_reads_each_h_value_once_for_both(valu_per_byte):
    """Phase 2 with two rows a thread (kRows2, HIP): a step converts two vectors (one of each row), and each h value
    read serves both, so its LDS bytes per vector and pair are half one row's; its pairs come from its packed FMAs
    (values / 2 per vector and pair), not from its LDS bytes."""
    two_rows = ("\t.type\t_ZN6smallm17smallm_moe_kernelILi1ELi0ELi0EEEvNS_7MoeArgsE,@function\n"
                "_ZN6smallm17smallm_moe_kernelILi1ELi0ELi0EEEvNS_7MoeArgsE:\n"
                ".LBB0_1:\n" + LDS * 16 + CVT_F32 * 32 + PK_FMA * 64 + "\tv_add_f32_e32 v50, v30, v31\n"
                ".LBB0_2:\n" + LDS * 8 + CVT_F32 * 32 + PK_FMA * 32 + "\ts_endpgm\n")
    down2, down1 = valu_per_byte.down_steps(valu_per_byte.blocks(two_rows)["_ZN6smallm17smallm_moe_kernelILi1ELi0ELi0EEEvNS_7MoeArgsE"])
    assert [valu_per_byte.step_vectors(s, 32) for s in (down2, down1)] == [2.0, 2.0]
    assert [valu_per_byte.step_pairs(s, 32) for s in (down2, down1)] == [2, 1]
    assert [valu_per_byte.lds_per_vector_pair(s, 32) for s in (down2, down1)] == [64.0, 64.0]
    assert valu_per_byte.per_vector_pair(down2, 32) == (32 + 64 + 1) / 4  # conversions, packed FMAs, the add


def test_summary_sets_the_steps_against_the_hbm_budget(valu_per_byte):
    assert round(valu_per_byte.budget_per_kib(256, 2.4, 8.0), 1) == 78.6
    r, = valu_per_byte.summary(ASM)  # the down kernel is not the block kernel
    assert r["kernel"] == "mxfp4 row_major" and r["valu_per_vector_pair"] == 34.0
    assert (r["up_one"], r["up_two"], r["down_one"], r["down_two"]) == (34.0, 25.0, 34.0, 25.0)
    assert r["mixed_two"] == 25.0 and abs(r["pairs_at_budget"] - 78.6432 / 25) < 1e-3
    assert valu_per_byte.summary(ASM, tbs=4.0)[0]["pairs_at_budget"] == 2 * r["pairs_at_budget"]
    # LDS: the most of each phase's steps, (2 x 16 + 128) / 3 bytes a lane per vector and pair by bytes, 64 lanes,
    # at 128 bytes a cycle, against the same budget
    assert (r["up_lds"], r["down_lds"], r["lds_rate"]) == (16.0, 128.0, 128)
    assert abs(r["pairs_at_lds"] - 78.6432 / ((2 * 16 + 128) / 3 * 64 / 128)) < 1e-3
    assert valu_per_byte.summary(ASM, lds_rate=256)[0]["pairs_at_lds"] == 2 * r["pairs_at_lds"]


def test_a_build_taking_pairs_one_by_one_is_weighed_at_its_one_pair_steps(valu_per_byte):
    one_by_one = ASM.replace(ASM[ASM.index(".LBB0_1:"):ASM.index(".LBB0_2:")], "").replace(
        ASM[ASM.index(".LBB0_3:"):ASM.index(".LBB0_4:")], "")
    r, = valu_per_byte.summary(one_by_one)
    assert math.isnan(r["up_two"]) and math.isnan(r["down_two"])
    assert r["mixed_two"] == 34.0 and abs(r["pairs_at_budget"] - 78.6432 / 34) < 1e-3


def test_pair_step_shares_count_each_experts_pairs_in_twos_then_one(valu_per_byte, pair_step_shares):
    r, = valu_per_byte.summary(ASM)  # one pair 34, two pairs 25 per vector and pair, both phases
    assert pair_step_shares.expert_cost(1, 34.0, 25.0) == 34.0
    assert pair_step_shares.expert_cost(2, 34.0, 25.0) == 50.0
    assert pair_step_shares.expert_cost(5, 34.0, 25.0) == 2 * 50.0 + 34.0
    assert pair_step_shares.expert_cost(3, 34.0, float("nan")) == 102.0  # a build taking pairs one by one
    # a call touching three experts with 1, 2 and 3 pairs: (34 + 50 + 84) / 3 per vector, over the budget
    assert abs(pair_step_shares.share(r, [1, 2, 3]) - (34 + 50 + 84) / 3 / r["budget"]) < 1e-12
