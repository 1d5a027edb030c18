"""examples/sass/scoreboards.py reads the control bits of sm_90a SASS as the hardware uses them.

The fixture is five instructions of the FP8 tensor-core gate/up (`cuobjdump -sass` of the package's
sm_90a build, 7ff4540): the first job's first weight load, the instruction that waits for all of
that job's loads before the second job's are issued, a load of the second job, and a shared-memory
load whose result the MMA after it reads. The MMA's wait on the shared-memory load's scoreboard
checks the bit positions against a dependency the compiler had to honour."""

SASS = """
        Function : _ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi8ELi1EEEvNS_7MoeArgsE
        /*6190*/              @!P5 LDG.E.EF.128 R12, desc[UR10][R46.64] ;                            /* 0x0000000a2e0cd981 */
                                                                                                     /* 0x000562000c0e1d00 */
        /*6570*/                   SEL R0, R123.reuse, RZ, P0 ;                                      /* 0x000000ff7b007207 */
                                                                                                     /* 0x060fe40000000000 */
        /*6dd0*/              @!P2 LDG.E.EF.128 R56, desc[UR10][R82.64+0x600] ;                      /* 0x0006000a5238a981 */
                                                                                                     /* 0x000374000c0e1d00 */
        /*75e0*/              @!P0 LDS.128 R76, [R116] ;                                             /* 0x00000000744c8984 */
                                                                                                     /* 0x000e620000000c00 */
        /*7680*/                   HMMA.16816.F32 R80, R80, R76, RZ ;                                /* 0x0000004c5050723c */
                                                                                                     /* 0x002fde00000018ff */
"""


def test_control_bits(scoreboards):
    sb = scoreboards
    kernels = sb.parse(SASS)
    assert list(kernels) == ["_ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi8ELi1EEEvNS_7MoeArgsE"]
    insns = list(kernels.values())[0]
    assert [sb.opcode(i) for i, _ in insns] == ["LDG.E.EF.128", "SEL", "LDG.E.EF.128", "LDS.128", "HMMA.16816.F32"]
    ldg, sel, ldg2, lds, hmma = (c for _, c in insns)
    assert ldg.write_barrier == 5 and ldg2.write_barrier == 5 and ldg.wait_mask == 0
    assert sel.wait_mask == 1 << 5 and sel.write_barrier == 7
    assert lds.write_barrier == 1
    assert hmma.wait_mask == 1 << 1  # the MMA reads R76, which the LDS (scoreboard 1) writes
    assert hmma.stall == 15


def test_events_show_the_wait_between_the_two_jobs_loads(scoreboards):
    sb = scoreboards
    insns = list(sb.parse(SASS).values())[0]
    assert sb.events(insns) == [(0, "LDG5", 1), (1, "W5:SEL", 1), (2, "LDG5", 1), (4, "HMMA", 1)]
    assert sb.events(insns, start=2) == [(2, "LDG5", 1), (4, "HMMA", 1)]


# nvdisasm -c -hex of the package's FP8 row-major tensor-core gate/up with kJ = 4 (one team: D <= 2048), built
# here with nvcc 13 for sm_90a from 8db99ee's hip/ (examples/results "h200-s43", the SASS entry): two of the
# first job's weight loads, two of the next job's (issued in the job loop before this job's compute), the
# first e4m3 conversion of this job's weights, and an MMA. Every load counts on scoreboard 5, and the
# conversion waits on it: this job's compute waits for the next job's loads too.
NVDISASM = """
//--------------------- .text._ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi4ELi1EEEvNS_7MoeArgsE --------------------------
        /*6390*/              @!P4 LDG.E.EF.128 R12, desc[UR6][R4.64] ;                                                                                  /* 0x00000006040cc981 */
                                                                                                                                                         /* 0x000768000c0e1d00 */
        /*63a0*/              @!P3 LDG.E.EF.128 R16, desc[UR6][R8.64+0x200] ;                                                                            /* 0x000200060810b981 */
                                                                                                                                                         /* 0x000768000c0e1d00 */
        /*6d90*/              @!P4 LDG.E.EF.128 R28, desc[UR6][R44.64] ;                                                                                 /* 0x000000062c1cc981 */
                                                                                                                                                         /* 0x000362000c0e1d00 */
        /*6dc0*/              @!P3 LDG.E.EF.128 R32, desc[UR6][R46.64+0x200] ;                                                                           /* 0x000200062e20b981 */
                                                                                                                                                         /* 0x000362000c0e1d00 */
        /*71a0*/                   F2FP.F16.E4M3.UNPACK_B R48, R12 ;                                                                                     /* 0x0000000cff30723e */
                                                                                                                                                         /* 0x020fe200020006ff */
        /*7240*/                   HMMA.16816.F32 R48, R48, R44, RZ ;                                                                                    /* 0x0000002c3030723c */
                                                                                                                                                         /* 0x002fde00000018ff */
"""


def test_nvdisasm_text_reads_like_cuobjdump(scoreboards):
    sb = scoreboards
    kernels = sb.parse(NVDISASM)
    assert list(kernels) == ["_ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi4ELi1EEEvNS_7MoeArgsE"]
    insns = kernels["_ZN6smallm24smallm_gateup_mma_kernelILi0ELi0ELi4ELi1EEEvNS_7MoeArgsE"]
    assert [sb.opcode(i) for i, _ in insns] == ["LDG.E.EF.128"] * 4 + ["F2FP.F16.E4M3.UNPACK_B", "HMMA.16816.F32"]
    # both jobs' loads with no wait between them, then the wait that covers all four before the compute
    assert sb.events(insns) == [(0, "LDG5", 4), (4, "W5:F2FP.F16.E4M3.UNPACK_B", 1), (5, "HMMA", 1)]
