"""examples/isa/valu_per_byte.py reads the gfx950 block kernel's pair step from assembly: its basic blocks, the
vector instructions per weight vector per pair, and the MI355X issue budget per KiB of HBM."""

ASM = """\
\t.type\t_ZN6smallm17smallm_moe_kernelILi1ELi0ELi0EEEvNS_7MoeArgsE,@function
_ZN6smallm17smallm_moe_kernelILi1ELi0ELi0EEEvNS_7MoeArgsE:
\ts_load_dwordx4 s[0:3], s[4:5], 0x0
.LBB0_1:                                ; %pair
\tds_read_b128 v[10:13], v1
""" + "\tv_cvt_scalef32_pk_bf16_fp4 v20, v2, 1.0 op_sel:[0,0,0,0]\n\tv_dot2c_f32_bf16_e32 v30, v20, v10\n" * 16 + """\
\tv_fmac_f32_e32 v40, v41, v30   ; the vector's scale
\tv_add_u32_e32 v1, 16, v1
\ts_cbranch_scc1 .LBB0_1
.LBB0_2:
\tv_dot2c_f32_bf16_e32 v30, v20, v10
\ts_endpgm
\t.type\t_ZN6smallm18smallm_down_kernelILi0ELi0EEEvNS_7MoeArgsE,@function
_ZN6smallm18smallm_down_kernelILi0ELi0EEEvNS_7MoeArgsE:
""" + "\tv_dot2c_f32_bf16_e32 v30, v20, v10\n" * 9


def test_blocks_and_pair_steps(valu_per_byte):
    kernels = valu_per_byte.blocks(ASM)
    bl = kernels["_ZN6smallm17smallm_moe_kernelILi1ELi0ELi0EEEvNS_7MoeArgsE"]
    assert len(bl) == 3 and bl[0] == ["s_load_dwordx4 s[0:3], s[4:5], 0x0"]
    step, = valu_per_byte.pair_steps(bl)  # the one-dot block is not a pair step
    assert step == dict(valu=34, dots=16, cvt=16, lds=1, n=36)
    assert valu_per_byte.per_vector_pair(step, 32) == 34.0  # one MXFP4 vector: 16 v_dot2
    assert valu_per_byte.per_vector_pair(step, 16) == 17.0  # as FP8: two vectors


def test_summary_sets_the_step_against_the_hbm_budget(valu_per_byte):
    assert round(valu_per_byte.budget_per_kib(256, 2.4, 8.0), 1) == 78.6
    r, = valu_per_byte.summary(ASM)  # the down kernel is not the block kernel
    assert r["kernel"] == "mxfp4 row_major" and r["valu_per_vector_pair"] == 34.0
    assert abs(r["pairs_at_budget"] - 78.6432 / 34) < 1e-3 and r["bytes_per_valu"] == 1024 / 34
    assert valu_per_byte.summary(ASM, tbs=4.0)[0]["pairs_at_budget"] == 2 * r["pairs_at_budget"]
