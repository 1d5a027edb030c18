// mxfp4_tma_probe.cu: the MXFP4 gate/up on the H200's FP8 tensor cores (`wgmma`), a probe.
//
// Why: the package's MXFP4 kernels are 2.1-2.7x the read floor on the H200 (README, "Why not 1.25x"):
// sm_90 has no fp4 conversion, so every e2m1 value is decoded by bit operations to f16 for `mma.sync`,
// and ncu had the MXFP4 gate/up issuing ~0.38 warp instructions per weight byte, bound by issue, not
// memory (examples/results "h200-ab6" run 2). Here the weights go by TMA tiles into shared memory and
// from there into wgmma's A registers as e4m3 (every e2m1 value is exactly an e4m3 value), 16 values of
// a thread's fragment from two 32-bit shared loads and ten integer operations per eight values; x is B,
// two e4m3 parts per value as in the FP8 TMA gate/up (hip/smallm_gateup_tma.h). One wgmma k-step is 32 k,
// exactly one e8m0 block per row, so each step goes into a fresh accumulator and its rows' e8m0 scales
// are applied in fp32: no scale ever enters the tensor core.
//
// Design (the FP8 TMA gate/up's, hip/smallm_gateup_tma.h, with these differences): a job is (distinct
// expert, 32 intermediate rows, K slice of 512): its 32 gate and 32 up rows are 64 x 256 bytes of e2m1
// (four boxes of 128 bytes x 32 rows, 128-byte swizzle) plus 64 x 16 e8m0 bytes (two boxes of 16 bytes
// x 32 rows), 17 KB a stage, four stages per warpgroup. A thread's A fragment of k-step j: 4 bytes of its
// rows g and g + 8 at 16-byte chunk j; its low four values become register 0 (1 for row g + 8), its high
// four register 2 (3), so logical k 4q + i of the step is physical k 8q + i and 16 + 4q + i is 8q + 4 + i;
// x is staged in the same order. The partial sums per K slice land where the FP8 TMA gate/up writes
// them, so the package's slice sum (smallm_tma_slice_sum_kernel) and its MXFP4 down run unchanged after
// it: the probe times that whole layer beside the package's own MXFP4 layer.
//
// Checks: h against an fp64 reference (relative L2, as the package's selftest measures), h poisoned
// before each call and two calls compared bit for bit; the layer's bf16 output against the package's
// (relative L2). Timing with the bench's graph discipline (8 weight copies rotated in one CUDA graph,
// median of 5 rounds of 20 replays), beside read-only kernels over the same W13 bytes and over W13 + W2
// (best of five chunkings; scales not read, ~3 % of the bytes).
//
// Usage: mxfp4_tma_probe [tokens, default 1,4,8,16,20]; Qwen3.5: D 4096, E 513, K 11 (10 of 512 routed
// + the shared expert 512), I 256 (TP4) and 128 (TP8); row-major weights and plain [rows, D / 32] scales.
// Build (sm_90a, the whole package launcher included):
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -DSMALLM_BUILD_ARCH=\"sm_90a\" -Ihip examples/wgmma/mxfp4_tma_probe.cu -o mxp
#include "smallm_moe.hip"

#include <cuda_bf16.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../probe_common.cuh"  // CK, graph_us_per_call, probe_hash, read_floor

namespace mx {
using namespace smallm;
using namespace smallm::tma;

constexpr int kSl = kTmaSlice;           // K per job: 512 (the FP8 TMA gate/up's, so its slice sum applies)
constexpr int kRowBytes = kSl / 2;       // e2m1 bytes per row per job
constexpr int kWBytes = 64 * kRowBytes;  // 16 KB: gate boxes (k bytes 0-127, 128-255), then up boxes
constexpr int kSBytes = 64 * (kSl / 32); // 1 KB of e8m0: gate rows' 16 bytes, then up rows'
constexpr int kStageBytes = kWBytes + kSBytes;
constexpr int kStages = 4;  // per warpgroup
constexpr int kWG = kTmaWarpgroups;
static_assert(kStageBytes % 1024 == 0, "stages keep the 128-byte swizzle's 1024-byte alignment");

struct Shared {
  TmaShared t;  // the routing (and xinv) of the package's TMA gate/up
  unsigned long long full[kWG][kStages];
};
__host__ __device__ constexpr long smem_bytes(int nt) {
  return (long)sizeof(Shared) + 1023 + (long)kWG * kStages * kStageBytes + (long)kWG * kSl * 8 * nt;
}

// e2m1 -> e4m3 magnitudes for 0..7 (0, 0.5, 1, 1.5, 2, 3, 4, 6): byte i of (kLut0, kLut1)
constexpr uint32_t kLut0 = 0x3C383000u, kLut1 = 0x4C484440u;
SMALLM_DEV uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {  // the generic mode: bit 3 replicates a sign
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}
// Eight e2m1 values (low nibble first) as eight e4m3 bytes: values 0-3 into lo, 4-7 into hi.
SMALLM_DEV void e2m1x8_to_e4m3(uint32_t v, uint32_t& lo, uint32_t& hi) {
  const uint32_t v4 = v << 4;  // nibble 2i's sign at bit 8i + 7 (v has nibble 2i + 1's there)
  const uint32_t m0 = prmt(kLut0, kLut1, v & 0x7777u), m1 = prmt(kLut0, kLut1, (v >> 16) & 0x7777u);
  const uint32_t s0 = prmt(v4, v, 0xD9C8u), s1 = prmt(v4, v, 0xFBEAu);  // 0xff where negative
  lo = m0 | (s0 & 0x80808080u);
  hi = m1 | (s1 & 0x80808080u);
}
SMALLM_DEV uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}
SMALLM_DEV uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// The warpgroup's job into stage st (one thread): four W13 boxes and two scale boxes on its barrier.
SMALLM_DEV void issue(const CUtensorMap* wmap, const CUtensorMap* smap, const MoeArgs& a, const Shared& sh, int wg,
                      uint32_t ring, int job, int st, int S, int C) {
  const int u = job / (C * S), c = (job / S) % C, s = job % S, e = sh.t.uni[u];
  const uint32_t bar = saddr(&sh.full[wg][st]), dst = ring + st * kStageBytes;
  mbar_expect(bar, kStageBytes);
  const int rg = e * 2 * a.I + 32 * c;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) tile_copy(dst + h * 8192 + kb * 4096, wmap, s * kRowBytes + 128 * kb, rg + h * a.I, bar);
    tile_copy(dst + kWBytes + h * 512, smap, s * (kSl / 32), rg + h * a.I, bar);
  }
}

// x over slice s as B, after the package's x_scales (each token's power-of-two scale, sh.xinv): hi and lo
// e4m3 parts; k-step j at j 2 NB, 16-k group kc at + kc NB, column n at (n / 8) 128 + (n % 8) 16; group 0
// holds the step's physical k 0-3, 8-11, 16-19, 24-27 and group 1 the others (the weights' decode order).
template <int NT>
SMALLM_DEV void x_parts(const MoeArgs& a, TmaShared& sh, int wg, int s, uint8_t* bx) {
  constexpr int NB = NT * 128;
  const int wt = threadIdx.x % 128;
  for (int un = wt; un < 4 * NT * (kSl / 32); un += 128) {  // (token t < 4 NT, k-step j)
    const int t = un / (kSl / 32), j = un % (kSl / 32);
    uint32_t hw[8] = {0, 0, 0, 0, 0, 0, 0, 0}, lw[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // 4 values each, physical order
    if (t < a.T) {
      const float sc = 1.0f / sh.xinv[wg][t];
      const uint4* xr = reinterpret_cast<const uint4*>(a.x + (size_t)t * a.D + s * kSl + 32 * j);
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const uint4 x4 = xr[v];
        const uint32_t ww[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          uint32_t h0, l0, h1, l1;
          split_pair(ww[2 * i], sc, h0, l0);
          split_pair(ww[2 * i + 1], sc, h1, l1);
          hw[2 * v + i] = h0 | (h1 << 16);
          lw[2 * v + i] = l0 | (l1 << 16);
        }
      }
    }
    uint8_t* at = bx + j * 2 * NB;
    uint8_t* hi_col = at + ((2 * t) / 8) * 128 + ((2 * t) % 8) * 16;
    uint8_t* lo_col = at + ((2 * t + 1) / 8) * 128 + ((2 * t + 1) % 8) * 16;
    *reinterpret_cast<uint4*>(hi_col) = make_uint4(hw[0], hw[2], hw[4], hw[6]);
    *reinterpret_cast<uint4*>(hi_col + NB) = make_uint4(hw[1], hw[3], hw[5], hw[7]);
    *reinterpret_cast<uint4*>(lo_col) = make_uint4(lw[0], lw[2], lw[4], lw[6]);
    *reinterpret_cast<uint4*>(lo_col + NB) = make_uint4(lw[1], lw[3], lw[5], lw[7]);
  }
  fence_proxy_async();
  wg_barrier(wg);
}

SMALLM_DEV void mma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }

// One job's gate/up sums over its slice (tot as the FP8 TMA gate/up's: rows 16 w + g and + 8, columns 2t
// (hi) and 2t + 1 (lo) of tokens 4 jj + q), each k-step's rows scaled by their e8m0 in fp32. The 16
// k-steps go in groups of kG (decoded, then one wgmma each into its own accumulator, one commit); group
// n + 1 is decoded and issued before group n is waited for (two register sets).
// kMode (timing diagnostics, h wrong): 1 nothing (the stream and the loop alone), 2 the decode without
// the MMAs, 3 the MMAs on undecoded bytes.
template <int NT, int kMode>
SMALLM_DEV void job_sums(float (&tot)[4 * NT], uint32_t stage, uint32_t bbase) {
  constexpr int NB = NT * 128, kG = NT <= 2 ? 4 : 2, kGroups = (kSl / 32) / kG;
  const int wt = threadIdx.x % 128, w = wt / 32, lane = wt % 32, g = lane / 4, q = lane % 4;
  const int half = w >> 1, hrow = 16 * (w & 1) + g;  // row g of the warp in its half (gate or up); + 8: row g + 8
  const uint32_t r0 = stage + half * 8192 + hrow * 128 + 4 * q, r1 = r0 + 8 * 128;
  const uint4 sc0 = lds128(stage + kWBytes + half * 512 + hrow * 16), sc1 = lds128(stage + kWBytes + half * 512 + (hrow + 8) * 16);
  const uint32_t s0w[4] = {sc0.x, sc0.y, sc0.z, sc0.w}, s1w[4] = {sc1.x, sc1.y, sc1.z, sc1.w};
#pragma unroll
  for (int i = 0; i < 4 * NT; ++i) tot[i] = 0.0f;
  if constexpr (kMode == 1) return;
  if constexpr (kMode == 2) {  // decode only: every fragment folded into tot
    uint32_t x = 0;
#pragma unroll
    for (int j = 0; j < kSl / 32; ++j) {
      const uint32_t off = (j / 8) * 4096 + 16 * ((j % 8) ^ g);
      uint32_t a0, a1, a2, a3;
      e2m1x8_to_e4m3(lds32(r0 + off), a0, a2);
      e2m1x8_to_e4m3(lds32(r1 + off), a1, a3);
      x ^= (a0 + a1) ^ (a2 + a3) ^ (s0w[j / 4] + s1w[j / 4]);
    }
    tot[0] = __uint_as_float(x & 0x3fffffffu);
    return;
  }
  uint32_t A[2][kG][4];
  float acc[2][kG][4 * NT];
  const uint64_t bdesc = desc_plain(bbase, NB, 128);  // k-step j: its start address field + j 2 NB / 16
  auto issue_group = [&](int grp, int b) {
#pragma unroll
    for (int k = 0; k < kG; ++k) {
      const int j = kG * grp + k;
      const uint32_t off = (j / 8) * 4096 + 16 * ((j % 8) ^ g);
      if constexpr (kMode == 3) {
        A[b][k][0] = lds32(r0 + off), A[b][k][1] = lds32(r1 + off);
        A[b][k][2] = A[b][k][0] >> 4, A[b][k][3] = A[b][k][1] >> 4;
      } else {
        e2m1x8_to_e4m3(lds32(r0 + off), A[b][k][0], A[b][k][2]);
        e2m1x8_to_e4m3(lds32(r1 + off), A[b][k][1], A[b][k][3]);
      }
    }
    mma_fence();
#pragma unroll
    for (int k = 0; k < kG; ++k) mma_ra<NT, false>(acc[b][k], A[b][k], bdesc + (uint64_t)(((kG * grp + k) * 2 * NB) >> 4));
    mma_commit();
  };
  auto finish_group = [&](int grp, int b) {  // after the wait that covers it
#pragma unroll
    for (int k = 0; k < kG; ++k) {
      hold(acc[b][k]);
      hold_regs(A[b][k]);
    }
#pragma unroll
    for (int k = 0; k < kG; ++k) {
      const int j = kG * grp + k;
      const float f0 = e8m0_byte_to_f32_flush(s0w[j / 4], j % 4), f1 = e8m0_byte_to_f32_flush(s1w[j / 4], j % 4);
#pragma unroll
      for (int jj = 0; jj < NT; ++jj) {
        tot[4 * jj] = fmaf(acc[b][k][4 * jj], f0, tot[4 * jj]);
        tot[4 * jj + 1] = fmaf(acc[b][k][4 * jj + 1], f0, tot[4 * jj + 1]);
        tot[4 * jj + 2] = fmaf(acc[b][k][4 * jj + 2], f1, tot[4 * jj + 2]);
        tot[4 * jj + 3] = fmaf(acc[b][k][4 * jj + 3], f1, tot[4 * jj + 3]);
      }
    }
  };
  issue_group(0, 0);
#pragma unroll
  for (int grp = 1; grp < kGroups; ++grp) {
    issue_group(grp, grp & 1);
    mma_wait1();
    finish_group(grp - 1, (grp - 1) & 1);
  }
  mma_wait0();
  finish_group(kGroups - 1, (kGroups - 1) & 1);
}

template <int NT, int kMode>
__global__ void __launch_bounds__(kTmaThreads, 1)
    gateup(const __grid_constant__ CUtensorMap wmap, const __grid_constant__ CUtensorMap smap, MoeArgs a) {
#if defined(SMALLM_SM90_TMA)
  grid_dependents_launch();  // the slice sum may launch now (it waits for this grid before reading)
  constexpr int kXBytes = kSl * 8 * NT;
  extern __shared__ __align__(128) uint8_t smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  const int tid = threadIdx.x, wg = tid / 128, wt = tid % 128;
  const uint32_t base0 = (saddr(smem) + (uint32_t)sizeof(Shared) + 1023u) & ~1023u;
  const uint32_t ring = base0 + (uint32_t)(wg * kStages * kStageBytes);
  uint8_t* bx = smem + (base0 - saddr(smem)) + kWG * kStages * kStageBytes + wg * kXBytes;
  if (wt == 0) {
    for (int i = 0; i < kStages; ++i) mbar_init(saddr(&sh.full[wg][i]));
    mbar_init_fence();
  }
  route(a.topk_ids, a.T, a.K, a.E, sh.t);
  const int P = a.T * a.K, S = a.D / kSl, C = a.I / 32, G = gridDim.x * kWG;
  const int njobs = sh.t.nu * C * S, job0 = blockIdx.x * kWG + wg, s = job0 % S;
  float* part = a.h + (size_t)P * a.I;  // [S][P][2I], as the FP8 TMA gate/up's
  x_scales(a, sh.t, wg, s);  // x read before the grid's first copies are in flight ("h200-mxtma" run 5)
  if (wt == 0)
    for (int n = 0; n < kStages && job0 + n * G < njobs; ++n) issue(&wmap, &smap, a, sh, wg, ring, job0 + n * G, n, S, C);
  x_parts<NT>(a, sh.t, wg, s, bx);
  const uint32_t bbase = saddr(bx);
  for (int n = 0;; ++n) {
    const int job = job0 + n * G;
    if (job >= njobs) break;
    const int st = n % kStages, u = job / (C * S), c = (job / S) % C;
    mbar_wait(saddr(&sh.full[wg][st]), (n / kStages) & 1);
    float tot[4 * NT];
    job_sums<NT, kMode>(tot, ring + st * kStageBytes, bbase);
    wg_barrier(wg);  // every warp has waited for its MMAs and read its scales: refill
    if (wt == 0 && job + kStages * G < njobs) issue(&wmap, &smap, a, sh, wg, ring, job + kStages * G, st, S, C);
    write_partials<NT>(tot, a, sh.t, part, wg, u, c, s);
  }
#endif
}

// ------------------------------------------------------------------ reference, floor, data
__device__ double e2m1_value(uint32_t n) {
  const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return (n & 8) ? -mag[n & 7] : mag[n & 7];
}
__global__ void reference_h(MoeArgs a, float* h) {  // one thread per (pair, i), fp64
  const int i = blockIdx.x * blockDim.x + threadIdx.x, P = a.T * a.K;
  if (i >= P * a.I) return;
  const int p = i / a.I, j = i % a.I, e = a.topk_ids[p], t = p / a.K;
  const uint8_t* s13 = static_cast<const uint8_t*>(a.s13);
  double sum[2] = {0, 0};
  for (int half = 0; half < 2; ++half) {
    const size_t row = (size_t)e * 2 * a.I + half * a.I + j;
    for (int k = 0; k < a.D; ++k) {
      const uint32_t byte = a.w13[row * (a.D / 2) + k / 2];
      const double w = e2m1_value(k % 2 ? byte >> 4 : byte & 15) * ldexp(1.0, (int)s13[row * (a.D / 32) + k / 32] - 127);
      sum[half] += (double)__bfloat162float(__ushort_as_bfloat16(a.x[(size_t)t * a.D + k])) * w;
    }
  }
  h[i] = (float)(sum[0] / (1.0 + exp(-sum[0])) * sum[1]);
}
__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed, uint32_t mask, uint32_t add) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (uint8_t)((probe_hash(i, seed) & mask) + add);
}

}  // namespace mx

using namespace smallm;

// Tensor maps by the package's encoder (smallm_moe.hip: encode_rows_map, through tma_encoder); the probe
// stops where the driver refuses one.
static void encode_map(CUtensorMap& map, const uint8_t* base, long kbytes, long rows, int box_bytes, bool swizzle) {
  if (encode_rows_map(map, base, kbytes, rows, 32, box_bytes, swizzle) != 0) {
    printf("cuTensorMapEncodeTiled failed\n");
    exit(2);
  }
}

struct Copy {
  uint8_t *w13, *w2, *s13, *s2;
  CUtensorMap wmap, smap;
};
struct Call {
  MoeArgs a;
  const Copy* cp;
  int* experts;  // distinct experts (floor)
  int nu;
};

static int g_mode = 0;  // PROBE_MODE (timing diagnostics; see job_sums): up to 8 tokens
template <int NT, int kMode>
static void mx_launch(const Call& c, int grid, cudaStream_t st) {
  static bool raised = false;
  const int smem = (int)mx::smem_bytes(NT);
  if (!raised) {
    CK(cudaFuncSetAttribute(mx::gateup<NT, kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    raised = true;
  }
  mx::gateup<NT, kMode><<<grid, kTmaThreads, smem, st>>>(c.cp->wmap, c.cp->smap, c.a);
}
static void mx_gateup(const Call& c, int grid, cudaStream_t st) {
  const int nt = (c.a.T + 3) / 4;
  if (g_mode) {
    if (nt > 2) {
      printf("PROBE_MODE takes at most 8 tokens\n");
      exit(2);
    }
    if (g_mode == 1) nt == 1 ? mx_launch<1, 1>(c, grid, st) : mx_launch<2, 1>(c, grid, st);
    if (g_mode == 2) nt == 1 ? mx_launch<1, 2>(c, grid, st) : mx_launch<2, 2>(c, grid, st);
    if (g_mode == 3) nt == 1 ? mx_launch<1, 3>(c, grid, st) : mx_launch<2, 3>(c, grid, st);
    return;
  }
  switch (nt) {
    case 1: mx_launch<1, 0>(c, grid, st); break;
    case 2: mx_launch<2, 0>(c, grid, st); break;
    case 3: mx_launch<3, 0>(c, grid, st); break;
    case 4: mx_launch<4, 0>(c, grid, st); break;
    default: mx_launch<5, 0>(c, grid, st); break;
  }
}
// The new layer: the probe's gate/up, the package's slice sum and its MXFP4 down (as the launcher takes them).
static int new_layer(const Call& c, int grid, cudaStream_t st) {
  mx_gateup(c, grid, st);
  MoeArgs b = c.a;
  b.nblocks = (b.T * b.K * b.I + 255) / 256;
  if (const int err = launch_dependent(smallm_tma_slice_sum_kernel, b, 0, st)) return err;
  const int lo_bytes = down_mma_lo_bytes<kMxfp4>(c.a);
  if (lo_bytes) return launch_down_mma_teams<kMxfp4, kRowMajor>(c.a, lo_bytes == 1, st);
  return launch_down<kMxfp4, kRowMajor>(c.a, st);
}
static int pkg_gateup(const Call& c, cudaStream_t st) {  // the package's MXFP4 tensor-core gate/up alone
  const bool j4 = c.a.D / mma_step_values<kMxfp4>() <= 4 * kWarps;
  return j4 ? launch_gateup_mma_teams<kMxfp4, kRowMajor, 4>(c.a, st) : launch_gateup_mma_teams<kMxfp4, kRowMajor, 8>(c.a, st);
}

static double rel_l2(const std::vector<float>& v, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) return 1e9;
    num += (double)(v[i] - ref[i]) * (v[i] - ref[i]);
    den += (double)ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}
static std::vector<float> bf16_to_f32(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    const uint32_t u = (uint32_t)b[i] << 16;
    memcpy(&f[i], &u, 4);
  }
  return f;
}

int main(int argc, char** argv) {
  const std::vector<int> toks = token_counts(argc, argv, {1, 4, 8, 16, 20});
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int SM = prop.multiProcessorCount, E = 513, K = 11, D = 4096, copies = 8;
  if (!tma_encoder()) {
    printf("cuTensorMapEncodeTiled not found in the driver\n");
    return 2;
  }
  const int grid = gateup_tma_grid(D, SM);
  printf("device %s, %d SMs; MXFP4 TMA gate/up grid %d x %d threads, %d stages of %d bytes per warpgroup, smem %ld (NT 5)\n",
         prop.name, SM, grid, kTmaThreads, mx::kStages, mx::kStageBytes, mx::smem_bytes(5));
  g_mode = getenv("PROBE_MODE") ? atoi(getenv("PROBE_MODE")) : 0;
  if (g_mode) printf("PROBE_MODE=%d: timing only (h_err and out_vs_pkg not meaningful)\n", g_mode);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  unsigned* sink;
  CK(cudaMalloc(&sink, 4));
  printf("%-5s %3s %4s | %9s %9s %8s | %9s %9s %9s %7s %7s | %9s %9s %9s\n", "shape", "T", "U", "gu_pkg", "gu_new", "fl_w13",
         "layer_pkg", "layer_new", "fl_all", "pkg/fl", "new/fl", "h_err_pkg", "h_err_new", "out_vs_pkg");
  bool all_ok = true;
  for (int I : {256, 128}) {
    const size_t b13 = (size_t)E * 2 * I * D / 2, b2 = (size_t)E * D * I / 2;
    std::vector<Copy> cp(copies);
    for (int c = 0; c < copies; ++c) {
      CK(cudaMalloc(&cp[c].w13, b13));
      CK(cudaMalloc(&cp[c].w2, b2));
      CK(cudaMalloc(&cp[c].s13, b13 / 16));
      CK(cudaMalloc(&cp[c].s2, b2 / 16));
      mx::fill_bytes<<<1024, 256>>>(cp[c].w13, b13, 11 + c, 0xff, 0);
      mx::fill_bytes<<<1024, 256>>>(cp[c].w2, b2, 31 + c, 0xff, 0);
      mx::fill_bytes<<<1024, 256>>>(cp[c].s13, b13 / 16, 51 + c, 0x7, 120);  // e8m0 2^-7 .. 2^0
      mx::fill_bytes<<<1024, 256>>>(cp[c].s2, b2 / 16, 71 + c, 0x7, 120);
      encode_map(cp[c].wmap, cp[c].w13, D / 2, (long)E * 2 * I, 128, true);
      encode_map(cp[c].smap, cp[c].s13, D / 32, (long)E * 2 * I, 16, false);
    }
    CK(cudaDeviceSynchronize());
    for (int T : toks) {
      const int P = T * K;
      if (T < 1 || T > kTmaMaxTokens) {
        printf("T=%d: outside 1..%d\n", T, kTmaMaxTokens);
        continue;
      }
      std::vector<Call> calls(copies);
      std::mt19937 rng(1000 * T + I);
      for (int c = 0; c < copies; ++c) {
        std::vector<int> ids(P), distinct;
        for (int t = 0; t < T; ++t) {  // 10 distinct routed experts of 512, then the shared expert 512
          std::vector<int> pool(512);
          for (int i = 0; i < 512; ++i) pool[i] = i;
          for (int k = 0; k < K - 1; ++k) {
            std::swap(pool[k], pool[k + rng() % (512 - k)]);
            ids[t * K + k] = pool[k];
          }
          ids[t * K + K - 1] = 512;
        }
        for (int v : ids)
          if (std::find(distinct.begin(), distinct.end(), v) == distinct.end()) distinct.push_back(v);
        std::vector<uint16_t> hx((size_t)T * D);
        for (size_t i = 0; i < hx.size(); ++i) {  // rows of different magnitudes, some tiny values
          const float mag = std::ldexp(1.0f, (int)(i / D) % 7 - 3), v = (int)(rng() % 2001 - 1000) / 1000.0f;
          const float f = mag * (rng() % 16 == 0 ? v * 1e-3f : v);
          uint32_t u;
          memcpy(&u, &f, 4);
          hx[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
        std::vector<float> tw(P);
        for (auto& v : tw) v = 0.05f + (rng() % 1000) / 10000.0f;
        Call& k = calls[c];
        k.cp = &cp[c];
        k.nu = (int)distinct.size();
        MoeArgs& a = k.a;
        a = MoeArgs{};
        int *d_ids;
        uint16_t *d_x, *d_out;
        float *d_h, *d_y, *d_tw;
        unsigned* d_sync;
        CK(cudaMalloc(&d_ids, P * 4));
        CK(cudaMalloc(&d_x, (size_t)T * D * 2));
        CK(cudaMalloc(&d_out, (size_t)T * D * 2));
        CK(cudaMalloc(&d_h, h_words(D, I) * 4));
        CK(cudaMalloc(&d_y, (size_t)kMaxPairs * D * 4));
        CK(cudaMalloc(&d_tw, P * 4));
        CK(cudaMalloc(&d_sync, (size_t)sync_words(T, D) * 4));
        CK(cudaMemset(d_sync, 0, (size_t)sync_words(T, D) * 4));
        CK(cudaMalloc(&k.experts, distinct.size() * 4));
        CK(cudaMemcpy(d_ids, ids.data(), P * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_tw, tw.data(), P * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(k.experts, distinct.data(), distinct.size() * 4, cudaMemcpyHostToDevice));
        a.x = d_x, a.w13 = cp[c].w13, a.w2 = cp[c].w2, a.s13 = cp[c].s13, a.s2 = cp[c].s2, a.topk_w = d_tw, a.topk_ids = d_ids;
        a.out = d_out, a.h = d_h, a.y = d_y, a.sync = d_sync;
        a.T = T, a.K = K, a.E = E, a.D = D, a.I = I, a.Iw = I, a.out_scale = 1.0f, a.x_prefetch = 1;
        a.pair_magic = PairToken::magic_of(K);
        a.tile_magic = JobExpert::magic_of(I / 4);
        if ((long)T * K * I + tma_partial_words(T, K, D, I) > h_words(D, I)) {
          printf("workspace too small for the partial sums\n");
          return 2;
        }
      }
      // correctness (every copy): h and out of the package's layer, then of the new one (poisoned before
      // each call, two calls of the new one compared bit for bit), h against fp64
      double eh_pkg = 0, eh_new = 0, eo = 0;
      bool same = true;
      for (int c = 0; c < copies; ++c) {
        const MoeArgs& a = calls[c].a;
        const size_t nh = (size_t)P * I, no = (size_t)T * D;
        std::vector<float> h_pkg(nh), h1(nh), h2(nh), ref(nh);
        std::vector<uint16_t> o_pkg(no), o1(no), o2(no);
        CK(cudaMemsetAsync(a.h, 0xff, h_words(D, I) * 4, st));
        CK(cudaMemsetAsync(a.out, 0xff, no * 2, st));
        if (smallm_moe_launch(a, kMxfp4, kRowMajor, st)) {
          printf("package launch failed\n");
          return 1;
        }
        CK(cudaMemcpyAsync(h_pkg.data(), a.h, nh * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaMemcpyAsync(o_pkg.data(), a.out, no * 2, cudaMemcpyDeviceToHost, st));
        for (int rep = 0; rep < 2; ++rep) {
          CK(cudaMemsetAsync(a.h, 0xff, h_words(D, I) * 4, st));
          CK(cudaMemsetAsync(a.out, 0xff, no * 2, st));
          if (new_layer(calls[c], grid, st)) {
            printf("new layer launch failed\n");
            return 1;
          }
          CK(cudaMemcpyAsync((rep ? h2 : h1).data(), a.h, nh * 4, cudaMemcpyDeviceToHost, st));
          CK(cudaMemcpyAsync((rep ? o2 : o1).data(), a.out, no * 2, cudaMemcpyDeviceToHost, st));
        }
        float* rh;
        CK(cudaMalloc(&rh, nh * 4));
        mx::reference_h<<<(unsigned)((nh + 127) / 128), 128, 0, st>>>(a, rh);
        CK(cudaMemcpyAsync(ref.data(), rh, nh * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        CK(cudaFree(rh));
        same &= memcmp(h1.data(), h2.data(), nh * 4) == 0 && memcmp(o1.data(), o2.data(), no * 2) == 0;
        eh_pkg = std::max(eh_pkg, rel_l2(h_pkg, ref));
        eh_new = std::max(eh_new, rel_l2(h1, ref));
        eo = std::max(eo, rel_l2(bf16_to_f32(o1), bf16_to_f32(o_pkg)));
      }
      auto time_graph = [&](auto body) { return graph_us_per_call(st, copies, body); };
      const float gu_pkg = time_graph([&] {
        for (int c = 0; c < copies; ++c) pkg_gateup(calls[c], st);
      });
      const float gu_new = time_graph([&] {
        for (int c = 0; c < copies; ++c) mx_gateup(calls[c], grid, st);
      });
      const float layer_pkg = time_graph([&] {
        for (int c = 0; c < copies; ++c) smallm_moe_launch(calls[c].a, kMxfp4, kRowMajor, st);
      });
      const float layer_new = time_graph([&] {
        for (int c = 0; c < copies; ++c) new_layer(calls[c], grid, st);
      });
      float fl13 = 1e9f, flall = 1e9f;
      for (int chunks : {4, 8, 16, 32, 64}) {
        fl13 = std::min(fl13, time_graph([&] {
                          for (int c = 0; c < copies; ++c)
                            read_floor<<<calls[c].nu * chunks, 256, 0, st>>>(cp[c].w13, (long)I * D, cp[c].w2, 0,
                                                                                calls[c].experts, calls[c].nu, chunks, sink);
                        }));
        flall = std::min(flall, time_graph([&] {
                           for (int c = 0; c < copies; ++c)
                             read_floor<<<2 * calls[c].nu * chunks, 256, 0, st>>>(cp[c].w13, (long)I * D, cp[c].w2,
                                                                                     (long)D * I / 2, calls[c].experts,
                                                                                     calls[c].nu, chunks, sink);
                         }));
      }
      CK(cudaGetLastError());
      const bool ok = g_mode || (eh_new <= 1e-3 && same);
      all_ok &= ok;
      printf("%-5s %3d %4d | %9.1f %9.1f %8.1f | %9.1f %9.1f %9.1f %6.2fx %6.2fx | %9.2e %9.2e %9.2e%s%s\n",
             I == 256 ? "TP4" : "TP8", T, calls[0].nu, gu_pkg, gu_new, fl13, layer_pkg, layer_new, flall, layer_pkg / flall,
             layer_new / flall, eh_pkg, eh_new, eo, same ? "" : "  NONDETERMINISTIC", ok ? "" : "  FAIL");
      fflush(stdout);
      for (auto& k : calls) {
        cudaFree((void*)k.a.topk_ids), cudaFree((void*)k.a.x), cudaFree(k.a.out), cudaFree(k.a.h), cudaFree(k.a.y);
        cudaFree((void*)k.a.topk_w), cudaFree(k.a.sync), cudaFree(k.experts);
      }
    }
    for (auto& c : cp) cudaFree(c.w13), cudaFree(c.w2), cudaFree(c.s13), cudaFree(c.s2);
  }
  printf("%s\n", all_ok ? "ALL PASS" : "SOME FAIL");
  return all_ok ? 0 : 1;
}
