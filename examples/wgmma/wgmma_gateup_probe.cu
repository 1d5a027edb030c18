// wgmma_gateup_probe.cu: the FP8 gate/up on the H200's FP8 tensor cores (`wgmma`), a probe.
//
// Why: the README had the package's tensor-core gate/up bound by instruction issue from 8 tokens, not
// by memory: `mma.sync` on sm_90 takes only f16, so every e4m3 weight is converted first. At 17 tokens
// (Qwen3.5 TP4) its last block ends at ~105 us for ~310 MB of W13 (~65 us at the HBM's rate;
// examples/results "h200-ab14" run 1). This probe tested that (run 1: as fast with 2.4-4x fewer
// instructions per byte, so not issue). sm_90's FP8 tensor cores are reached through `wgmma` only,
// whose A operand may sit in registers: here the weights go from global memory straight into A's
// registers (no conversion, no shared memory), x is the B operand in shared memory, split exactly into
// two e4m3 parts per value (hi = e4m3(x s), lo = e4m3(16 (x s - hi)), s a power of two per token that
// puts its largest |x| in [128, 256)), hi and lo of token t as B's columns 2t and 2t + 1.
//
// Design: grid = one block of two warpgroups per SM; every block routes the pairs (distinct experts in
// first-occurrence order, each pair's slot), issues its first jobs' loads, then stages x (hi/lo, e4m3,
// in wgmma's no-swizzle K-major layout). A warpgroup's job is (expert, 32 intermediate rows, a K slice
// of 512): 32 gate rows and the same 32 up rows = 64 A rows (warp w: gate rows 8w..8w+7 of the chunk
// as its A rows g, their up rows as g + 8), 32 KB, every thread 16 loads of 16 bytes; the next job's
// loads are issued before this one computes. Per 128-wide K block: four m64nNk32 wgmmas (N = 8 NT
// columns, NT = ceil(T / 4)) into a fresh accumulator, then the block's two scales (gate, up) on it in
// fp32. K permuted inside each 64-byte piece so that a thread's A fragment of two k-steps is one 16-byte
// load of one row (B staged in the same order). Each job writes its K slice's partial gate and up sums
// of the pairs routed to its expert; a second kernel sums the slices in order (deterministic) and
// writes h = silu(gate) * up.
//
// The check first tests the A register fragment this relies on (a wgmma with A from registers against
// the same A from shared memory, as documented: the same bits, and within 2^-12 of the largest sum of
// an fp64 reference, as FP8 wgmma keeps fewer bits in its sums), then every T against an fp64 reference
// of h, h poisoned before each call and two calls compared bit for bit; then times the gate/up kernel,
// the slice sum, and a read-only kernel over the same W13 bytes (the floor, best of five chunkings),
// with the bench's graph discipline (8 weight copies rotated in one CUDA graph, median of 5 rounds of 20).
//
// Usage: wgmma_gateup_probe [tokens, default 1,4,8,12,16,20] (Qwen3.5 W13: D 4096, E 513, K 11, I 256
// and 128; T <= 20, row-major weights, fp32 128x128 block scales). PROBE_PREFETCH=1: the job after
// those in flight asked into L2 (`cp.async.bulk.prefetch.L2`) as a job's loads are issued.
// PROBE_DEPTH=3: jobs of 64 rows x 256 K (16 KB) with two jobs ahead in three register sets (the loads
// alone streamed at the floor's rate with one job ahead, "h200-ab" runs 3-5, so a job's compute time
// adds to each round trip: ~(latency + compute) / 2 per job with one ahead, / 3 with two).
// PROBE_XPREP=1: x split and laid out once by a small kernel before the gate/up (x_prepare), each block
// bulk-copying the bytes (`cp.async.bulk`, 32 KB pieces) instead of computing them itself.
// PROBE_XSUB=1: each warpgroup stages only its own K slice of x (its jobs all lie in one slice when the
// grid's warpgroups are a multiple of the slices: 132 blocks at depth 2, 128 at depth 3), each token's
// scale taken over that slice. PROBE_SHUFFLE=1: W13 in AITER's (16, 16) shuffled layout (w13_offset;
// the random weights are read as shuffled by the kernel and the reference alike).
// PROBE_MODE (timing diagnostics, h wrong): 1 no MMA (the loads alone, each job's registers consumed),
// 2 one wgmma group and one wait per job instead of one per 128-wide K block, 3 no x staging at all.
// Build: nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 examples/wgmma/wgmma_gateup_probe.cu -o wgp
// Results: examples/results "h200-wgmma" (run 1, 2026-12-02: correct, 3.5-3.8e-4; level with the
// committed gate/up, 1.39-1.72x of the W13 floor at 8-20 tokens) and "h200-wgmma runs 2-5" (the same
// day: x staging per warpgroup slice 6-14 % faster, TP4 1.31-1.45x at 4-20 tokens; the shuffled layout's
// loads alone stream at 1.13-1.16x at 8-20 tokens, with the MMAs no faster than row-major).
#include <cuda.h>  // CUtensorMap (the TMA form); its encoder comes through the runtime's driver entry point
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>


#include "../probe_common.cuh"
#include "../../hip/smallm_gateup_tma.h"  // the package's routing and TMA gate/up

constexpr int kWG = 2;                 // warpgroups per block
constexpr int kThreads = 128 * kWG;
// K per job: 512 with one job ahead (two register sets), 256 with two ahead (three sets: PROBE_DEPTH=3)
__host__ __device__ constexpr int slice_of(int depth) { return depth == 3 ? 256 : 512; }
constexpr int kMaxT = 20, kMaxNT = 5;  // tokens per call; B columns / 8
constexpr int kMaxPairs = 320, kMaxE = 1024;

struct Args {
  const uint8_t* w13;      // [E, 2I, D] e4m3, row-major
  const float* s13;        // [E, 2I/128, D/128]
  const __nv_bfloat16* x;  // [T, D]
  const int* ids;          // [T, K]
  float* part;             // [D / slice][T K][2I]: each slice's gate (i < I) and up (I + i) sums
  float* h;                // [T K][I]
  int T, K, E, D, I;
  int log_s, log_c;        // D / slice = 2^log_s slices, I / 32 = 2^log_c chunks (the host checks)
  int prefetch;            // 1: the job after next into L2 (bulk prefetches) as the next job's loads are issued
  int mode;                // 0 as described; timing diagnostics (their h is wrong): 1 no MMA (each job's loads
                           // only consumed), 2 one wgmma group per job (its first block's scales for all four),
                           // 3 no x staging at all (B and the token scales as they happen to be)
  int xprep;               // 1: x_prepare writes B's bytes (xb) and 1 / s (xinv) once, blocks bulk-copy them
  uint8_t* xb;             // [D * 8 NT] (xprep)
  float* xinv;             // [T] (xprep)
  int shuffle;             // 1: W13 in AITER's (16, 16) shuffled layout (w13_offset), 0 row-major
  const CUtensorMap* tmap;  // host: the W13 tensor map the TMA gate/up gets as a kernel parameter
  int xsub;                // 1: each warpgroup stages only its own K slice of x, with its own per-token scales
                           // (a warpgroup's jobs all share one slice when the grid's warpgroups are a multiple
                           // of the slices: the host checks)
};

// Byte offset of weight (row R of all experts' [E 2I] rows, k) in W13: row-major, or AITER's (16, 16)
// shuffle for e4m3 (16 rows x 32 k tiles of 512 bytes, rows' tiles along k in order; inside a tile the
// first 16 k of its 16 rows, then the second 16, 16 bytes per row).
__host__ __device__ __forceinline__ size_t w13_offset(size_t R, int k, int D, int shuffle) {
  if (!shuffle) return R * D + k;
  return ((R / 16) * (D / 32) + k / 32) * 512 + ((k % 32) / 16) * 256 + (R % 16) * 16 + k % 16;
}

// ------------------------------------------------------------------ wgmma helpers
// The package's, namespace smallm::tma (hip/smallm_gateup_tma.h): shared addresses, transaction barriers, bulk copies, the
// proxy fence, wgmma's fence / commit / wait, the no-swizzle descriptor (start, LBO = the next 16-byte K
// group's core matrices, SBO = the next 8 rows'), and hold (reads of an accumulator kept below the wait).
using namespace smallm::tma;

// d += A(64 x 32, e4m3, registers) * B(32 x 8 NT, e4m3, shared memory via desc); without kAcc d = A B
// (d written only: no zeros to set first). The package's smallm::tma::mma_ra.
template <int NT, bool kAcc>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[4 * NT], const uint32_t (&a)[4], uint64_t desc) {
  mma_ra<NT, kAcc>(d, a, desc);
}
// The same MMA with A from shared memory (the fragment check's reference).
__device__ __forceinline__ void wgmma_e4m3_ss(float (&d)[4], uint64_t adesc, uint64_t bdesc) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, 0, 1, 1;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(adesc), "l"(bdesc));
}

// 16 bytes from global memory, not kept in L1 (the weights are read once).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}
__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

// ------------------------------------------------------------------ fragment check
// One warpgroup: A (64 x 32 e4m3, row-major in global memory) into registers as the probe's kernel
// takes it (register j of thread (warp w, lane 4 g + q): bytes 4q..4q+3 of row 16 w + g + 8 (j & 1),
// plus 16 for j >= 2), and into shared memory in the documented no-swizzle K-major layout; B (32 x 8)
// in shared memory. d_reg and d_smem must be equal (both exact: small integers).
__global__ void fragment_check(const uint8_t* A, const uint8_t* B, float* d_reg, float* d_smem) {
  __shared__ __align__(128) uint8_t as[64 * 32];
  __shared__ __align__(128) uint8_t bs[8 * 32];
  const int tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  for (int i = tid; i < 64 * 32; i += 128) {  // core matrix (row group r / 8, K group k / 16) at 256 (r / 8) + 128 (k / 16)
    const int r = i / 32, k = i % 32;
    as[(r / 8) * 256 + (k / 16) * 128 + (r % 8) * 16 + k % 16] = A[i];
  }
  for (int i = tid; i < 8 * 32; i += 128) {  // B[k][n] given as n-major rows of 32 k
    const int n = i / 32, k = i % 32;
    bs[(k / 16) * 128 + n * 16 + k % 16] = B[i];
  }
  fence_proxy_async();
  __syncthreads();
  uint32_t a[4];
  for (int j = 0; j < 4; ++j) {
    const int row = 16 * w + g + 8 * (j & 1), col = 4 * q + 16 * (j >> 1);
    memcpy(&a[j], A + row * 32 + col, 4);
  }
  float dr[4], ds[4] = {0, 0, 0, 0};
  const uint64_t bdesc = desc_plain(saddr(bs), 128, 256);
  mma_fence();
  wgmma_e4m3<1, false>(dr, a, bdesc);
  wgmma_e4m3_ss(ds, desc_plain(saddr(as), 128, 256), bdesc);
  mma_commit();
  mma_wait0();
  hold(dr);
  hold(ds);
  for (int j = 0; j < 4; ++j) {  // d fragment: (row g + 8 (j / 2), column 2 q + j % 2) of the warp's 16 rows
    const int row = 16 * w + g + 8 * (j / 2), col = 2 * q + (j % 2);
    d_reg[row * 8 + col] = dr[j];
    d_smem[row * 8 + col] = ds[j];
  }
}

// ------------------------------------------------------------------ the gate/up
// B (x) layout: wgmma k-step st (32 logical k) at st * 2 NB; inside it, K group kc (16 logical k) at
// kc * NB (LBO = NB = NT * 128), column group n / 8 at (n / 8) * 128 (SBO = 128), row n % 8 at 16 (n % 8).
// Logical k (kc, j) of step st = 2 p + tt is physical k 64 p + 16 (j / 4) + 8 tt + 4 kc + j % 4: the
// 16 bytes thread q loads of a row at 64 p + 16 q hold A's (kc 0, kc 1) words of step 2p and of 2p + 1.
constexpr int kMaxStages = 3;          // ring kernel: shared-memory stages per warpgroup
struct Shared {
  unsigned long long xbar;   // xprep: the bulk copy of x's B bytes
  unsigned long long full[kWG][kMaxStages];  // ring: a stage's weights and scales arrived
  alignas(16) float rscale[kWG][kMaxStages][8];  // ring: a stage's job's gate (0..3) and up (4..7) block scales
  float xinv[kMaxT];         // 1 / s of each token
  float xinv_wg[kWG][kMaxT];  // xsub: 1 / s of each token over the warpgroup's K slice
  int nu;                    // distinct experts
  int ids[kMaxPairs];
  int first[kMaxE];          // first pair of each expert, then (for first pairs) its distinct index
  int uni[kMaxPairs];        // distinct experts, first-occurrence order
  unsigned mask[kMaxPairs / 32];  // first pairs of each 32
  unsigned slots[kMaxPairs * kMaxT];  // [u][t]: bit k set where token t's slot k is distinct expert u
};
static_assert(kMaxPairs == smallm::kTmaMaxPairs && kMaxT == smallm::kTmaMaxTokens && kMaxE == smallm::kMaxExperts &&
                  kThreads == smallm::kTmaThreads,
              "the package's routing (smallm::tma::route) sizes");

template <int kSlice>
struct Loads {  // one job's registers: 64-byte pieces of its K slice, a thread's 16 bytes of each
  static constexpr int kPieces = kSlice / 64;
  uint4 v[2 * kPieces];  // piece p: v[2p] of the gate row, v[2p + 1] of the up row
  float sg[kSlice / 128], su[kSlice / 128];
};

// k-steps k0 .. k0 + N - 1 of a job (two per 64-byte piece: its gate and up words as A) into acc, the
// first one setting it; one wgmma group, waited for. lo_job: B's descriptor low word at the job's first
// step (step k at + k 2 NB bytes).
template <int NT, int N, class L_>
__device__ __forceinline__ void mma_steps(float (&acc)[4 * NT], const L_& L, uint64_t desc_hi, uint32_t lo_job, int k0) {
  mma_fence();
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int step = k0 + k, p = step / 2, tt = step % 2;
    const uint4 vg = L.v[2 * p], vu = L.v[2 * p + 1];
    const uint32_t fr[4] = {tt ? vg.z : vg.x, tt ? vu.z : vu.x, tt ? vg.w : vg.y, tt ? vu.w : vu.y};
    const uint64_t desc = desc_hi | (lo_job + (uint32_t)(step * 2 * NT * 128 / 16));
    if (k == 0) {
      wgmma_e4m3<NT, false>(acc, fr, desc);
    } else {
      wgmma_e4m3<NT, true>(acc, fr, desc);
    }
  }
  mma_commit();
  mma_wait0();
  hold(acc);
}

// The largest |x| of n bf16 values (a warp's work, every lane gets it) and a token's 1 / s from it
// (s = 2^(7 - floor(log2 m)) puts m in [128, 256)): the package's (hip/smallm_gateup_tma.h).
__device__ __forceinline__ float warp_absmax(const __nv_bfloat16* xrow, int n, int lane) {
  return smallm::tma::warp_absmax(reinterpret_cast<const uint16_t*>(xrow), n, lane);
}

// x's unit (token t, physical k kp0 .. kp0 + 15) as its hi and lo e4m3 parts, columns 2t and 2t + 1 of
// a B-layout region (zeros for t >= T): shared memory, or global memory for x_prepare.
template <int NT>
__device__ __forceinline__ void put_x_unit(uint8_t* bx, const __nv_bfloat16* x, int D, int T, int t, int kp0, float xinv) {
  constexpr int NB = NT * 128;
  const int p = kp0 / 64, qq = (kp0 % 64) / 16;
  float xv[16];
  if (t < T) {
    const float s = 1.0f / xinv;
    const uint4* xr = reinterpret_cast<const uint4*>(x + (size_t)t * D + kp0);
    const uint4 v0 = xr[0], v1 = xr[1];
    const uint32_t ww[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      xv[2 * i] = smallm::bf16_lo(ww[i]) * s;
      xv[2 * i + 1] = smallm::bf16_hi(ww[i]) * s;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) xv[i] = 0.0f;
  }
#pragma unroll
  for (int tt = 0; tt < 2; ++tt) {
#pragma unroll
    for (int kc = 0; kc < 2; ++kc) {
      uint32_t hi = 0, lo = 0;
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        const float x0 = xv[8 * tt + 4 * kc + j], x1 = xv[8 * tt + 4 * kc + j + 1];
        const __nv_fp8x2_storage_t h2 = __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, __NV_E4M3);
        const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(h2, __NV_E4M3);
        const float2 hf = __half22float2(*reinterpret_cast<const __half2*>(&hr));
        const __nv_fp8x2_storage_t l2 =
            __nv_cvt_float2_to_fp8x2(make_float2(16.0f * (x0 - hf.x), 16.0f * (x1 - hf.y)), __NV_SATFINITE, __NV_E4M3);
        hi |= (uint32_t)h2 << (8 * j);
        lo |= (uint32_t)l2 << (8 * j);
      }
      uint8_t* at = bx + (size_t)(2 * p + tt) * 2 * NB + kc * NB + 4 * qq;
      const int nh = 2 * t, nl = 2 * t + 1;
      *reinterpret_cast<uint32_t*>(at + (nh / 8) * 128 + (nh % 8) * 16) = hi;
      *reinterpret_cast<uint32_t*>(at + (nl / 8) * 128 + (nl % 8) * 16) = lo;
    }
  }
}

// x in B's layout once for every block (xprep): block t does token column pair t (zeros for t >= T),
// its 1 / s into xinv.
template <int NT>
__global__ void __launch_bounds__(kThreads) x_prepare(Args a) {
  __shared__ float wmax[kThreads / 32];
  const int t = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float xinv = 1.0f;
  if (t < a.T) {  // the token's scale: each warp over a slice of the row, then the block's largest
    const int per = a.D / (kThreads / 32);
    const float wm = warp_absmax(a.x + (size_t)t * a.D + warp * per, per, lane);
    if (lane == 0) wmax[warp] = wm;
    __syncthreads();
    float m = wmax[0];
    for (int i = 1; i < kThreads / 32; ++i) m = fmaxf(m, wmax[i]);
    xinv = xinv_of(m);
    if (threadIdx.x == 0) a.xinv[t] = xinv;
  }
  for (int v = threadIdx.x; v < a.D / 16; v += kThreads) put_x_unit<NT>(a.xb, a.x, a.D, a.T, t, 16 * v, xinv);
}

// The routing: the package's smallm::tma::route (distinct experts in first-occurrence order, each
// token's slots per distinct expert as a bit mask; this probe's routings name an expert once per token,
// so a mask's lowest bit is the token's one slot there).
__device__ __forceinline__ void route_pairs(const Args& a, Shared& sh) { smallm::tma::route(a.ids, a.T, a.K, a.E, sh); }
__device__ __forceinline__ int slot_of(const Shared& sh, int u, int T, int t) {
  const unsigned m = sh.slots[u * T + t];
  return m ? __ffs(m) - 1 : -1;
}

template <int NT, int kDepth>
__global__ void __launch_bounds__(kThreads, 1) wg_gateup(Args a) {
  constexpr int kSlice = slice_of(kDepth), kPieces = kSlice / 64;
  using Loads = ::Loads<kSlice>;
  extern __shared__ __align__(128) uint8_t smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  uint8_t* bx = smem + ((sizeof(Shared) + 127) / 128) * 128;
  const int tid = threadIdx.x, P = a.T * a.K, S = 1 << a.log_s, C = a.I / 32;
  constexpr int NB = NT * 128;  // B's LBO: the bytes of one 16-wide K group over all columns

  route_pairs(a, sh);
  const int lane = tid % 32, warp = tid / 32;
  const int wg = tid / 128, w = warp % 4, g = lane / 4, q = lane % 4;
  const int G = gridDim.x * kWG, njobs = sh.nu * C * S;
  auto issue = [&](int job, Loads& L) {
    const int u = job >> (a.log_c + a.log_s), c = (job >> a.log_s) & (C - 1), s = job & (S - 1), e = sh.uni[u];
    const int rg = 32 * c + 8 * w + g;  // gate row; its up row is I + rg
    // a piece p (64 k from s kSlice + 64 p) of a row: 64 bytes apart row-major, two 512-byte tiles shuffled
    // (the up row is I rows on: I / 16 whole 16-row groups when shuffled)
    const size_t R = (size_t)e * 2 * a.I + rg;
    const uint8_t* pg = a.w13 + w13_offset(R, s * kSlice + 16 * q, a.D, a.shuffle);
    const uint8_t* pu = pg + (size_t)a.I * a.D;
    const int pstep = a.shuffle ? 1024 : 64;
#pragma unroll
    for (int p = 0; p < kPieces; ++p) {
      L.v[2 * p] = ld_stream(pg + pstep * p);
      L.v[2 * p + 1] = ld_stream(pu + pstep * p);
    }
    const float* sc = a.s13 + ((size_t)e * (2 * a.I / 128) + rg / 128) * (a.D / 128) + s * (kSlice / 128);
    const float* scu = sc + (size_t)(a.I / 128) * (a.D / 128);
#pragma unroll
    for (int b = 0; b < kSlice / 128; ++b) {
      L.sg[b] = __ldg(sc + b);
      L.su[b] = __ldg(scu + b);
    }
  };

  auto prefetch = [&](int job) {  // lanes q = 0: their gate and up rows' 512 bytes of the job
    if (!a.prefetch || job >= njobs || q != 0) return;
    const int u = job >> (a.log_c + a.log_s), c = (job >> a.log_s) & (C - 1), s = job & (S - 1), e = sh.uni[u];
    const uint8_t* pg = a.w13 + ((size_t)e * 2 * a.I + 32 * c + 8 * w + g) * a.D + (size_t)s * kSlice;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pg), "n"(kSlice) : "memory");
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(pg + (size_t)a.I * a.D), "n"(kSlice) : "memory");
  };

  Loads cur, nxt, third;  // third: the ring's third set (kDepth 3 only; unused registers otherwise)
  int job = blockIdx.x * kWG + wg;
  if (job < njobs) issue(job, cur);
  if (kDepth == 3 && job + G < njobs) issue(job + G, nxt);
  prefetch(job + (kDepth - 1) * G);

  // x: per-token power-of-two scale, then hi/lo e4m3 into B's layout (columns >= 2T zero): by this
  // block, or (xprep) by x_prepare once for all blocks, bulk-copied here
  if (a.mode == 3) {  // timing only: B and the scales left as they are
  } else if (a.xsub) {  // the warpgroup's slice only: its tokens' scales over the slice, then their B bytes
    const int s = (blockIdx.x * kWG + tid / 128) & (S - 1), wt = tid % 128;
    for (int t = (wt / 32); t < a.T; t += 4) {
      const float xinv = xinv_of(warp_absmax(a.x + (size_t)t * a.D + (size_t)s * kSlice, kSlice, lane));
      if (lane == 0) sh.xinv_wg[tid / 128][t] = xinv;
    }
    wg_barrier(tid / 128);  // this warpgroup's scales written
    const int units = 4 * NT * (kSlice / 16);  // (token column pair t < 4 NT, 16 physical k of the slice)
    for (int un = wt; un < units; un += 128) {
      const int t = un / (kSlice / 16);
      put_x_unit<NT>(bx, a.x, a.D, a.T, t, s * kSlice + 16 * (un % (kSlice / 16)),
                     t < a.T ? sh.xinv_wg[tid / 128][t] : 1.0f);
    }
    fence_proxy_async();
  } else if (a.xprep) {
    const uint32_t bar = saddr(&sh.xbar), bytes = (uint32_t)a.D * 8 * NT;
    if (tid == 0) {
      mbar_init(bar);
      mbar_init_fence();
      mbar_expect(bar, bytes);
      for (uint32_t o = 0; o < bytes; o += 32768) bulk_copy(saddr(bx + o), a.xb + o, min(32768u, bytes - o), bar);
    }
    for (int t = tid; t < a.T; t += kThreads) sh.xinv[t] = a.xinv[t];
    __syncthreads();  // the barrier initialised before anyone waits on it
    while (!mbar_done(bar, 0)) {
    }
  } else {
    for (int t = warp; t < a.T; t += kThreads / 32) {
      const float xinv = xinv_of(warp_absmax(a.x + (size_t)t * a.D, a.D, lane));
      if (lane == 0) sh.xinv[t] = xinv;
    }
    __syncthreads();
    const int units = 4 * NT * (a.D / 16);  // (token column pair t < 4 NT, 16 physical k)
    for (int un = tid; un < units; un += kThreads) {
      const int t = un / (a.D / 16);
      put_x_unit<NT>(bx, a.x, a.D, a.T, t, 16 * (un % (a.D / 16)), t < a.T ? sh.xinv[t] : 1.0f);
    }
    fence_proxy_async();
  }
  __syncthreads();

  // B's descriptor at its first k-step: the low word (start, LBO) moves with the step (the start field
  // never carries: B lies below 256 KB), the high word (SBO) is fixed
  const uint64_t desc0 = desc_plain(saddr(bx), NB, 128), desc_hi = desc0 & ~0xffffffffull;
  const uint32_t desc_lo = (uint32_t)desc0;
  auto compute = [&](int job, const Loads& L) {
    const int u = job >> (a.log_c + a.log_s), c = (job >> a.log_s) & (C - 1), s = job & (S - 1);
    const uint32_t lo_job = desc_lo + (uint32_t)(s * kPieces * 4 * NB / 16);  // the slice's first k-step
    if (a.mode == 1) {  // the loads alone: wait for them, keep them (never true: no store)
      uint32_t x = 0;
#pragma unroll
      for (int i = 0; i < 2 * kPieces; ++i) x ^= L.v[i].x ^ L.v[i].y ^ L.v[i].z ^ L.v[i].w;
      if (x == 0x2545f491u && L.sg[0] == 1.2345f) a.part[0] = 0.0f;
      return;
    }
    float tot[4 * NT];
    if (a.mode == 2) {  // all k-steps in one wgmma group, one wait per job: the first block's scales for all
      float acc[4 * NT];
      mma_steps<NT, 4 * kSlice / 128>(acc, L, desc_hi, lo_job, 0);
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        tot[4 * j] = acc[4 * j] * L.sg[0];
        tot[4 * j + 1] = acc[4 * j + 1] * L.sg[0];
        tot[4 * j + 2] = acc[4 * j + 2] * L.su[0];
        tot[4 * j + 3] = acc[4 * j + 3] * L.su[0];
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4 * NT; ++i) tot[i] = 0.0f;
#pragma unroll
      for (int b = 0; b < kSlice / 128; ++b) {  // one 128-wide K block: its two scales
        float acc[4 * NT];
        mma_steps<NT, 4>(acc, L, desc_hi, lo_job, 4 * b);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          tot[4 * j] = fmaf(acc[4 * j], L.sg[b], tot[4 * j]);
          tot[4 * j + 1] = fmaf(acc[4 * j + 1], L.sg[b], tot[4 * j + 1]);
          tot[4 * j + 2] = fmaf(acc[4 * j + 2], L.su[b], tot[4 * j + 2]);
          tot[4 * j + 3] = fmaf(acc[4 * j + 3], L.su[b], tot[4 * j + 3]);
        }
      }
    }
    // columns 2t (hi) and 2t + 1 (lo) of token t = 4 j + q; rows g (gate) and g + 8 (up)
    const int i = 32 * c + 8 * w + g;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int t = 4 * j + q;
      if (t < a.T) {
        const int sl = slot_of(sh, u, a.T, t);
        if (sl >= 0) {
          const float xi = a.xsub ? sh.xinv_wg[wg][t] : sh.xinv[t];
          float* dst = a.part + ((size_t)s * P + t * a.K + sl) * 2 * a.I;
          dst[i] = (tot[4 * j] + 0.0625f * tot[4 * j + 1]) * xi;
          dst[a.I + i] = (tot[4 * j + 2] + 0.0625f * tot[4 * j + 3]) * xi;
        }
      }
    }
  };
  // jobs job, job + G, ...: the loads of the next kDepth - 1 jobs in flight while this one computes,
  // each set reused once its job is computed (the loop rotates the sets by position, no copies)
  auto step = [&](Loads& now, Loads& ahead) {  // issue job + (kDepth - 1) G into `ahead`, compute job from `now`
    const int jn = job + (kDepth - 1) * G;
    if (jn < njobs) issue(jn, ahead);
    prefetch(jn + G);
    compute(job, now);
    job += G;
  };
  if (kDepth == 2) {
    while (job < njobs) {
      step(cur, nxt);
      if (job >= njobs) break;
      step(nxt, cur);
    }
  } else {
    while (job < njobs) {
      step(cur, third);
      if (job >= njobs) break;
      step(nxt, cur);
      if (job >= njobs) break;
      step(third, nxt);
    }
  }
}

// ------------------------------------------------------------------ the gate/up from a shared-memory ring
// PROBE_RING=1 (needs PROBE_SHUFFLE=1): the weights by bulk copies (cp.async.bulk, no tensor map) into
// kStages shared-memory stages per warpgroup, several jobs in flight whatever the MMAs are doing. The
// roles of run 1's operands swap: the weights are B (N = 16 rows per wgmma, from shared memory) and x is
// A (M = 64 rows, in registers for the whole kernel): a shuffled 16-row group's 512-byte k-tile is four
// no-swizzle core matrices (8 rows x 16 k: rows' halves 128 bytes apart = SBO, k halves 256 apart =
// LBO), so an 8 KB bulk copy of a group's 16 tiles (512 K) is 16 wgmma B operands as it lands. A's rows:
// warp w's row g the hi part of token 8 w + g, row g + 8 its lo part (zeros from token T on: M = 64 holds
// 24 tokens, T <= 20 here), each token scaled over the warpgroup's K slice (xsub's scheme; the grid's
// warpgroups a multiple of the slices, so one slice per warpgroup). A job: 32 gate rows and their 32 up
// rows (four 8 KB copies) x one 512 K slice, and its eight block scales (two 16-byte copies), on the
// stage's barrier. Per 128-wide K block: 4 groups x 4 k-steps of m64n16k32 into four fresh accumulators,
// one wait, the block scales in fp32. Partial sums per slice as wg_gateup (the same slice_sum).
template <int kStages>
__global__ void __launch_bounds__(kThreads, 1) ring_gateup(Args a) {
  constexpr int kSlice = 512, kJob = 32768;  // bytes of a job's weights
  extern __shared__ __align__(128) uint8_t smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128, lane = tid % 32, w = wt / 32, g = lane / 4, q = lane % 4;
  uint8_t* ring = smem + ((sizeof(Shared) + 1023) / 1024) * 1024 + (size_t)wg * kStages * kJob;
  if (wt == 0) {
    for (int i = 0; i < kStages; ++i)
      mbar_init(saddr(&sh.full[wg][i]));
    mbar_init_fence();
  }
  route_pairs(a, sh);  // ends with a block barrier: the stage barriers are initialised for everyone
  const int P = a.T * a.K, S = 1 << a.log_s, C = a.I / 32, G = gridDim.x * kWG, njobs = sh.nu * C * S;
  const int job0 = blockIdx.x * kWG + wg, s = job0 & (S - 1);
  // the n-th job of this warpgroup into stage n % kStages (one thread)
  auto issue = [&](int n) {
    const int job = job0 + n * G;
    if (job >= njobs) return;
    const int u = job >> (a.log_c + a.log_s), c = (job >> a.log_s) & (C - 1), e = sh.uni[u], st = n % kStages;
    const uint32_t bar = saddr(&sh.full[wg][st]);
    mbar_expect(bar, kJob + 32);
    const size_t R = (size_t)e * 2 * a.I + 32 * c;  // the job's first gate row; a multiple of 32
    for (int grp = 0; grp < 4; ++grp) {  // gate rows R, R + 16, up rows R + I, R + I + 16: 16 k-tiles each
      const size_t r = R + (grp & 1) * 16 + (grp >> 1) * a.I;
      const uint8_t* src = a.w13 + w13_offset(r, s * kSlice, a.D, 1);
      bulk_copy(saddr(ring + st * kJob + grp * 8192), src, 8192, bar);
    }
    const float* sg = a.s13 + ((size_t)e * (2 * a.I / 128) + (32 * c) / 128) * (a.D / 128) + s * (kSlice / 128);
    const float* su = sg + (size_t)(a.I / 128) * (a.D / 128);
    bulk_copy(saddr(&sh.rscale[wg][st][0]), sg, 16, bar);
    bulk_copy(saddr(&sh.rscale[wg][st][4]), su, 16, bar);
  };
  if (wt == 0)
    for (int n = 0; n < kStages; ++n) issue(n);

  // x as A for the whole kernel: token t = 8 w + g, k-step j's registers (hi k 4q.., lo k 4q.., hi k
  // 16 + 4q.., lo k 16 + 4q..) of the slice; the token's scale over the slice from its four lanes q
  const int t = 8 * w + g;
  uint32_t xa[kSlice / 32][4];
  float xinv = 1.0f;
  {
    const __nv_bfloat16* xr = a.x + (size_t)(t < a.T ? t : 0) * a.D + s * kSlice + 4 * q;
    float m = 0.0f;
#pragma unroll
    for (int j = 0; j < kSlice / 32; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint2 v = *reinterpret_cast<const uint2*>(xr + 32 * j + 16 * h);
        const uint32_t ww[2] = {v.x, v.y};
#pragma unroll
        for (int i = 0; i < 2; ++i)
          m = fmaxf(m, fmaxf(fabsf(smallm::bf16_lo(ww[i])), fabsf(smallm::bf16_hi(ww[i]))));
      }
    m = fmaxf(m, __shfl_xor_sync(~0u, m, 1));
    m = fmaxf(m, __shfl_xor_sync(~0u, m, 2));
    xinv = xinv_of(m);
    const float sc = t < a.T ? 1.0f / xinv : 0.0f;  // tokens from T on: zeros
#pragma unroll
    for (int j = 0; j < kSlice / 32; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint2 v = *reinterpret_cast<const uint2*>(xr + 32 * j + 16 * h);
        const float xv[4] = {smallm::bf16_lo(v.x) * sc, smallm::bf16_hi(v.x) * sc, smallm::bf16_lo(v.y) * sc,
                             smallm::bf16_hi(v.y) * sc};
        uint32_t hi = 0, lo = 0;
#pragma unroll
        for (int i = 0; i < 4; i += 2) {
          const __nv_fp8x2_storage_t h2 = __nv_cvt_float2_to_fp8x2(make_float2(xv[i], xv[i + 1]), __NV_SATFINITE, __NV_E4M3);
          const __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(h2, __NV_E4M3);
          const float2 hf = __half22float2(*reinterpret_cast<const __half2*>(&hr));
          const __nv_fp8x2_storage_t l2 = __nv_cvt_float2_to_fp8x2(
              make_float2(16.0f * (xv[i] - hf.x), 16.0f * (xv[i + 1] - hf.y)), __NV_SATFINITE, __NV_E4M3);
          hi |= (uint32_t)h2 << (8 * i);
          lo |= (uint32_t)l2 << (8 * i);
        }
        xa[j][2 * h] = hi;
        xa[j][2 * h + 1] = lo;
      }
  }

  for (int n = 0;; ++n) {
    const int job = job0 + n * G;
    if (job >= njobs) break;
    const int st = n % kStages, u = job >> (a.log_c + a.log_s), c = (job >> a.log_s) & (C - 1);
    while (!mbar_done(saddr(&sh.full[wg][st]), (n / kStages) & 1)) {
    }
    float tot[4][8];
    if (a.mode != 1) {
      const uint32_t base = saddr(ring + st * kJob);
#pragma unroll
      for (int grp = 0; grp < 4; ++grp)
#pragma unroll
        for (int i = 0; i < 8; ++i) tot[grp][i] = 0.0f;
#pragma unroll
      for (int kb = 0; kb < kSlice / 128; ++kb) {
        float acc[4][8];
        mma_fence();
#pragma unroll
        for (int grp = 0; grp < 4; ++grp)
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const uint64_t desc = desc_plain(base + grp * 8192 + (4 * kb + k) * 512, 256, 128);
            if (k == 0) {
              wgmma_e4m3<2, false>(acc[grp], xa[4 * kb + k], desc);
            } else {
              wgmma_e4m3<2, true>(acc[grp], xa[4 * kb + k], desc);
            }
          }
        mma_commit();
        mma_wait0();
#pragma unroll
        for (int grp = 0; grp < 4; ++grp) hold(acc[grp]);
        const float sg = sh.rscale[wg][st][kb], su = sh.rscale[wg][st][4 + kb];
#pragma unroll
        for (int grp = 0; grp < 4; ++grp)
#pragma unroll
          for (int i = 0; i < 8; ++i) tot[grp][i] = fmaf(acc[grp][i], grp < 2 ? sg : su, tot[grp][i]);
      }
    }
    // every warp of the warpgroup done with the stage (its MMAs waited for, its scales read): refill it
    wg_barrier(wg);
    if (wt == 0) issue(n + kStages);
    const int sl = a.mode != 1 && t < a.T ? slot_of(sh, u, a.T, t) : -1;
    if (sl >= 0) {  // (no early continue: the warps stay converged for the next job's wgmmas)
      float* dst = a.part + ((size_t)s * P + t * a.K + sl) * 2 * a.I;
#pragma unroll
      for (int grp = 0; grp < 4; ++grp) {  // columns 8 j + 2 q (+1) of the group's 16 rows: row g hi, g + 8 lo
        const int row = (grp >> 1) * a.I + 32 * c + 16 * (grp & 1);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float2 v = make_float2((tot[grp][4 * j] + 0.0625f * tot[grp][4 * j + 2]) * xinv,
                                       (tot[grp][4 * j + 1] + 0.0625f * tot[grp][4 * j + 3]) * xinv);
          *reinterpret_cast<float2*>(dst + row + 8 * j + 2 * q) = v;
        }
      }
    }
  }
}

// ------------------------------------------------------------------ the gate/up from TMA tiles
// PROBE_TMA=1 runs the package's kernel, smallm::smallm_gateup_tma_kernel (hip/smallm_gateup_tma.h: the
// design is there), which began here as this probe's tma_gateup ("h200-wgmma" runs 7-8 ran that; the
// package's differs in its routing (ids outside [0, E) skipped, a bit mask of slots per (expert, token)),
// in integer divisions for the job's indices, and in a switch for fp32 sums per 32-k step), on a MoeArgs
// made from the probe's Args: its partial sums land in the probe's part buffer, which follows h.

__global__ void slice_sum(Args a) {  // h = silu(sum of the slices' gate) * (sum of their up), slices in order
  const int i = blockIdx.x * blockDim.x + threadIdx.x, P = a.T * a.K, S = 1 << a.log_s;
  if (i >= P * a.I) return;
  const int p = i / a.I, j = i % a.I;
  float gs = 0.0f, us = 0.0f;
  for (int s = 0; s < S; ++s) {
    const float* r = a.part + ((size_t)s * P + p) * 2 * a.I;
    gs += r[j];
    us += r[a.I + j];
  }
  a.h[i] = silu(gs) * us;
}

// ------------------------------------------------------------------ reference, floor, data
__device__ float e4m3_value(uint8_t v) {
  const __half_raw r = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E4M3);
  return __half2float(*reinterpret_cast<const __half*>(&r));
}
__global__ void reference_h(Args a, float* h) {  // one thread per (pair, i), fp64
  const int i = blockIdx.x * blockDim.x + threadIdx.x, P = a.T * a.K;
  if (i >= P * a.I) return;
  const int p = i / a.I, j = i % a.I, e = a.ids[p], t = p / a.K;
  double gs = 0, us = 0;
  for (int k = 0; k < a.D; ++k) {
    const double xv = __bfloat162float(a.x[(size_t)t * a.D + k]);
    const int rg = j, ru = a.I + j;
    gs += xv * e4m3_value(a.w13[w13_offset((size_t)e * 2 * a.I + rg, k, a.D, a.shuffle)]) *
          a.s13[((size_t)e * (2 * a.I / 128) + rg / 128) * (a.D / 128) + k / 128];
    us += xv * e4m3_value(a.w13[w13_offset((size_t)e * 2 * a.I + ru, k, a.D, a.shuffle)]) *
          a.s13[((size_t)e * (2 * a.I / 128) + ru / 128) * (a.D / 128) + k / 128];
  }
  h[i] = (float)(gs / (1.0 + exp(-gs)) * us);
}
__global__ void fill_e4m3(uint8_t* p, size_t n, uint32_t seed) {  // finite e4m3, |v| < 256
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const uint32_t v = probe_hash(i, seed);
    p[i] = (uint8_t)((v % 0x70u) | (v & 0x80u));
  }
}
__global__ void fill_scale(float* p, size_t n, uint32_t seed) {  // in [0.5, 1.5) / 256
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t v = (uint32_t)i * 0x27d4eb2fu ^ seed * 0x165667b1u;
    v ^= v >> 15;
    v *= 0x2c1b3c6du;
    v ^= v >> 12;
    p[i] = (0.5f + (v >> 8) * (1.0f / 16777216.0f)) / 256.0f;
  }
}

template <int NT>
void launch_nt(const Args& a, int grid, size_t smem, cudaStream_t st, int depth) {
  if (depth == 3) {
    wg_gateup<NT, 3><<<grid, kThreads, smem, st>>>(a);
  } else {
    wg_gateup<NT, 2><<<grid, kThreads, smem, st>>>(a);
  }
}
int g_tma = 0;  // PROBE_TMA=1: the package's smallm_gateup_tma_kernel (row-major W13 by tensor-map tiles)
smallm::MoeArgs moe_args(const Args& a) {  // the package's view of the same call (part follows h)
  smallm::MoeArgs m = {};
  m.x = reinterpret_cast<const uint16_t*>(a.x);
  m.w13 = a.w13;
  m.s13 = a.s13;
  m.topk_ids = a.ids;
  m.h = a.h;
  m.T = a.T, m.K = a.K, m.E = a.E, m.D = a.D, m.I = a.I;
  return m;
}
int g_ring_stages = 0;  // PROBE_RING=1: ring_gateup with this many stages per warpgroup (PROBE_STAGES, 2 or 3)
size_t ring_smem(int stages) { return ((sizeof(Shared) + 1023) / 1024) * 1024 + (size_t)kWG * stages * 32768; }
void launch_gateup(const Args& a, int grid, cudaStream_t st, int depth) {
  if (g_tma) {
    const int smem = (int)smallm::tma_gateup_smem_bytes(a.T);
    const smallm::MoeArgs m = moe_args(a);
    switch ((a.T + 3) / 4) {
      case 1: smallm::smallm_gateup_tma_kernel<1, false><<<grid, kThreads, smem, st>>>(*a.tmap, m); break;
      case 2: smallm::smallm_gateup_tma_kernel<2, false><<<grid, kThreads, smem, st>>>(*a.tmap, m); break;
      case 3: smallm::smallm_gateup_tma_kernel<3, false><<<grid, kThreads, smem, st>>>(*a.tmap, m); break;
      case 4: smallm::smallm_gateup_tma_kernel<4, false><<<grid, kThreads, smem, st>>>(*a.tmap, m); break;
      default: smallm::smallm_gateup_tma_kernel<5, false><<<grid, kThreads, smem, st>>>(*a.tmap, m); break;
    }
    return;
  }
  if (g_ring_stages == 2) {
    ring_gateup<2><<<grid, kThreads, ring_smem(2), st>>>(a);
    return;
  }
  if (g_ring_stages == 3) {
    ring_gateup<3><<<grid, kThreads, ring_smem(3), st>>>(a);
    return;
  }
  const int nt = (a.T + 3) / 4;
  if (a.xprep) {
    switch (nt) {
      case 1: x_prepare<1><<<4 * nt, kThreads, 0, st>>>(a); break;
      case 2: x_prepare<2><<<4 * nt, kThreads, 0, st>>>(a); break;
      case 3: x_prepare<3><<<4 * nt, kThreads, 0, st>>>(a); break;
      case 4: x_prepare<4><<<4 * nt, kThreads, 0, st>>>(a); break;
      default: x_prepare<5><<<4 * nt, kThreads, 0, st>>>(a); break;
    }
  }
  const size_t smem = ((sizeof(Shared) + 127) / 128) * 128 + (size_t)a.D * 8 * nt;
  switch (nt) {
    case 1: launch_nt<1>(a, grid, smem, st, depth); break;
    case 2: launch_nt<2>(a, grid, smem, st, depth); break;
    case 3: launch_nt<3>(a, grid, smem, st, depth); break;
    case 4: launch_nt<4>(a, grid, smem, st, depth); break;
    default: launch_nt<5>(a, grid, smem, st, depth); break;
  }
}

bool check_fragments() {
  std::vector<uint8_t> A(64 * 32), B(8 * 32);
  std::vector<double> ref(64 * 8, 0.0);
  srand(7);
  auto small = [] { return (uint8_t)(0x30 + rand() % 0x18) | (uint8_t)((rand() & 1) << 7); };  // e4m3 0.5 .. 7.5
  for (auto& v : A) v = small();
  for (auto& v : B) v = small();
  auto val = [](uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    const double mag = e ? std::ldexp(1.0 + m / 8.0, e - 7) : std::ldexp(m / 8.0, -6);
    return (b & 0x80) ? -mag : mag;
  };
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 32; ++k) ref[r * 8 + n] += val(A[r * 32 + k]) * val(B[n * 32 + k]);
  uint8_t *dA, *dB;
  float *dr, *ds;
  CK(cudaMalloc(&dA, A.size()));
  CK(cudaMalloc(&dB, B.size()));
  CK(cudaMalloc(&dr, 64 * 8 * 4));
  CK(cudaMalloc(&ds, 64 * 8 * 4));
  CK(cudaMemcpy(dA, A.data(), A.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B.data(), B.size(), cudaMemcpyHostToDevice));
  fragment_check<<<1, 128>>>(dA, dB, dr, ds);
  CK(cudaGetLastError());
  std::vector<float> hr(64 * 8), hs(64 * 8);
  CK(cudaMemcpy(hr.data(), dr, hr.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hs.data(), ds, hs.size() * 4, cudaMemcpyDeviceToHost));
  double er = 0, es = 0;
  for (int i = 0; i < 64 * 8; ++i) {
    er = std::max(er, std::fabs(hr[i] - ref[i]));
    es = std::max(es, std::fabs(hs[i] - ref[i]));
  }
  const bool same = memcmp(hr.data(), hs.data(), hr.size() * 4) == 0;
  double mag = 0;
  for (double v : ref) mag = std::max(mag, std::fabs(v));
  // the same bits either way; against fp64 within 2^-12 of the largest |d| (FP8 wgmma keeps fewer bits in its sums)
  const bool ok = same && er <= mag / 4096 && es <= mag / 4096;
  printf("fragment check: A from registers %s A from shared memory; max |err| vs fp64 %.3g (largest |d| %.1f) -> %s\n",
         same ? "==" : "!=", er, mag, ok ? "PASS" : "FAIL");
  cudaFree(dA), cudaFree(dB), cudaFree(dr), cudaFree(ds);
  return ok;
}

static int ilog2(int v) {  // v a power of two (else the probe stops)
  int l = 0;
  while ((1 << l) < v) ++l;
  if ((1 << l) != v) {
    printf("%d is not a power of two\n", v);
    exit(1);
  }
  return l;
}

struct Copy {
  uint8_t* w13;
  float* s13;
  CUtensorMap tmap;  // PROBE_TMA: W13 as (k bytes, rows), boxes of 128 x 32 with the 128-byte swizzle
};

int main(int argc, char** argv) {
  const std::vector<int> toks = token_counts(argc, argv, {1, 4, 8, 12, 16, 20});
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int SM = prop.multiProcessorCount, E = 513, K = 11, D = 4096, copies = 8;
  const int pf = getenv("PROBE_PREFETCH") ? atoi(getenv("PROBE_PREFETCH")) : 0;
  const int mode = getenv("PROBE_MODE") ? atoi(getenv("PROBE_MODE")) : 0;  // 1, 2: timing only (see Args)
  const int depth = getenv("PROBE_DEPTH") && atoi(getenv("PROBE_DEPTH")) == 3 ? 3 : 2;  // jobs in registers at once
  const int slice = slice_of(depth);
  const int xprep = getenv("PROBE_XPREP") ? atoi(getenv("PROBE_XPREP")) : 0;  // x prepared once, bulk-copied
  const int xsub = getenv("PROBE_XSUB") ? atoi(getenv("PROBE_XSUB")) : 0;  // each warpgroup its own slice of x
  const int shuffle = getenv("PROBE_SHUFFLE") ? atoi(getenv("PROBE_SHUFFLE")) : 0;  // AITER-shuffled W13
  if (shuffle && pf) {
    printf("PROBE_SHUFFLE=1 takes no PROBE_PREFETCH (its prefetches address row-major rows)\n");
    return 2;
  }
  if (getenv("PROBE_RING") && atoi(getenv("PROBE_RING")) == 1) {
    g_ring_stages = getenv("PROBE_STAGES") && atoi(getenv("PROBE_STAGES")) == 2 ? 2 : 3;
    if (!shuffle || xprep || depth != 2 || mode == 2 || mode == 3) {
      printf("PROBE_RING=1 needs PROBE_SHUFFLE=1, PROBE_XPREP=0, PROBE_DEPTH=2 and PROBE_MODE 0 or 1\n");
      return 2;
    }
  }
  g_tma = getenv("PROBE_TMA") && atoi(getenv("PROBE_TMA")) == 1;
  if (g_tma && (shuffle || xprep || depth != 2 || g_ring_stages || mode == 2)) {
    printf("PROBE_TMA=1 needs row-major W13 (PROBE_SHUFFLE=0), PROBE_XPREP=0, PROBE_DEPTH=2, no PROBE_RING, PROBE_MODE 0, 1 or 3\n");
    return 2;
  }
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (g_tma) {
    cudaDriverEntryPointQueryResult qr;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                        cudaEnableDefault, &qr));
    if (qr != cudaDriverEntryPointSuccess || !encode) {
      printf("cuTensorMapEncodeTiled not found in the driver\n");
      return 2;
    }
  }
  if (xsub && xprep) {
    printf("PROBE_XSUB=1 needs PROBE_XPREP=0\n");
    return 2;
  }
  // xsub: the grid's warpgroups a multiple of the slices, so that each warpgroup's jobs share one slice
  // (132 SMs: all of them at depth 2, 8 slices; 128 at depth 3, 16 slices)
  const int grid = xsub || g_ring_stages || g_tma ? (SM * kWG / (D / slice)) * (D / slice) / kWG : SM;
  printf("device %s, %d SMs; gate/up grid %d x %d threads, jobs of 64 rows x %d K, %d in registers, L2 prefetch %d, x prepared once %d, x slice per warpgroup %d, W13 %s, ring stages %d (0: registers), TMA tiles (the package's kernel) %d, mode %d%s\n", prop.name, SM, grid, kThreads, slice, depth, pf, xprep, xsub, shuffle ? "shuffled (16, 16)" : "row-major", g_ring_stages, g_tma, mode,
         mode ? " (timing only: rel_err not meaningful)" : "");
  const bool frag_ok = check_fragments();
  const size_t smem_max = ((sizeof(Shared) + 127) / 128) * 128 + (size_t)D * 8 * kMaxNT;
  auto allow = [&](auto kernel) { CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_max)); };
  allow(wg_gateup<1, 2>), allow(wg_gateup<2, 2>), allow(wg_gateup<3, 2>), allow(wg_gateup<4, 2>), allow(wg_gateup<5, 2>);
  allow(wg_gateup<1, 3>), allow(wg_gateup<2, 3>), allow(wg_gateup<3, 3>), allow(wg_gateup<4, 3>), allow(wg_gateup<5, 3>);
  CK(cudaFuncSetAttribute(ring_gateup<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ring_smem(2)));
  CK(cudaFuncSetAttribute(ring_gateup<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ring_smem(3)));
  for (int nt = 1; nt <= 5; ++nt) {  // the package's TMA gate/up, each N
    const int smem = (int)smallm::tma_gateup_smem_bytes(4 * nt);
    const void* k[5] = {(const void*)smallm::smallm_gateup_tma_kernel<1, false>, (const void*)smallm::smallm_gateup_tma_kernel<2, false>,
                        (const void*)smallm::smallm_gateup_tma_kernel<3, false>, (const void*)smallm::smallm_gateup_tma_kernel<4, false>,
                        (const void*)smallm::smallm_gateup_tma_kernel<5, false>};
    CK(cudaFuncSetAttribute(k[nt - 1], cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  unsigned* sink;
  CK(cudaMalloc(&sink, 4));
  printf("%-5s %3s %4s %10s %9s %9s %8s %8s %10s\n", "shape", "T", "U", "gateup_us", "sum_us", "floor_us", "x_floor", "W13_MB",
         "rel_err");
  bool all_ok = frag_ok;
  for (int I : {256, 128}) {
    const size_t b13 = (size_t)E * 2 * I * D, n13 = (size_t)E * (2 * I / 128) * (D / 128);
    std::vector<Copy> cp(copies);
    for (int c = 0; c < copies; ++c) {
      CK(cudaMalloc(&cp[c].w13, b13));
      CK(cudaMalloc(&cp[c].s13, n13 * 4));
      fill_e4m3<<<1024, 256>>>(cp[c].w13, b13, 101 + c);
      fill_scale<<<256, 256>>>(cp[c].s13, n13, 201 + c);
      if (g_tma) {
        const cuuint64_t dims[2] = {(cuuint64_t)D, (cuuint64_t)E * 2 * I}, strides[1] = {(cuuint64_t)D};
        const cuuint32_t box[2] = {128, 32}, estr[2] = {1, 1};
        const CUresult r = encode(&cp[c].tmap, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, cp[c].w13, dims, strides, box, estr,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
          printf("cuTensorMapEncodeTiled failed (%d)\n", (int)r);
          return 2;
        }
      }
    }
    CK(cudaDeviceSynchronize());
    for (int T : toks) {
      const int P = T * K;
      if (T < 1 || T > kMaxT) {
        printf("T=%d: outside 1..%d\n", T, kMaxT);
        continue;
      }
      std::vector<Args> args(copies);
      std::vector<int*> dexp(copies);
      std::vector<int> nus(copies);
      for (int c = 0; c < copies; ++c) {
        srand(1000 * T + 7 * c + I);
        std::vector<int> ids(P), distinct;
        for (int t = 0; t < T; ++t) {
          std::vector<int> pick;
          while ((int)pick.size() < K) {
            const int v = rand() % E;
            if (std::find(pick.begin(), pick.end(), v) == pick.end()) pick.push_back(v);
          }
          for (int k = 0; k < K; ++k) {
            ids[t * K + k] = pick[k];
            if (std::find(distinct.begin(), distinct.end(), pick[k]) == distinct.end()) distinct.push_back(pick[k]);
          }
        }
        nus[c] = (int)distinct.size();
        Args& a = args[c];
        int* d_ids;
        __nv_bfloat16* d_x;
        float *d_part, *d_h;
        CK(cudaMalloc(&d_ids, P * 4));
        CK(cudaMalloc(&d_x, (size_t)T * D * 2));
        CK(cudaMalloc(&d_h, ((size_t)P * I + (size_t)(D / slice) * P * 2 * I) * 4));  // h, then the partial sums
        d_part = d_h + (size_t)P * I;  // (as the package's workspace: smallm_gateup_tma_kernel writes there)
        CK(cudaMalloc(&dexp[c], distinct.size() * 4));
        CK(cudaMemcpy(d_ids, ids.data(), P * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dexp[c], distinct.data(), distinct.size() * 4, cudaMemcpyHostToDevice));
        std::vector<__nv_bfloat16> hx((size_t)T * D);
        for (size_t i = 0; i < hx.size(); ++i) {  // rows of different magnitudes, some tiny values
          const float mag = std::ldexp(1.0f, (int)(i / D) % 7 - 3);
          const float v = (rand() % 2001 - 1000) / 1000.0f;
          hx[i] = __float2bfloat16(mag * (rand() % 16 == 0 ? v * 1e-3f : v));
        }
        CK(cudaMemcpy(d_x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
        uint8_t* d_xb;
        float* d_xinv;
        CK(cudaMalloc(&d_xb, (size_t)D * 8 * kMaxNT));
        CK(cudaMalloc(&d_xinv, kMaxT * 4));
        a = Args{cp[c].w13, cp[c].s13, d_x, d_ids, d_part, d_h, T, K, E, D, I, ilog2(D / slice), ilog2(I / 32), pf, mode,
                 xprep, d_xb, d_xinv, shuffle, &cp[c].tmap, xsub};
      }
      auto call = [&](int c) {
        launch_gateup(args[c], grid, st, depth);
        slice_sum<<<(P * I + 255) / 256, 256, 0, st>>>(args[c]);
      };
      // correctness: h poisoned, two calls equal bit for bit, against fp64
      double worst = 0;
      for (int c = 0; c < copies; ++c) {
        const Args& a = args[c];
        const size_t n = (size_t)P * I;
        std::vector<float> h1(n), h2(n), ref(n);
        CK(cudaMemsetAsync(a.h, 0xff, n * 4, st));
        CK(cudaMemsetAsync(a.part, 0xff, (size_t)(D / slice) * P * 2 * I * 4, st));
        call(c);
        CK(cudaMemcpyAsync(h1.data(), a.h, n * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaMemsetAsync(a.h, 0xff, n * 4, st));
        call(c);
        CK(cudaMemcpyAsync(h2.data(), a.h, n * 4, cudaMemcpyDeviceToHost, st));
        float* rh;
        CK(cudaMalloc(&rh, n * 4));
        reference_h<<<(unsigned)((n + 127) / 128), 128, 0, st>>>(a, rh);
        CK(cudaMemcpyAsync(ref.data(), rh, n * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        CK(cudaFree(rh));
        double num = 0, den = 0;
        bool finite = true;
        for (size_t i = 0; i < n; ++i) {
          finite &= std::isfinite(h1[i]);
          num += (double)(h1[i] - ref[i]) * (h1[i] - ref[i]);
          den += (double)ref[i] * ref[i];
        }
        double err = finite ? std::sqrt(num / den) : 1e9;
        if (memcmp(h1.data(), h2.data(), n * 4) != 0) err = 2e9;
        worst = std::max(worst, err);
      }
      auto time_graph = [&](auto body) { return graph_us_per_call(st, copies, body); };
      const float gu = time_graph([&] {
        for (int c = 0; c < copies; ++c) launch_gateup(args[c], grid, st, depth);
      });
      const float both = time_graph([&] {
        for (int c = 0; c < copies; ++c) call(c);
      });
      float fl = 1e9f;
      for (int chunks : {4, 8, 16, 32, 64})
        fl = std::min(fl, time_graph([&] {
               for (int c = 0; c < copies; ++c)
                 read_floor<<<nus[c] * chunks, 256, 0, st>>>(cp[c].w13, 2L * I * D, nullptr, 0, dexp[c], nus[c], chunks, sink);
             }));
      CK(cudaGetLastError());
      double mb = 0;
      for (int c = 0; c < copies; ++c) mb += nus[c] * 2.0 * I * D / 1e6 / copies;
      const bool ok = worst <= 1e-3 || mode != 0;  // modes 1-3 time only
      all_ok &= ok;
      printf("%-5s %3d %4d %10.1f %9.1f %9.1f %7.2fx %8.1f %10.2e%s\n", I == 256 ? "TP4" : "TP8", T, nus[0], gu, both - gu, fl,
             gu / fl, mb, worst, ok ? "" : "  FAIL");
      for (int c = 0; c < copies; ++c) {
        const Args& a = args[c];
        cudaFree((void*)a.ids), cudaFree((void*)a.x), cudaFree(a.h), cudaFree(dexp[c]);
        cudaFree(a.xb), cudaFree(a.xinv);
      }
    }
    for (int c = 0; c < copies; ++c) cudaFree(cp[c].w13), cudaFree(cp[c].s13);
  }
  printf("%s\n", all_ok ? "ALL PASS" : "SOME FAIL");
  return all_ok ? 0 : 1;
}
