"""examples/isa/waitcnt.py reads a gfx950 kernel's vmcnt waits as the hardware counts them.

The fixture is lines of the package's gfx950 block kernel (FP8 row-major, variant 0, the gfx950 default),
as `sglang-smallm isa --arch gfx950` wrote it from 60a13ce's hip/ (clang 22 from ziglang): the item
loop's ticket atomic and the wait right after it, two of the next item's non-temporal weight loads (each
under its own guard), a wait for every outstanding load, the x copy into LDS that the loop issues after
the weights (a load, a wait, an LDS write), and the dot products of the current item."""

ASM = """
	.type	_ZN6smallm17smallm_moe_kernelILi0ELi0ELi0EEEvNS_7MoeArgsE,@function
.LBB0_142:                              ; =>This Loop Header: Depth=1
	global_atomic_add v4, v108, v4, s[38:39] sc0
.LBB0_145:                              ;   in Loop: Header=BB0_142 Depth=1
	s_or_b64 exec, exec, s[6:7]
	s_waitcnt vmcnt(0)
	v_readfirstlane_b32 s6, v4
	global_load_dwordx4 v[66:69], v[12:13], off nt
.LBB0_150:                              ;   in Loop: Header=BB0_142 Depth=1
	global_load_dwordx4 v[70:73], v[14:15], off nt
	global_load_dword v51, v[2:3], off
	s_waitcnt vmcnt(0)
	ds_read_b32 v1, v1 offset:7168
	s_waitcnt lgkmcnt(0)
	global_load_dwordx4 v[66:69], v[16:17], off
	s_waitcnt vmcnt(0)
	ds_write_b128 v9, v[66:69]
	s_barrier
	v_dot2c_f32_bf16_e32 v17, v16, v66
	v_dot2c_f32_bf16_e32 v17, v29, v67
	.type	_ZN6smallm18smallm_down_kernelILi0ELi0EEEvNS_7MoeArgsE,@function
	global_load_dwordx4 v[6:9], v[6:7], off nt
	s_waitcnt vmcnt(1)
	v_dot2c_f32_bf16_e32 v0, v77, v8
"""


def test_parse_and_events(waitcnt):
    kernels = waitcnt.parse(ASM)
    assert list(kernels) == ["_ZN6smallm17smallm_moe_kernelILi0ELi0ELi0EEEvNS_7MoeArgsE",
                             "_ZN6smallm18smallm_down_kernelILi0ELi0EEEvNS_7MoeArgsE"]
    block = kernels["_ZN6smallm17smallm_moe_kernelILi0ELi0ELi0EEEvNS_7MoeArgsE"]
    assert [e for _, e, _ in waitcnt.events(block)] == [
        "LOOP1", "ATOM", "W0", "LDW", "LD", "W0", "LD", "W0", "STS", "BAR", "DOT"]
    assert [n for _, e, n in waitcnt.events(block) if e in ("LDW", "DOT")] == [2, 2]
    assert waitcnt.event("\ts_waitcnt lgkmcnt(0)") is None  # LDS and scalar loads have their own counter
    assert waitcnt.event("\tglobal_atomic_add v4, v108, v4, s[38:39]") is None  # no value back: not waited for


def test_weight_loads_drained_before_the_dot_products(waitcnt):
    """The block kernel's next-item weights (LDW) are followed, before the current item's arithmetic, by a
    vmcnt(0): they are complete before it starts. In the down's lines a vmcnt(1) with no load after the
    weights leaves them in flight: not a drain; with one load after them it would be."""
    kernels = waitcnt.parse(ASM)
    block, down = kernels.values()
    evs = waitcnt.events(block)
    (ld, w), = waitcnt.drained_before_dot(evs)
    assert evs[[i for i, _, _ in evs].index(ld)][1] == "LDW" and "vmcnt(0)" in block[w]
    assert waitcnt.drained_before_dot(waitcnt.events(down)) == []
    evs = waitcnt.events(waitcnt.parse(ASM.replace("off nt\n\ts_waitcnt vmcnt(1)", "off nt\n\tglobal_load_dword v5, v[2:3], off\n\ts_waitcnt vmcnt(1)"))["_ZN6smallm18smallm_down_kernelILi0ELi0EEEvNS_7MoeArgsE"])
    assert [e for _, e, _ in evs] == ["LDW", "LD", "W1", "DOT"] and len(waitcnt.drained_before_dot(evs)) == 1


def _loop(second_path_waits):
    loads = "\n".join(f"\tglobal_load_dwordx4 v[{4 * k}:{4 * k + 3}], v[40:41], off nt" for k in range(8))
    wait = "\ts_waitcnt vmcnt(0)\n" if second_path_waits else ""
    return f"""
	.type	_ZN6smallm17smallm_moe_kernelILi0ELi0ELi0EEEvNS_7MoeArgsE,@function
.LBB0_1:                                ; =>This Loop Header: Depth=1
{loads}
	global_load_dword v50, v[42:43], off
	s_cbranch_scc1 .LBB0_3
; %bb.2:
	global_load_dword v51, v[44:45], off sc1
	s_waitcnt vmcnt(0)
	s_branch .LBB0_4
.LBB0_3:
{wait}	s_barrier
.LBB0_4:
	v_dot2c_f32_bf16_e32 v60, v61, v62
	s_cbranch_scc0 .LBB0_1
	s_endpgm
"""


def test_weight_loads_in_flight_follow_the_branches(waitcnt):
    """Eight weight loads in one block, then two paths to the dot products: one waits for everything (a
    phase-2 acquire), the other not. The loads are in flight at a DOT on some path; where the second path
    waits too, on none. A vmcnt(1) after one more load would also cover them."""
    lines = list(waitcnt.parse(_loop(False)).values())[0]
    blocks, succ = waitcnt.blocks(lines)
    assert len(blocks) == 5 and sorted(map(len, succ)) == [0, 1, 1, 2, 2]
    (line, ok), = waitcnt.weight_groups_in_flight(lines)
    assert ok and "global_load_dwordx4 v[28:31]" in lines[line]
    assert waitcnt.weight_groups_in_flight(list(waitcnt.parse(_loop(True)).values())[0]) == [(line, False)]
    assert waitcnt.weight_groups_in_flight(lines, size=9) == []
    covered = _loop(True).replace("\ts_waitcnt vmcnt(0)\n\ts_barrier", "\ts_waitcnt vmcnt(1)\n\ts_barrier")
    assert waitcnt.weight_groups_in_flight(list(waitcnt.parse(covered).values())[0]) == [(line, False)]
