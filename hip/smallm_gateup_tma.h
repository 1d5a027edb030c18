// smallm_gateup_tma.h: the FP8 gate/up for sm_90a with TMA tiles and wgmma (CUDA only; on gfx950 and
// other targets this header declares nothing). Measured first as examples/wgmma/wgmma_gateup_probe.cu's
// tma_gateup (examples/results "h200-wgmma" run 7: TP4 1.22-1.26x of the W13 read floor at 4-20 tokens,
// 5-21 % faster than smallm_gateup_mma_kernel's span).
//
// Design. One block of two warpgroups per SM. Every block routes the call's pairs (distinct experts in
// first-occurrence order, each token's slots per distinct expert). A warpgroup's job is (distinct expert
// u, chunk c of 32 intermediate rows, K slice s of 512): A = the chunk's 32 gate rows and their 32 up
// rows, B = the call's x over the slice, N = 8 NT columns (token t's hi part in column 2t, its lo part in
// 2t + 1; NT = ceil(T / 4)). Jobs go round-robin over the warpgroups (job = u C S + c S + s, warpgroup
// j takes j, j + G, ...) with G a multiple of S, so a warpgroup's jobs all lie in one slice and it stages
// x only there (its own 512 k, each token's power-of-two scale taken over them).
//   - W13 arrives by TMA: a 2-D tensor map over row-major W13 (k bytes, rows), 128-byte swizzle, boxes
//     of 128 k x 32 rows. A job is eight boxes (per 128-wide K block its gate box, then its up box): the
//     canonical K-major layout of a 64 x 128 wgmma A operand (8-row groups 1024 bytes apart, k-step j at
//     + 32 j bytes), plus its eight fp32 block scales by two 16-byte bulk copies, on the stage's
//     transaction barrier. Two 32 KB stages per warpgroup; one thread issues, and refills a stage once
//     every warp of the warpgroup has waited for the MMAs that read it.
//   - x: hi = e4m3(x s), lo = e4m3(16 (x s - hi)), s = 2^(7 - floor(log2 max |x|)) over the slice: the
//     two parts hold bf16 x's 8 significant bits (exactly on the selftest's data, but for values far
//     below the slice's largest: examples/wgmma/x_split_emulation.py); the partial sums are multiplied
//     by 1 / s.
//   - Per job: 16 wgmma m64nNk32 (A and B from shared memory). kStepSums false: one accumulator per
//     128-wide K block, one commit, one wait, then the gate and up block scales in fp32 ("h200-tma" runs
//     1-2: errors 8-9.7e-4, 1.07e-3 in the wide_scales edge case; x's parts being exact, the FP8 sums
//     kept inside the tensor core over 128 k are the likely cause).
//     kStepSums true: a fresh accumulator per 32-k step, added in fp32 (four commits and waits per job,
//     one per K block, with its four steps' accumulators): "h200-tma" run 3, 5.7-7.6e-4, wide_scales
//     7.7e-4, at most 2 % slower than false.
//   - Each job writes its slice's partial gate and up sums of the pairs routed to its expert into the
//     workspace after h ([S][pairs][2I] fp32); smallm_tma_slice_sum adds the slices in order
//     (deterministic) and writes h = silu(gate) * up, which the down kernels read as before. The slice
//     sum is a programmatic dependent of the gate/up (which lets it launch at once), and lets the down
//     launch at once too, though its blocks, which need a whole SM, find one only when the persistent
//     gate/up's blocks leave, all at its end ("h200-tma" run 3: the layer 0-23 % slower than with the
//     mma.sync gate/up, whose blocks leave one by one). The end of this file has the whole MoE in one
//     kernel (SMALLM_GATEUP_TMA=3).
#pragma once

#include "smallm_moe.h"

#if defined(SMALLM_CUDA)
#include <cuda.h>  // CUtensorMap

namespace smallm {

constexpr int kTmaSlice = 512;        // K per job
constexpr int kTmaJobBytes = 32768;   // 64 rows x 512 k of e4m3
constexpr int kTmaStages = 2;         // per warpgroup
constexpr int kTmaWarpgroups = 2;     // per block
constexpr int kTmaThreads = 128 * kTmaWarpgroups;
constexpr int kTmaMaxTokens = 20;     // NT <= 5: N <= 40 columns
constexpr int kTmaMaxPairs = 320;
constexpr int kTmaBoxRows = 32, kTmaBoxBytes = 128;

struct TmaShared {
  unsigned long long full[kTmaWarpgroups][kTmaStages];   // a stage's weights and scales arrived
  alignas(16) float scale[kTmaWarpgroups][kTmaStages][8];  // a stage's gate (0..3) and up (4..7) block scales
  float xinv[kTmaWarpgroups][kTmaMaxTokens];             // 1 / s per token over the warpgroup's slice
  int nu;                                                // distinct experts
  int ids[kTmaMaxPairs];
  int first[kMaxExperts];        // first pair of each expert, then (for first pairs) its distinct index
  int uni[kTmaMaxPairs];         // distinct experts, first-occurrence order
  unsigned mask[kTmaMaxPairs / 32];
  unsigned slots[kTmaMaxPairs * kTmaMaxTokens];  // [u][t]: bit k set where token t's slot k is expert u
  int last[kTmaWarpgroups];  // the fused kernel: what this warpgroup's count ended (or -1)
  float tw[kTmaMaxPairs];    // the fused kernel: the routing weights
};

// Dynamic shared memory of a block: TmaShared, the stages (1024-byte aligned: the swizzle's period), x.
inline long tma_gateup_smem_bytes(int T) {
  const int nt = (T + 3) / 4;
  return (long)sizeof(TmaShared) + 1023 + (long)kTmaWarpgroups * kTmaStages * kTmaJobBytes +
         (long)kTmaWarpgroups * kTmaSlice * 8 * nt;
}
// Workspace floats after h ([pairs][I]) for the slices' partial sums.
inline long tma_partial_words(int T, int K, int D, int I) { return (long)(D / kTmaSlice) * T * K * 2 * I; }

// wgmma and the TMA tile copies: sm_90a only (the arch-specific feature set; sm_90 and later
// architectures compile the kernel empty, and the launcher takes it only on compute capability 9.x with
// a build for sm_90a, smallm_build_arch)
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SMALLM_SM90_TMA 1
#endif

namespace tma {

SMALLM_DEV uint32_t saddr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
SMALLM_DEV bool mbar_done(uint32_t bar, uint32_t parity) {
  uint32_t ok = 1;
#if defined(SMALLM_SM90_TMA)
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(ok)
               : "r"(bar), "r"(parity)
               : "memory");
#endif
  return ok != 0;
}
SMALLM_DEV void mbar_wait(uint32_t bar, uint32_t parity) {  // spins until the phase of that parity completed
  while (!mbar_done(bar, parity)) {
  }
}
SMALLM_DEV void mbar_init(uint32_t bar) {  // one arrival per phase (the thread that posts the bytes)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
}
SMALLM_DEV void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
SMALLM_DEV void mbar_expect(uint32_t bar, uint32_t bytes) {  // arrive, and wait for `bytes` to land
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
SMALLM_DEV void wg_barrier(int wg) {  // the 128 threads of warpgroup wg (named barriers 1, 2)
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
}
// Shared-memory matrix descriptors: no swizzle (start, LBO = the next 16-byte k group's core matrices,
// SBO = the next 8 rows'), and K-major with the 128-byte swizzle (SBO 1024 bytes, LBO unused).
SMALLM_DEV uint64_t desc_plain(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3ffffu) >> 4) | ((uint64_t)((lbo & 0x3ffffu) >> 4) << 16) |
         ((uint64_t)((sbo & 0x3ffffu) >> 4) << 32);
}
SMALLM_DEV uint64_t desc_sw128(uint32_t addr) {
  return (uint64_t)((addr & 0x3ffffu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
template <int N>
SMALLM_DEV void hold(float (&d)[N]) {  // keeps reads of d below the wgmma wait
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
SMALLM_DEV void mma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
SMALLM_DEV void mma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
SMALLM_DEV void mma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// This thread's generic shared-memory stores made visible to the async proxy (wgmma's operand reads);
// a barrier after it makes them everyone's.
SMALLM_DEV void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// The 2-D tensor map's box at (x bytes, row y) to shared dst, completing on the transaction barrier bar.
SMALLM_DEV void tile_copy(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar) : "memory");
}
// `bytes` (a multiple of 16) from global src to shared dst, completing on the transaction barrier bar.
SMALLM_DEV void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// d (+)= A(64 x 32 e4m3, shared memory, adesc) * B(32 x 8 NT e4m3, shared memory, bdesc).
template <int NT, bool kAcc>
SMALLM_DEV void mma(float (&d)[4 * NT], uint64_t adesc, uint64_t bdesc);
#define SMALLM_TMA_D4 "%0, %1, %2, %3"
#define SMALLM_TMA_D8 SMALLM_TMA_D4 ", %4, %5, %6, %7"
#define SMALLM_TMA_D12 SMALLM_TMA_D8 ", %8, %9, %10, %11"
#define SMALLM_TMA_D16 SMALLM_TMA_D12 ", %12, %13, %14, %15"
#define SMALLM_TMA_D20 SMALLM_TMA_D16 ", %16, %17, %18, %19"
#define SMALLM_TMA_O4(c) c(d[0]), c(d[1]), c(d[2]), c(d[3])
#define SMALLM_TMA_O8(c) SMALLM_TMA_O4(c), c(d[4]), c(d[5]), c(d[6]), c(d[7])
#define SMALLM_TMA_O12(c) SMALLM_TMA_O8(c), c(d[8]), c(d[9]), c(d[10]), c(d[11])
#define SMALLM_TMA_O16(c) SMALLM_TMA_O12(c), c(d[12]), c(d[13]), c(d[14]), c(d[15])
#define SMALLM_TMA_O20(c) SMALLM_TMA_O16(c), c(d[16]), c(d[17]), c(d[18]), c(d[19])
#define SMALLM_TMA_SET(x) "=f"(x)
#define SMALLM_TMA_ACC(x) "+f"(x)
// The asm text of one wgmma m64nNk32 e4m3 x e4m3 -> f32: D (the operand list DL) scaled in (FLAG "1")
// or not ("0"), A given as the operand text A (a descriptor "%k" or four registers "{%i, ..}"), B as the
// descriptor operand "%" #BD.
#define SMALLM_TMA_WGMMA_ASM(FLAG, N, DL, A, BD)                                                        \
  "{\n.reg .pred p;\nsetp.ne.b32 p, " FLAG ", 0;\n"                                                     \
  "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32.e4m3.e4m3 {" DL "}, " A ", %" #BD ", p, 1, 1;\n}\n"
// Both accumulate forms (kAcc false: D set, true: D accumulated) of one N through ONE.
#define SMALLM_TMA_BOTH(ONE, NT, N, DL, A, BD, OUTS)          \
  ONE(NT, false, "0", N, DL, A, BD, OUTS, SMALLM_TMA_SET) \
  ONE(NT, true, "1", N, DL, A, BD, OUTS, SMALLM_TMA_ACC)
#if defined(SMALLM_SM90_TMA)
#define SMALLM_TMA_MMA_ONE(NT, ACC, FLAG, N, DL, AD, BD, OUTS, C)                                \
  template <>                                                                           \
  SMALLM_DEV void mma<NT, ACC>(float(&d)[4 * NT], uint64_t adesc, uint64_t bdesc) {     \
    asm volatile(SMALLM_TMA_WGMMA_ASM(FLAG, N, DL, AD, BD) : OUTS(C) : "l"(adesc), "l"(bdesc)); \
  }
#else
#define SMALLM_TMA_MMA_ONE(NT, ACC, FLAG, N, DL, AD, BD, OUTS, C) \
  template <>                                                \
  SMALLM_DEV void mma<NT, ACC>(float(&d)[4 * NT], uint64_t, uint64_t) { (void)d; }
#endif
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_ONE, 1, 8, SMALLM_TMA_D4, "%4", 5, SMALLM_TMA_O4)
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_ONE, 2, 16, SMALLM_TMA_D8, "%8", 9, SMALLM_TMA_O8)
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_ONE, 3, 24, SMALLM_TMA_D12, "%12", 13, SMALLM_TMA_O12)
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_ONE, 4, 32, SMALLM_TMA_D16, "%16", 17, SMALLM_TMA_O16)
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_ONE, 5, 40, SMALLM_TMA_D20, "%20", 21, SMALLM_TMA_O20)

// d (+)= A(64 x 32 e4m3, registers) * B(32 x 8 NT e4m3, shared memory, bdesc). A's fragment, register j of
// thread (warp w, lane 4 g + q): bytes 4q..4q+3 of row 16 w + g + 8 (j & 1), k + 16 for j >= 2 (checked
// against the shared-memory form by examples/wgmma/wgmma_gateup_probe.cu's fragment check). The caller
// keeps a's registers unchanged until the wgmma wait (hold_regs after it).
template <int NT, bool kAcc>
SMALLM_DEV void mma_ra(float (&d)[4 * NT], const uint32_t (&a)[4], uint64_t bdesc);
#if defined(SMALLM_SM90_TMA)
#define SMALLM_TMA_MMA_RA_ONE(NT, ACC, FLAG, N, DL, AL, BD, OUTS, C)                                 \
  template <>                                                                                 \
  SMALLM_DEV void mma_ra<NT, ACC>(float(&d)[4 * NT], const uint32_t(&a)[4], uint64_t bdesc) { \
    asm volatile(SMALLM_TMA_WGMMA_ASM(FLAG, N, DL, AL, BD)                                     \
                 : OUTS(C)                                                                    \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(bdesc));                   \
  }
#else
#define SMALLM_TMA_MMA_RA_ONE(NT, ACC, FLAG, N, DL, AL, BD, OUTS, C)                        \
  template <>                                                                        \
  SMALLM_DEV void mma_ra<NT, ACC>(float(&d)[4 * NT], const uint32_t(&)[4], uint64_t) { (void)d; }
#endif
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_RA_ONE, 1, 8, SMALLM_TMA_D4, "{%4, %5, %6, %7}", 8, SMALLM_TMA_O4)
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_RA_ONE, 2, 16, SMALLM_TMA_D8, "{%8, %9, %10, %11}", 12, SMALLM_TMA_O8)
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_RA_ONE, 3, 24, SMALLM_TMA_D12, "{%12, %13, %14, %15}", 16, SMALLM_TMA_O12)
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_RA_ONE, 4, 32, SMALLM_TMA_D16, "{%16, %17, %18, %19}", 20, SMALLM_TMA_O16)
SMALLM_TMA_BOTH(SMALLM_TMA_MMA_RA_ONE, 5, 40, SMALLM_TMA_D20, "{%20, %21, %22, %23}", 24, SMALLM_TMA_O20)
template <int N>
SMALLM_DEV void hold_regs(uint32_t (&r)[N]) {  // keeps registers an async wgmma reads alive to here
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

SMALLM_DEV float warp_max(float m) {  // over the warp's lanes (every lane gets it)
#pragma unroll
  for (int o = 16; o; o >>= 1) m = fmaxf(m, shfl_xor(m, o));
  return m;
}
// The largest |x| of n bf16 values (a warp's work; every lane gets it).
SMALLM_DEV float warp_absmax(const uint16_t* xrow, int n, int lane) {
  float m = 0.0f;
  const uint4* xr = reinterpret_cast<const uint4*>(xrow);
  for (int v = lane; v < n / 8; v += 32) {
    const uint4 u4 = xr[v];
    const uint32_t ww[4] = {u4.x, u4.y, u4.z, u4.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) m = fmaxf(m, fmaxf(fabsf(bf16_lo(ww[i])), fabsf(bf16_hi(ww[i]))));
  }
  return warp_max(m);
}
// 1 / s for a token whose largest |x| is m: s = 2^(7 - floor(log2 m)) puts m in [128, 256).
SMALLM_DEV float xinv_of(float m) {
  const int ex = m > 0.0f ? (int)((__float_as_uint(m) >> 23) & 255) - 127 : 7;
  return exp2f((float)(ex - 7));
}
// Two bf16 values (one 32-bit word) times sc as e4m3 hi and lo parts (two bytes each).
SMALLM_DEV void split_pair(uint32_t word, float sc, uint32_t& hi2, uint32_t& lo2) {
#if !defined(SMALLM_SM90_TMA)  // (cuda_fp8.h comes with sm_89+ device passes only: smallm_compat.h)
  (void)word, (void)sc;
  hi2 = lo2 = 0u;
#else
  const float x0 = bf16_lo(word) * sc, x1 = bf16_hi(word) * sc;
  const __nv_fp8x2_storage_t h2 = __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, __NV_E4M3);
  const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(h2, __NV_E4M3);
  const float2 hf = __half22float2(*reinterpret_cast<const __half2*>(&hr));
  const __nv_fp8x2_storage_t l2 =
      __nv_cvt_float2_to_fp8x2(make_float2(16.0f * (x0 - hf.x), 16.0f * (x1 - hf.y)), __NV_SATFINITE, __NV_E4M3);
  hi2 = h2;
  lo2 = l2;
#endif
}

// Every block of kTmaThreads threads: the distinct experts in first-occurrence order (sh.uni, sh.nu) and,
// per (distinct expert, token), the token's slots routed there (sh.slots: a token may name an expert in
// several slots). Ids outside [0, E) (SGLang's expert-parallel -1) are no expert: their pairs are skipped
// here and get h = 0 from the slice sum. Ends with a block barrier. Sh: TmaShared, or a struct with the
// same routing fields (the wgmma probe's, examples/wgmma).
template <class Sh>
SMALLM_DEV void route(const int32_t* topk_ids, int T, int K, int E, Sh& sh) {
  const int tid = threadIdx.x, P = T * K, lane = tid % 32, warp = tid / 32;
  for (int e = tid; e < E; e += kTmaThreads) sh.first[e] = 0x7fffffff;
  for (int p = tid; p < P; p += kTmaThreads) {
    const int id = topk_ids[p];
    sh.ids[p] = id >= 0 && id < E ? id : -1;
  }
  for (int i = tid; i < kTmaMaxPairs * kTmaMaxTokens; i += kTmaThreads) sh.slots[i] = 0u;
  __syncthreads();
  for (int p = tid; p < P; p += kTmaThreads)
    if (sh.ids[p] >= 0) atomicMin(&sh.first[sh.ids[p]], p);
  __syncthreads();
  for (int c = warp; c * 32 < P; c += kTmaThreads / 32) {
    const int p = c * 32 + lane;
    const unsigned m = __ballot_sync(~0u, p < P && sh.ids[p] >= 0 && sh.first[sh.ids[p]] == p);
    if (lane == 0) sh.mask[c] = m;
  }
  __syncthreads();
  int rank_of[2] = {-1, -1};  // distinct index of the first pairs tid, tid + kTmaThreads
  for (int r = 0; r < 2; ++r) {
    const int p = tid + r * kTmaThreads;
    if (p < P && sh.ids[p] >= 0 && sh.first[sh.ids[p]] == p) {
      int before = __popc(sh.mask[p / 32] & ((1u << (p % 32)) - 1u));
      for (int c = 0; c < p / 32; ++c) before += __popc(sh.mask[c]);
      rank_of[r] = before;
      sh.uni[before] = sh.ids[p];
    }
  }
  if (tid == 0) {
    int n = 0;
    for (int c = 0; c * 32 < P; ++c) n += __popc(sh.mask[c]);
    sh.nu = n;
  }
  __syncthreads();
  for (int r = 0; r < 2; ++r)
    if (rank_of[r] >= 0) sh.first[sh.ids[tid + r * kTmaThreads]] = rank_of[r];  // expert -> distinct index
  __syncthreads();
  for (int p = tid; p < P; p += kTmaThreads)
    if (sh.ids[p] >= 0) atomicOr(&sh.slots[sh.first[sh.ids[p]] * T + p / K], 1u << (p % K));
  __syncthreads();
}

}  // namespace tma

namespace tma {

// The warpgroup's n-th gate/up job (job0 + n G) into stage n % kTmaStages (one thread): the chunk's
// eight W13 boxes and its sixteen block scales (two 16-byte copies) on the stage's barrier.
SMALLM_DEV void issue_gateup(const CUtensorMap* map, const MoeArgs& a, const TmaShared& sh, int wg, uint32_t ring,
                             int job, int st, int S, int C) {
  constexpr int kBlocks = kTmaSlice / 128;
  const int u = job / (C * S), c = (job / S) % C, s = job % S, e = sh.uni[u];
  const uint32_t bar = saddr(&sh.full[wg][st]), dst = ring + st * kTmaJobBytes;
  mbar_expect(bar, kTmaJobBytes + 32);
  const int rg = e * 2 * a.I + 32 * c;  // the chunk's first gate row (E 2I < 2^31: the launcher checks)
#pragma unroll
  for (int kb = 0; kb < kBlocks; ++kb)
#pragma unroll
    for (int h = 0; h < 2; ++h)  // gate box, then up box
      tile_copy(dst + kb * 8192 + h * 4096, map, s * kTmaSlice + 128 * kb, rg + h * a.I, bar);
  const float* sg = static_cast<const float*>(a.s13) + ((size_t)e * (2 * a.I / 128) + (32 * c) / 128) * (a.D / 128) +
                    s * kBlocks;
  const float* su = sg + (size_t)(a.I / 128) * (a.D / 128);
  bulk_copy(saddr(&sh.scale[wg][st][0]), sg, 16, bar);
  bulk_copy(saddr(&sh.scale[wg][st][4]), su, 16, bar);
}

// Each token's scale of x over slice s into sh.xinv[wg]. The warpgroup's 128 threads; ends with its
// barrier. The kernels call it before their first weight copies and x_parts after them: x read behind
// the whole grid's first copies arrived ~6 us after the routing at 1 token ("h200-mxtma" run 5).
SMALLM_DEV void x_scales(const MoeArgs& a, TmaShared& sh, int wg, int s) {
  const int wt = threadIdx.x % 128, w = wt / 32, lane = wt % 32;
  for (int t = w; t < a.T; t += 4) {
    const float xinv = xinv_of(warp_absmax(a.x + (size_t)t * a.D + (size_t)s * kTmaSlice, kTmaSlice, lane));
    if (lane == 0) sh.xinv[wg][t] = xinv;
  }
  wg_barrier(wg);
}
// x over slice s as the gate/up's B, after x_scales: the e4m3 hi and lo parts, k-step st at st 2 NB, 16-k
// group kc at + kc NB, column n at (n / 8) 128 + (n % 8) 16; columns from 2T on zero. The warpgroup's 128
// threads; ends with its barrier.
template <int NT>
SMALLM_DEV void x_parts(const MoeArgs& a, TmaShared& sh, int wg, int s, uint8_t* bx) {
  constexpr int NB = NT * 128;
  const int wt = threadIdx.x % 128;
  for (int un = wt; un < 4 * NT * (kTmaSlice / 16); un += 128) {  // (token t < 4 NT, 16 k of the slice)
    const int t = un / (kTmaSlice / 16), kl = 16 * (un % (kTmaSlice / 16));
    uint4 hi = make_uint4(0, 0, 0, 0), lo = hi;
    if (t < a.T) {
      const float sc = 1.0f / sh.xinv[wg][t];
      const uint4* xr = reinterpret_cast<const uint4*>(a.x + (size_t)t * a.D + s * kTmaSlice + kl);
      const uint4 v0 = xr[0], v1 = xr[1];
      const uint32_t ww[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
      uint32_t hw[4], lw[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t h0, l0, h1, l1;
        split_pair(ww[2 * i], sc, h0, l0);
        split_pair(ww[2 * i + 1], sc, h1, l1);
        hw[i] = h0 | (h1 << 16);
        lw[i] = l0 | (l1 << 16);
      }
      hi = make_uint4(hw[0], hw[1], hw[2], hw[3]);
      lo = make_uint4(lw[0], lw[1], lw[2], lw[3]);
    }
    uint8_t* at = bx + (kl / 32) * 2 * NB + ((kl / 16) % 2) * NB;
    *reinterpret_cast<uint4*>(at + ((2 * t) / 8) * 128 + ((2 * t) % 8) * 16) = hi;
    *reinterpret_cast<uint4*>(at + ((2 * t + 1) / 8) * 128 + ((2 * t + 1) % 8) * 16) = lo;
  }
  fence_proxy_async();  // generic stores, read by wgmma
  wg_barrier(wg);
}

// One gate/up job's sums over its slice, block scales applied (tot: rows 16 w + g and + 8 of A, columns
// 2t (hi) and 2t + 1 (lo) of the lane's tokens t = 4 j + q). kStepSums false: one accumulator per
// 128-wide K block, one commit and wait; true: a fresh accumulator per 32-k step, added in fp32, one
// wait per K block. stage: the job's W13 in shared memory; scale: its eight block scales.
template <int NT, bool kStepSums>
SMALLM_DEV void gateup_sums(float (&tot)[4 * NT], uint32_t stage, uint32_t bbase, const float* scale, int half) {
  constexpr int NB = NT * 128, kBlocks = kTmaSlice / 128;
#pragma unroll
  for (int i = 0; i < 4 * NT; ++i) tot[i] = 0.0f;
  if constexpr (!kStepSums) {
    float acc[kBlocks][4 * NT];
    mma_fence();
#pragma unroll
    for (int kb = 0; kb < kBlocks; ++kb)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint64_t ad = desc_sw128(stage + kb * 8192 + 32 * k);
        const uint64_t bd = desc_plain(bbase + (4 * kb + k) * 2 * NB, NB, 128);
        if (k == 0) {
          mma<NT, false>(acc[kb], ad, bd);
        } else {
          mma<NT, true>(acc[kb], ad, bd);
        }
      }
    mma_commit();
    mma_wait0();
#pragma unroll
    for (int kb = 0; kb < kBlocks; ++kb) hold(acc[kb]);
#pragma unroll
    for (int kb = 0; kb < kBlocks; ++kb) {
      const float sc = scale[4 * half + kb];
#pragma unroll
      for (int i = 0; i < 4 * NT; ++i) tot[i] = fmaf(acc[kb][i], sc, tot[i]);
    }
  } else {
#pragma unroll
    for (int kb = 0; kb < kBlocks; ++kb) {
      float acc[4][4 * NT];
      mma_fence();
#pragma unroll
      for (int k = 0; k < 4; ++k)
        mma<NT, false>(acc[k], desc_sw128(stage + kb * 8192 + 32 * k), desc_plain(bbase + (4 * kb + k) * 2 * NB, NB, 128));
      mma_commit();
      mma_wait0();
#pragma unroll
      for (int k = 0; k < 4; ++k) hold(acc[k]);
      const float sc = scale[4 * half + kb];
#pragma unroll
      for (int i = 0; i < 4 * NT; ++i) tot[i] = fmaf((acc[0][i] + acc[1][i]) + (acc[2][i] + acc[3][i]), sc, tot[i]);
    }
  }
}

// The job's partial gate and up sums of slice s, for each slot routed to expert u, into part
// ([S][pairs][2I] fp32).
template <int NT>
SMALLM_DEV void write_partials(const float (&tot)[4 * NT], const MoeArgs& a, const TmaShared& sh, float* part, int wg,
                               int u, int c, int s) {
  const int wt = threadIdx.x % 128, w = wt / 32, lane = wt % 32, g = lane / 4, q = lane % 4, P = a.T * a.K;
  // d: rows 16 w + g and + 8 of A (0-31: gate rows 32 c.., 32-63: up rows I + 32 c..), columns 2t, 2t + 1
  const int r0 = 16 * w + g, i0 = (r0 < 32 ? 0 : a.I - 32) + 32 * c + r0;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int t = 4 * j + q;
    unsigned m = t < a.T ? sh.slots[u * a.T + t] : 0u;  // every slot of token t naming this expert
    if (m) {
      const float xi = sh.xinv[wg][t];
      const float gv = (tot[4 * j] + 0.0625f * tot[4 * j + 1]) * xi, v = (tot[4 * j + 2] + 0.0625f * tot[4 * j + 3]) * xi;
      for (; m; m &= m - 1u) {
        float* dst = part + ((size_t)s * P + t * a.K + (__ffs(m) - 1)) * 2 * a.I;
        dst[i0] = gv;
        dst[i0 + 8] = v;
      }
    }
  }
}

}  // namespace tma

// The gate/up (see the top of this file). Partial sums into a.h + pairs I; grid: G = 2 gridDim.x
// warpgroups, a multiple of the slices S = D / 512 (the launcher checks this and every other limit).
template <int NT, bool kStepSums>
__global__ void __launch_bounds__(kTmaThreads, 1)
    smallm_gateup_tma_kernel(const __grid_constant__ CUtensorMap w13_map, MoeArgs a) {
#if defined(SMALLM_SM90_TMA)
  using namespace tma;
  grid_dependents_launch();  // the slice sum may launch now (it waits for this grid before reading)
  constexpr int kXBytes = kTmaSlice * 8 * NT;
  extern __shared__ __align__(128) uint8_t smem[];
  TmaShared& sh = *reinterpret_cast<TmaShared*>(smem);
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128, w = wt / 32;
  SMALLM_TL_ENTRY(0);  // timeline marks (examples/timeline; empty in the package): thread 0, warpgroup 0's
  const uint32_t base0 = (saddr(smem) + (uint32_t)sizeof(TmaShared) + 1023u) & ~1023u;
  const uint32_t ring = base0 + (uint32_t)(wg * kTmaStages * kTmaJobBytes);
  uint8_t* bx = smem + (base0 - saddr(smem)) + kTmaWarpgroups * kTmaStages * kTmaJobBytes + wg * kXBytes;
  if (wt == 0) {
    for (int i = 0; i < kTmaStages; ++i)
      mbar_init(saddr(&sh.full[wg][i]));
    mbar_init_fence();
  }
  route(a.topk_ids, a.T, a.K, a.E, sh);  // its block barriers also publish the stage barriers' initialisation
  const int P = a.T * a.K, S = a.D / kTmaSlice, C = a.I / 32, G = gridDim.x * kTmaWarpgroups;
  const int njobs = sh.nu * C * S, job0 = blockIdx.x * kTmaWarpgroups + wg, s = job0 % S;
  float* part = a.h + (size_t)P * a.I;  // [S][P][2I]
  SMALLM_TL_MARK(0, kTlRouting);
  x_scales(a, sh, wg, s);
  if (wt == 0)
    for (int n = 0; n < kTmaStages && job0 + n * G < njobs; ++n) issue_gateup(&w13_map, a, sh, wg, ring, job0 + n * G, n, S, C);
  x_parts<NT>(a, sh, wg, s, bx);
  SMALLM_TL_MARK(0, kTlReady);
  const uint32_t bbase = saddr(bx);
  for (int n = 0;; ++n) {
    const int job = job0 + n * G;
    if (job >= njobs) break;
    const int st = n % kTmaStages, u = job / (C * S), c = (job / S) % C;
    mbar_wait(saddr(&sh.full[wg][st]), (n / kTmaStages) & 1);
    float tot[4 * NT];
    gateup_sums<NT, kStepSums>(tot, ring + st * kTmaJobBytes, bbase, sh.scale[wg][st], w >> 1);
    wg_barrier(wg);  // every warp has waited for the MMAs reading this stage and read its scales: refill
    if (wt == 0 && job + kTmaStages * G < njobs) issue_gateup(&w13_map, a, sh, wg, ring, job + kTmaStages * G, st, S, C);
    write_partials<NT>(tot, a, sh, part, wg, u, c, s);
    SMALLM_TL_MARK(0, kTlJob0 + (n < 5 ? n : 5));
  }
  SMALLM_TL_EXIT(0);
#endif
}

// h[p][i] = silu(sum of the slices' gate) * (sum of their up), slices in order; 0 for a pair whose id
// is no expert (the gate/up wrote no partials for it).
__global__ void __launch_bounds__(256) smallm_tma_slice_sum_kernel(MoeArgs a) {
  grid_dependents_launch();  // the down may launch now: it loads W2, then waits for this grid
  grid_dependency_wait();    // the gate/up's partial sums written
  const int P = a.T * a.K, S = a.D / kTmaSlice;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= P * a.I) return;
  const int p = i / a.I, j = i % a.I, id = a.topk_ids[p];
  if (id < 0 || id >= a.E) {
    a.h[i] = 0.0f;
    return;
  }
  const float* part = a.h + (size_t)P * a.I;
  float gs = 0.0f, us = 0.0f;
  for (int s = 0; s < S; ++s) {
    const float* r = part + ((size_t)s * P + p) * 2 * a.I;
    gs += r[j];
    us += r[a.I + j];
  }
  a.h[i] = silu(gs) * us;
}


// ------------------------------------------------------------------ the MoE in one kernel (SMALLM_GATEUP_TMA=3)
// The gate/up above and the down in one persistent kernel, so that the down's W2 streams right behind
// W13 through the same stages instead of waiting for a second kernel's blocks to find free SMs ("h200-tma"
// runs 3-4: the down's blocks need a whole SM and start only when the gate/up's blocks leave).
//   - A warpgroup takes its gate/up jobs (as above, fp32 per 32-k step), then its down jobs. A down job
//     is (64 rows r of D, expert group gi): it streams the W2 tiles (64 rows x I, boxes of 128 k x 64
//     rows, 128-byte swizzle) of the distinct experts u = gi, gi + NG, ... (NG groups: the warpgroups
//     per row block), one expert per stage, and keeps each token's weighted sum over them in registers.
//     W2 is requested as soon as a stage is free, also while the warpgroup still runs gate/up jobs; only
//     an expert's h waits for its gate/up.
//   - Dependencies by counters in the workspace (MoeArgs::sync from kSyncTok; each goes back to 0 by
//     the call's end). A chunk's S slice jobs count on chunk[u][c] (one thread, after a barrier and a
//     fence: the warpgroup goes on, and looks at the count one job later); the last of them sums the
//     slices in order (deterministic), writes h = silu(gate) * up as the down's B operand (per token three
//     e4m3 parts, hi + mid / 16 + lo / 256 over a power-of-two scale per 32 values of I, in columns
//     4t..4t+2, column 4t+3 zero) and counts on ready[u] (reset by the last row block's end: fin). An
//     expert's h (and its scales) is copied into a down stage once ready[u] reaches C = I / 32, only
//     after the warpgroup's own gate/up jobs are done, so every wait is for work that needs no wait
//     (thread kH waits and copies, thread 0 issues the tiles, thread kBook counts). A down job writes
//     its tokens' sums for its rows (fp32, [NG][T][D] in MoeArgs::y) and counts on done[r]; the last of
//     row block r's jobs (one per group that has an expert) adds the groups in order and writes out.
//   - Every block must be resident at once: the grid is one block per SM (gateup_tma_grid) and the
//     launcher asks for a cooperative launch, which fails rather than starting fewer.
//   - Measured ("h200-tma" runs 5-8): correct on every selftest check and memcheck, errors 6.8-8.1e-4
//     (wide_scales 9.05e-4), and 1.8-2.9x slower than the default two kernels: its jobs wait on round
//     trips, and its gate/up part alone takes twice the gate/up kernel above (run 7). An experiment.
//   - Down MMAs: m64nN k32 with N = 8 NT2 columns (NT2 = ceil(T / 2): 4 per token), a fresh accumulator
//     per 32-k step (each step has its own h scale), two steps per wait; rows 16 w + g and + 8 of the
//     job's 64, columns 8j + 2q, + 1: lanes with even q hold token 2j + q/2's hi and mid, odd q its lo.
constexpr int kTmaDownRows = 64;
constexpr int kTmaFusedMaxTokens = 10;  // N <= 40 down columns
constexpr int kTmaFusedMaxInter = 256;  // an expert's W2 tile (64 x I), h (I x N) and scales in one stage

// Expert groups per row block: the warpgroups of a grid of `blocks` over the D / 64 row blocks (>= 1).
__host__ __device__ inline int tma_down_groups(int blocks, int D) {
  const int g = blocks * kTmaWarpgroups / (D / kTmaDownRows);
  return g > 0 ? g : 1;
}
// Workspace of the fused kernel. Floats of MoeArgs::y: the down groups' sums [NG][T][D], then h as B
// tiles (bytes, [u][I][N] per distinct expert), then h's scales [u][C][2 NT2]; words of MoeArgs::sync
// from kSyncTok: chunk [P][C], ready [P], done [D / 64], fin.
inline long tma_fused_y_words(int T, int K, int D, int I, int groups) {
  const long P = (long)T * K, nt2 = (T + 1) / 2;
  return (long)groups * T * D + P * I * 8 * nt2 / 4 + P * (I / 32) * 2 * nt2;
}
inline long tma_fused_sync_words(int T, int K, int D, int I) {
  const long P = (long)T * K;
  return P * (I / 32) + P + D / kTmaDownRows + 1;
}

namespace tma {

// Generic-proxy global stores ordered with later async-proxy (bulk copy) accesses, and the reverse.
SMALLM_DEV void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// v (|v| < 256) as three e4m3 parts, v ~ b0 + b1 / 16 + b2 / 256 (12 significant bits).
SMALLM_DEV void split3(float v, uint32_t& b0, uint32_t& b1, uint32_t& b2) {
#if !defined(SMALLM_SM90_TMA)
  (void)v;
  b0 = b1 = b2 = 0u;
#else
  auto part = [](float x, uint32_t& b) {
    const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    b = q;
    const __half_raw hr = __nv_cvt_fp8_to_halfraw(q, __NV_E4M3);
    return 16.0f * (x - __half2float(*reinterpret_cast<const __half*>(&hr)));
  };
  part(part(part(v, b0), b1), b2);
#endif
}

// The last of chunk (u, c)'s slice jobs: h over I values 32 c .. 32 c + 31 (lane i) for the expert's
// tokens, summed over the slices in order, as the down's B bytes and scales (every column of the chunk's
// k-step written, tokens not routed to u and columns from T on zero).
template <int NT2>
SMALLM_DEV void chunk_h(const MoeArgs& a, const TmaShared& sh, const float* part, uint8_t* hb, float* hs, int u, int c,
                        int S) {
  constexpr int NB2 = NT2 * 128;
  const int wt = threadIdx.x % 128, w = wt / 32, lane = wt % 32, P = a.T * a.K, C = a.I / 32;
  uint8_t* at = hb + (size_t)u * a.I * 8 * NT2 + (size_t)c * 2 * NB2 + (lane / 16) * NB2 + lane % 16;
  for (int t = w; t < 2 * NT2; t += 4) {
    const unsigned m = t < a.T ? sh.slots[u * a.T + t] : 0u;  // the same for the whole warp
    float h = 0.0f;
    if (m) {
      const float* r = part + (size_t)(t * a.K + __ffs(m) - 1) * 2 * a.I + 32 * c + lane;
      float gs = 0.0f, us = 0.0f;
      for (int s = 0; s < S; ++s) {
        gs += __ldcg(r + (size_t)s * P * 2 * a.I);
        us += __ldcg(r + (size_t)s * P * 2 * a.I + a.I);
      }
      h = silu(gs) * us;
    }
    const float mx = warp_max(fabsf(h));  // every lane shuffles, whether or not the token takes u
    const float hinv = m ? xinv_of(mx) : 0.0f;
    uint32_t b0 = 0u, b1 = 0u, b2 = 0u;
    if (m) split3(h / hinv, b0, b1, b2);
    uint8_t* col = at + (t / 2) * 128 + (t % 2) * 64;  // column 4t: (4t / 8) 128 + (4t % 8) 16
    col[0] = (uint8_t)b0;
    col[16] = (uint8_t)b1;
    col[32] = (uint8_t)b2;
    col[48] = 0;
    if (lane == 0) hs[((size_t)u * C + c) * 2 * NT2 + t] = hinv;
  }
}

}  // namespace tma

template <int NT2>
__global__ void __launch_bounds__(kTmaThreads, 1)
    smallm_moe_tma_kernel(const __grid_constant__ CUtensorMap w13_map, const __grid_constant__ CUtensorMap w2_map,
                          MoeArgs a) {
#if defined(SMALLM_SM90_TMA)
  using namespace tma;
  constexpr int NT = (NT2 + 1) / 2, kXBytes = kTmaSlice * 8 * NT, NB2 = NT2 * 128;
  extern __shared__ __align__(128) uint8_t smem[];
  TmaShared& sh = *reinterpret_cast<TmaShared*>(smem);
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128, w = wt / 32, lane = wt % 32, g = lane / 4, q = lane % 4;
  const uint32_t base0 = (saddr(smem) + (uint32_t)sizeof(TmaShared) + 1023u) & ~1023u;
  const uint32_t ring = base0 + (uint32_t)(wg * kTmaStages * kTmaJobBytes);
  uint8_t* const gen = smem - saddr(smem);  // shared address -> generic pointer: gen + address
  uint8_t* bx = gen + base0 + kTmaWarpgroups * kTmaStages * kTmaJobBytes + wg * kXBytes;
  // timeline marks (examples/timeline; empty in the package): thread 0, warpgroup 0's, as kernel 0 for
  // the gate/up jobs and kernel 1 from the first down step on
  SMALLM_TL_ENTRY(0);
  if (wt == 0) {
    for (int i = 0; i < kTmaStages; ++i)
      mbar_init(saddr(&sh.full[wg][i]));
    mbar_init_fence();
  }
  route(a.topk_ids, a.T, a.K, a.E, sh);
  SMALLM_TL_MARK(0, kTlRouting);
  const int P = a.T * a.K, S = a.D / kTmaSlice, C = a.I / 32, G = gridDim.x * kTmaWarpgroups, R = a.D / kTmaDownRows;
  const int NG = tma_down_groups(gridDim.x, a.D);
  const int nu = sh.nu, job0 = blockIdx.x * kTmaWarpgroups + wg, s = job0 % S;
  const int NGe = NG < nu ? NG : nu;  // the groups with an expert (the others' jobs have no step)
  if (nu == 0) {  // no valid expert: every output row is zero
    for (int i = blockIdx.x * kTmaThreads + tid; i < a.T * a.D; i += gridDim.x * kTmaThreads) a.out[i] = 0;
    return;
  }
  for (int p = tid; p < P; p += kTmaThreads) sh.tw[p] = a.topk_w[p];  // both warpgroups' threads write, any reads
  __syncthreads();
  const int ngu_all = nu * C * S;
  const int ngu = job0 < ngu_all ? (ngu_all - job0 + G - 1) / G : 0;
  // down jobs d = job0, job0 + G, ... < R NG: rows r = d / NG, experts gi = d % NG, gi + NG, ... < nu
  auto steps_of = [&](int d) { return d % NG < nu ? (nu - d % NG + NG - 1) / NG : 0; };
  int ndn = 0;
  for (int d = job0; d < R * NG; d += G) ndn += steps_of(d);
  const int total = ngu + ndn;
  float* part = a.h + (size_t)P * a.I;  // [S][P][2I]
  float* ysum = a.y;                    // [NG][T][D]
  uint8_t* hb = reinterpret_cast<uint8_t*>(a.y + (size_t)NG * a.T * a.D);
  const uint32_t hbytes = a.I * 8 * NT2, sbytes = C * 8 * NT2, wbytes = a.I * kTmaDownRows;
  float* hs = reinterpret_cast<float*>(hb + (size_t)P * hbytes);
  unsigned* chunk = a.sync + kSyncTok;
  unsigned* ready = chunk + P * C;
  unsigned* done = ready + P;
  unsigned* fin = done + R;  // row blocks finished
  // the n-th of the warpgroup's jobs from ngu on: down job d, its i-th expert u
  auto down_step = [&](int n, int& d, int& i, int& u) {
    int rest = n - ngu;
    for (d = job0; rest >= steps_of(d); d += G) rest -= steps_of(d);
    i = rest;
    u = d % NG + NG * rest;
  };
  auto issue = [&](int n) {  // job n into stage n % kTmaStages (thread wt == 0); a down step's h follows
    if (n >= total) return;
    const int st = n % kTmaStages;
    if (n < ngu) {
      issue_gateup(&w13_map, a, sh, wg, ring, job0 + n * G, st, S, C);
      return;
    }
    int d, i, u;
    down_step(n, d, i, u);
    const uint32_t bar = saddr(&sh.full[wg][st]), dst = ring + st * kTmaJobBytes;
    mbar_expect(bar, wbytes + hbytes + sbytes);
    for (int kb = 0; kb < a.I / 128; ++kb)
      tile_copy(dst + kb * 8192, &w2_map, 128 * kb, sh.uni[u] * a.D + kTmaDownRows * (d / NG), bar);
  };
  // Down step n's h and scales (thread kH) into its stage once the expert's h is whole (ready[u] = C);
  // false where !wait and it is not. The stage's barrier may get these bytes before thread 0's
  // expect for the step (a transaction count may go below zero within a phase).
  auto issue_h = [&](int n, bool wait) {
    int d, i, u;
    down_step(n, d, i, u);
    if (!wait && load_acquire(&ready[u]) < (unsigned)C) return false;
    while (load_acquire(&ready[u]) < (unsigned)C) {
    }
    fence_proxy_async_global();
    const int st = n % kTmaStages;
    const uint32_t bar = saddr(&sh.full[wg][st]), dst = ring + st * kTmaJobBytes + wbytes;
    bulk_copy(dst, hb + (size_t)u * hbytes, hbytes, bar);
    bulk_copy(dst + hbytes, hs + (size_t)u * C * 2 * NT2, sbytes, bar);
    return true;
  };
  // The counts and their fences are thread kBook's, not thread 0's: a fence waits for the fencing
  // thread's bulk copies in flight ("h200-tma" run 7), and thread 0 issues them. Its count on
  // chunk[pu][pc] from the previous gate/up job is looked at one job later: where it was the chunk's
  // last, the warpgroup sums the chunk into h and counts on ready[pu].
  constexpr int kBook = 32, kH = 64;
  unsigned pend = 0u;
  int pu = -1, pc = 0;
  auto settle = [&]() {
    if (wt == kBook) {
      const bool last = pu >= 0 && pend == (unsigned)(S - 1);
      if (last) {
        atomicExch(&chunk[pu * C + pc], 0u);
        __threadfence();  // acquire the other slices' partial sums (the warpgroup reads them after the barrier)
      }
      sh.last[wg] = last ? pu * C + pc : -1;
      pu = -1;
    }
    wg_barrier(wg);
    const int lc = sh.last[wg];
    if (lc >= 0) {
      chunk_h<NT2>(a, sh, part, hb, hs, lc / C, lc % C, S);
      fence_proxy_async_global();
      wg_barrier(wg);
      if (wt == kBook) {
        __threadfence();
        atomicAdd(&ready[lc / C], 1u);
      }
    }
  };
  if (ngu > 0) x_scales(a, sh, wg, s);
  if (wt == 0)
    for (int n = 0; n < kTmaStages; ++n) issue(n);
  if (ngu > 0) x_parts<NT>(a, sh, wg, s, bx);
  SMALLM_TL_MARK(0, kTlReady);
  const uint32_t bbase = saddr(bx);
  int hnext = ngu;  // (thread kH) the first down step whose h is not requested yet
  const float w0 = (q & 1) ? 1.0f / 256.0f : 1.0f, w1 = (q & 1) ? 0.0f : 1.0f / 16.0f;
  float y0[NT2], y1[NT2];  // a down job's sums: rows 16 w + g and + 8, token 2j + q/2 (this lane's columns)
  for (int n = 0; n < total; ++n) {
    const int st = n % kTmaStages;
    const uint32_t stage = ring + st * kTmaJobBytes;
    if (n < ngu) {  // a gate/up job
      const int job = job0 + n * G, u = job / (C * S), c = (job / S) % C;
      mbar_wait(saddr(&sh.full[wg][st]), (n / kTmaStages) & 1);
      float tot[4 * NT];
      gateup_sums<NT, true>(tot, stage, bbase, sh.scale[wg][st], w >> 1);
      wg_barrier(wg);
      if (wt == 0) issue(n + kTmaStages);
      write_partials<NT>(tot, a, sh, part, wg, u, c, s);
      settle();  // the previous job's count
      wg_barrier(wg);
      if (wt == kBook) {
        __threadfence();  // the warpgroup's partial sums (ordered before it by the barrier)
        pend = atomicAdd(&chunk[u * C + c], 1u);
        pu = u;
        pc = c;
      }
      if (n == ngu - 1) settle();  // the last one's, before any wait for h
      SMALLM_TL_MARK(0, kTlJob0 + (n < 5 ? n : 5));
      continue;
    }
    // a down step: expert u of job d
    int d, i, u;
    down_step(n, d, i, u);
    if (n == ngu) {
      SMALLM_TL_EXIT(0);
      SMALLM_TL_ENTRY(1);
    }
    if (i == 0) {
#pragma unroll
      for (int j = 0; j < NT2; ++j) y0[j] = y1[j] = 0.0f;
    }
    if (wt == kH) {
      for (; hnext <= n; ++hnext) issue_h(hnext, true);
      if (hnext == n + 1 && hnext < total && issue_h(hnext, false)) ++hnext;  // the next step's h, if ready
    }
    mbar_wait(saddr(&sh.full[wg][st]), (n / kTmaStages) & 1);
    if (n == ngu) SMALLM_TL_MARK(1, kTlHReady);  // the first step's W2 and h arrived
    const int r = d / NG;
    const float* hsc = reinterpret_cast<const float*>(gen + stage + wbytes + hbytes);  // [C][2 NT2]
    const float* s2 = static_cast<const float*>(a.s2) +
                      ((size_t)sh.uni[u] * (a.D / 128) + (kTmaDownRows * r) / 128) * (a.I / 128);
    float wsum[NT2];  // token 2j + q/2's routing weights on expert u (0 where it does not take it)
#pragma unroll
    for (int j = 0; j < NT2; ++j) {
      const int t = 2 * j + (q >> 1);
      float ws = 0.0f;
      for (unsigned m = t < a.T ? sh.slots[u * a.T + t] : 0u; m; m &= m - 1u) ws += sh.tw[t * a.K + __ffs(m) - 1];
      wsum[j] = ws;
    }
    for (int kb = 0; kb < a.I / 128; ++kb) {
      const float sc2 = __ldg(s2 + kb);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float acc[2][4 * NT2];
        mma_fence();
#pragma unroll
        for (int k2 = 0; k2 < 2; ++k2) {
          const int k = 2 * half + k2;
          mma<NT2, false>(acc[k2], desc_sw128(stage + kb * 8192 + 32 * k),
                          desc_plain(stage + wbytes + (4 * kb + k) * 2 * NB2, NB2, 128));
        }
        mma_commit();
        mma_wait0();
        hold(acc[0]);
        hold(acc[1]);
#pragma unroll
        for (int k2 = 0; k2 < 2; ++k2) {
          const float* hk = hsc + (4 * kb + 2 * half + k2) * 2 * NT2;
#pragma unroll
          for (int j = 0; j < NT2; ++j) {
            const float f = hk[2 * j + (q >> 1)] * sc2 * wsum[j];
            y0[j] = fmaf(f, fmaf(acc[k2][4 * j], w0, acc[k2][4 * j + 1] * w1), y0[j]);
            y1[j] = fmaf(f, fmaf(acc[k2][4 * j + 2], w0, acc[k2][4 * j + 3] * w1), y1[j]);
          }
        }
      }
    }
    wg_barrier(wg);  // every warp has waited for the MMAs reading this stage and read its scales: refill
    if (wt == 0) issue(n + kTmaStages);
    if (n == ngu) SMALLM_TL_MARK(1, kTlJob0Mma);
    if (i + 1 < steps_of(d)) continue;  // the job goes on
    SMALLM_TL_MARK(1, kTlDownJobs);
    // the job's end: its group's sums for rows r, then the row block's count
    const int row = kTmaDownRows * r + 16 * w + g, gi = d % NG;
#pragma unroll
    for (int j = 0; j < NT2; ++j) {
      const float v0 = y0[j] + shfl_xor(y0[j], 1), v1 = y1[j] + shfl_xor(y1[j], 1);  // hi + mid, and lo
      const int t = 2 * j + (q >> 1);
      if ((q & 1) == 0 && t < a.T) {
        float* dst = ysum + ((size_t)gi * a.T + t) * a.D + row;
        dst[0] = v0;
        dst[8] = v1;
      }
    }
    wg_barrier(wg);
    if (wt == kBook) {
      __threadfence();
      const bool last = atomicAdd(&done[r], 1u) == (unsigned)(NGe - 1);
      if (last) {
        atomicExch(&done[r], 0u);
        __threadfence();
        // the last row block: every down step has taken its h, so the experts' ready counts go back to 0
        if (atomicAdd(fin, 1u) == (unsigned)(R - 1)) {
          for (int v = 0; v < nu; ++v) atomicExch(&ready[v], 0u);
          atomicExch(fin, 0u);
        }
      }
      sh.last[wg] = last;
    }
    wg_barrier(wg);
    if (sh.last[wg]) {  // every group's sums for rows r: out = out_scale * their sum, groups in order
      for (int idx = wt; idx < a.T * kTmaDownRows; idx += 128) {
        const int t = idx / kTmaDownRows, rr = kTmaDownRows * r + idx % kTmaDownRows;
        float sum = 0.0f;
        for (int k = 0; k < NGe; ++k) sum += __ldcg(ysum + ((size_t)k * a.T + t) * a.D + rr);
        a.out[(size_t)t * a.D + rr] = f32_to_bf16(a.out_scale * sum);
      }
    }
  }
  if (total == ngu) SMALLM_TL_EXIT(0);  // no down step
  SMALLM_TL_EXIT(1);
#else
  (void)a;
#endif
}

}  // namespace smallm

#endif  // SMALLM_CUDA
