// smallm_moe.h: the fused small-M MoE kernel template, shared by gfx950 and sm_90a.
//
// One launch computes, for T tokens routed to K slots each,
//   out[t] = scale * sum_s w[t,s] * W2[e]ᵀ( silu(W1g[e] x[t]) * (W1u[e] x[t]) ),  e = ids[t,s]
// with quantized expert weights (FP8 e4m3 + fp32 128x128 block scales, or MXFP4 e2m1 + e8m0
// per 32), bf16 activations in, bf16 out, fp32 accumulation and an fp32 intermediate.
//
// Work decomposition (no sort; each expert's weights are read once per call):
//   prologue  every block derives, from topk_ids, the distinct experts in order of first
//             occurrence and the (token, slot) pairs of each (in shared memory);
//   phase 1   item (expert u, 16-row group g): gate rows g*16.., up rows I+g*16.. -> h[pair, rows]
//   phase 2   item (expert u, 256-row range r): y[pair, rows] = W2 rows . h[pair]; the block that
//             completes the last slot of a token for that row range writes out[token, rows],
//             summing slots in slot order (deterministic).
// Items are handed out by an atomic ticket in increasing order: a phase-2 item waits only on
// phase-1 items with lower tickets, which running blocks already hold and which never wait, so
// the launch cannot deadlock whatever the residency. Phase-2 blocks load their W2 rows before
// waiting. All counters are reset by their last user, so the workspace stays valid across calls
// and CUDA-graph replays without a memset.
#pragma once

#include "smallm_args.h"
#include "smallm_compat.h"

namespace smallm {

constexpr int kMC = 4;       // pairs accumulated per pass
constexpr int kChunk2 = 8;   // W2 vectors per thread held in registers
constexpr int kU1 = 2;       // phase-1 vectors per thread per batch (x2: gate and up)
constexpr int kWarps = kThreads / kWarp;

// Two resident blocks per SM / CU: registers capped at 128 (CUDA) / 256 (gfx950 wave64).
#if defined(SMALLM_HIP)
#define SMALLM_BOUNDS __attribute__((amdgpu_flat_work_group_size(1, 256), amdgpu_waves_per_eu(2)))
#else
#define SMALLM_BOUNDS __launch_bounds__(256, 2)
#endif

// ------------------------------------------------------------------ format policies
template <int Fmt>
struct Format;

template <>
struct Format<kFp8Block128> {
  static constexpr int kElems = 16;  // values per 16-byte vector
  static constexpr int kRowBytesDiv = 1;
  // Scale of vector `kvi` in row `row` of expert `e`'s [rows, kdim] matrix.
  template <int Layout>
  SMALLM_DEV static float scale(const void* s, int e, int rows, int kdim, int row, int kvi) {
    (void)e; (void)row;
    const float* f = static_cast<const float*>(s);
    const int nkb = kdim / 128, nrb = rows / 128;
    return f[((size_t)e * nrb + row / 128) * nkb + (kvi * kElems) / 128];
  }
  SMALLM_DEV static float dot_bf16(const Vec16& w, const Vec16* x) { return dot16_fp8_bf16(w, x[0], x[1]); }
  SMALLM_DEV static void decode(const Vec16& w, float* f) { decode16_fp8(w, f); }
};

template <>
struct Format<kMxfp4> {
  static constexpr int kElems = 32;
  static constexpr int kRowBytesDiv = 2;
  // e8m0 per 32 values: one scale per vector. Shuffled weights come with scales in AITER's
  // e8m0_shuffle layout over the flattened [E*rows, kdim/32] matrix (columns padded to 8).
  template <int Layout>
  SMALLM_DEV static float scale(const void* s, int e, int rows, int kdim, int row, int kvi) {
    const uint8_t* b = static_cast<const uint8_t*>(s);
    const int cols = kdim / 32;
    const size_t R = (size_t)e * rows + row;
    if (Layout == kRowMajor) return e8m0_to_f32(b[R * cols + kvi]);
    const int cp = (cols + 7) / 8 * 8;
    const size_t a = R / 32, bb = (R / 16) % 2, cc = R % 16;
    const size_t d = kvi / 8, f = (kvi / 4) % 2, g = kvi % 4;
    return e8m0_to_f32(b[((((a * (cp / 8) + d) * 4 + g) * 16 + cc) * 2 + f) * 2 + bb]);
  }
  SMALLM_DEV static float dot_bf16(const Vec16& w, const Vec16* x) { return dot32_fp4_bf16(w, x); }
  SMALLM_DEV static void decode(const Vec16& w, float* f) { decode32_fp4(w, f); }
};

// Byte offset of 16-byte vector `kvi` of row `row` in a [rows, row_bytes] matrix.
template <int Layout>
SMALLM_DEV size_t vec_offset(int row, int kvi, int row_bytes) {
  if (Layout == kRowMajor) return (size_t)row * row_bytes + (size_t)kvi * 16;
  // AITER shuffle_weight(layout=(16,16)): tiles of 16 rows x 32 bytes in (row-tile, k-tile)
  // order; inside a tile [vector along K (2)][row (16)][16 bytes].
  const int rt = row >> 4, r = row & 15, kt = kvi >> 1, kv = kvi & 1;
  return ((size_t)rt * (row_bytes / 32) + kt) * 512 + kv * 256 + r * 16;
}

// ------------------------------------------------------------------ warp helpers
SMALLM_DEV int lane_id() { return thread_id() % kWarp; }

SMALLM_DEV uint64_t ballot(bool p) {
#if defined(SMALLM_HIP)
  return __builtin_amdgcn_ballot_w64(p);
#else
  return (uint64_t)__ballot_sync(0xffffffffu, p);
#endif
}

SMALLM_DEV int popc64(uint64_t v) { return __builtin_popcountll(v); }

SMALLM_DEV float warp_row_sum(float v) {  // sum over lanes that share lane % 16
#pragma unroll
  for (int m = 16; m < kWarp; m <<= 1) v += shfl_xor(v, m);
  return v;
}

SMALLM_DEV float silu(float g) { return g / (1.0f + fexp(-g)); }

struct Routing {
  int id[kMaxPairs];        // expert of each pair, -1 when out of range
  int e2u[kMaxExperts];     // first pair of an expert, then -(distinct index + 1)
  int ulead[kMaxPairs];     // first pair of distinct expert u
  int ucnt[kMaxPairs + 1];  // pairs of u; then offsets into plist
  int ufill[kMaxPairs];
  int plist[kMaxPairs];     // pairs grouped by distinct expert
  int nd;
  int ticket, next;
  int nfin;
  int fin[kMaxPairs];
};

// Derive distinct experts (first-occurrence order) and their pair lists.
SMALLM_DEV void build_routing(const MoeArgs& a, Routing& R) {
  const int t = thread_id();
  const int N = a.T * a.K;
  for (int p = t; p < N; p += kThreads) {
    const int e = a.topk_ids[p];
    R.id[p] = (e >= 0 && e < a.E) ? e : -1;
    R.ucnt[p] = 0;
    R.ufill[p] = 0;
  }
  for (int e = t; e < a.E; e += kThreads) R.e2u[e] = 0x7fffffff;
  block_sync();
  for (int p = t; p < N; p += kThreads)
    if (R.id[p] >= 0) smem_atomic_min(&R.e2u[R.id[p]], p);
  block_sync();
  if (t < kWarp) {  // warp 0: number the leaders in pair order
    int base = 0;
    for (int p0 = 0; p0 < N; p0 += kWarp) {
      const int p = p0 + t;
      const bool lead = p < N && R.id[p] >= 0 && R.e2u[R.id[p]] == p;
      const uint64_t m = ballot(lead);
      if (lead) {
        const int u = base + popc64(m & ((uint64_t(1) << t) - 1));
        R.ulead[u] = p;
        R.e2u[R.id[p]] = -(u + 1);
      }
      base += popc64(m);
    }
    if (t == 0) R.nd = base;
  }
  block_sync();
  for (int p = t; p < N; p += kThreads)
    if (R.id[p] >= 0) smem_atomic_add(&R.ucnt[-R.e2u[R.id[p]] - 1], 1);
  block_sync();
  if (t < kWarp) {  // warp 0: exclusive scan of counts -> offsets (ucnt becomes offsets)
    int base = 0;
    const int nd = R.nd;
    for (int u0 = 0; u0 <= nd; u0 += kWarp) {
      const int u = u0 + t;
      int v = u < nd ? R.ucnt[u] : 0;
      int incl = v;
#pragma unroll
      for (int o = 1; o < kWarp; o <<= 1) {
#if defined(SMALLM_HIP)
        const int lane = t;
        int n = __builtin_amdgcn_ds_bpermute((lane >= o ? lane - o : lane) << 2, incl);
#else
        int n = __shfl_up_sync(0xffffffffu, incl, o);
#endif
        if (t >= o) incl += n;
      }
      if (u <= nd) R.ucnt[u] = base + incl - v;
#if defined(SMALLM_HIP)
      base += __builtin_amdgcn_readlane(incl, kWarp - 1);
#else
      base += __shfl_sync(0xffffffffu, incl, kWarp - 1);
#endif
    }
  }
  block_sync();
  for (int p = t; p < N; p += kThreads)
    if (R.id[p] >= 0) {
      const int u = -R.e2u[R.id[p]] - 1;
      R.plist[R.ucnt[u] + smem_atomic_add(&R.ufill[u], 1)] = p;
    }
  block_sync();
}


SMALLM_DEV int imin(int a, int b) { return a < b ? a : b; }

// ------------------------------------------------------------------ phase 1
// Item (distinct expert u, 16-row group grp): thread t owns row t%16 of the group and the
// vectors kvi = t/16 + 16j along K; 16 threads share a row and are reduced at the end.
template <int Fmt, int Layout>
SMALLM_DEV void phase1_item(const MoeArgs& a, const Routing& R, int u, int grp,
                            float (*red)[2][kMC][16]) {
  using F = Format<Fmt>;
  const int t = thread_id(), r = t & 15, c = t >> 4, w = t / kWarp;
  const int lead = R.ulead[u], e = R.id[lead];
  const int rowb = a.D / F::kRowBytesDiv, nv = rowb / 16, rows13 = 2 * a.I;
  const uint8_t* wb = a.w13 + (size_t)e * rows13 * rowb;
  const int rg = grp * 16 + r, ru = a.I + grp * 16 + r;
  const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
  constexpr int kXv = F::kElems / 8;  // bf16 activation vectors per weight vector
  for (int m0 = 0; m0 < M; m0 += kMC) {
    const int mc = imin(kMC, M - m0);
    const uint16_t* xrow[kMC];
#pragma unroll
    for (int m = 0; m < kMC; ++m)
      xrow[m] = a.x + (size_t)(R.plist[beg + m0 + (m < mc ? m : 0)] / a.K) * a.D;
    float ag[kMC], au[kMC];
#pragma unroll
    for (int m = 0; m < kMC; ++m) ag[m] = au[m] = 0.0f;
    for (int j0 = 0; j0 * 16 < nv; j0 += kU1) {
      Vec16 wg[kU1], wu[kU1];
      float sg[kU1], su[kU1];
#pragma unroll
      for (int q = 0; q < kU1; ++q) {
        const int kvi = c + 16 * (j0 + q);
        if (kvi < nv) {
          wg[q] = load_weights(wb + vec_offset<Layout>(rg, kvi, rowb));
          wu[q] = load_weights(wb + vec_offset<Layout>(ru, kvi, rowb));
          sg[q] = F::template scale<Layout>(a.s13, e, rows13, a.D, rg, kvi);
          su[q] = F::template scale<Layout>(a.s13, e, rows13, a.D, ru, kvi);
        }
      }
#pragma unroll
      for (int q = 0; q < kU1; ++q) {
        const int kvi = c + 16 * (j0 + q);
        if (kvi < nv) {
#pragma unroll
          for (int m = 0; m < kMC; ++m) {
            if (m < mc) {
              Vec16 xv[kXv];
#pragma unroll
              for (int i = 0; i < kXv; ++i) xv[i] = load_cached(xrow[m] + kvi * F::kElems + 8 * i);
              ag[m] = ffma(sg[q], F::dot_bf16(wg[q], xv), ag[m]);
              au[m] = ffma(su[q], F::dot_bf16(wu[q], xv), au[m]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kMC; ++m) {
      const float g = warp_row_sum(ag[m]), v = warp_row_sum(au[m]);
      if (lane_id() < 16) {
        red[w][0][m][r] = g;
        red[w][1][m][r] = v;
      }
    }
    block_sync();
    if (t < 16 * kMC) {
      const int m = t >> 4, rr = t & 15;
      if (m < mc) {
        float g = 0.0f, v = 0.0f;
        for (int ww = 0; ww < kWarps; ++ww) {
          g += red[ww][0][m][rr];
          v += red[ww][1][m][rr];
        }
        a.h[(size_t)R.plist[beg + m0 + m] * a.I + grp * 16 + rr] = silu(g) * v;
      }
    }
    block_sync();
  }
  fence_release();
  block_sync();
  if (t == 0) atomic_add_release(&a.sync[kSyncDone1 + lead], 1u);
}

// ------------------------------------------------------------------ phase 2
// Item (distinct expert u, row range rng): thread t owns output row rng*256+t over the whole
// intermediate dimension; h of up to kMC pairs is staged in shared memory.
template <int Fmt, int Layout>
SMALLM_DEV void phase2_item(const MoeArgs& a, Routing& R, int u, int rng, float* hs) {
  using F = Format<Fmt>;
  const int t = thread_id();
  const int lead = R.ulead[u], e = R.id[lead];
  const int row = rng * kRows2 + t;
  const bool live = row < a.D;
  const int rowb = a.I / F::kRowBytesDiv, nv = rowb / 16;
  const int nch = (nv + kChunk2 - 1) / kChunk2;
  const uint8_t* wb = a.w2 + (size_t)e * a.D * rowb;
  const int g1 = a.I / 16, ndr = (a.D + kRows2 - 1) / kRows2;
  Vec16 wv[kChunk2];
  float sc[kChunk2];
  auto load_chunk = [&](int ch) {
#pragma unroll
    for (int q = 0; q < kChunk2; ++q) {
      const int kvi = ch * kChunk2 + q;
      if (live && kvi < nv) {
        wv[q] = load_weights(wb + vec_offset<Layout>(row, kvi, rowb));
        sc[q] = F::template scale<Layout>(a.s2, e, a.D, a.I, row, kvi);
      }
    }
  };
  load_chunk(0);  // W2 does not depend on phase 1: fetch it before waiting
  if (t == 0)
    while (load_acquire(&a.sync[kSyncDone1 + lead]) < (unsigned)g1) pause();
  block_sync();
  const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
  for (int m0 = 0; m0 < M; m0 += kMC) {
    const int mc = imin(kMC, M - m0);
    for (int i = t; i < mc * a.I; i += kThreads) {
      const int m = i / a.I, k = i - m * a.I;
      hs[m * kMaxInter + k] = load_coherent(&a.h[(size_t)R.plist[beg + m0 + m] * a.I + k]);
    }
    block_sync();
    float acc[kMC];
#pragma unroll
    for (int m = 0; m < kMC; ++m) acc[m] = 0.0f;
    for (int ch = 0; ch < nch; ++ch) {
      if (nch > 1 && (ch > 0 || m0 > 0)) load_chunk(ch);
#pragma unroll
      for (int q = 0; q < kChunk2; ++q) {
        const int kvi = ch * kChunk2 + q;
        if (live && kvi < nv) {
          float f[F::kElems];
          F::decode(wv[q], f);
#pragma unroll
          for (int m = 0; m < kMC; ++m) {
            if (m < mc) {
              const float* hp = hs + m * kMaxInter + kvi * F::kElems;
              float s = 0.0f;
#pragma unroll
              for (int i = 0; i < F::kElems; ++i) s = ffma(f[i], hp[i], s);
              acc[m] = ffma(sc[q], s, acc[m]);
            }
          }
        }
      }
    }
    if (live)
      for (int m = 0; m < mc; ++m) a.y[(size_t)R.plist[beg + m0 + m] * a.D + row] = acc[m];
    block_sync();
  }
  if (t == 0) R.nfin = 0;
  fence_release();
  block_sync();
  if (t == 0 && atomic_add_release(&a.sync[kSyncUsed1 + lead], 1u) == (unsigned)(ndr - 1)) {
    store_relaxed(&a.sync[kSyncDone1 + lead], 0u);  // last reader of this expert's h
    store_relaxed(&a.sync[kSyncUsed1 + lead], 0u);
  }
  for (int i = t; i < M; i += kThreads) {
    const int p = R.plist[beg + i], tok = p / a.K;
    int valid = 0;
    for (int s = 0; s < a.K; ++s) valid += R.id[tok * a.K + s] >= 0;
    const unsigned old = atomic_add_release(&a.sync[kSyncTok + tok * ndr + rng], 1u);
    if (old + 1 == (unsigned)valid) R.fin[smem_atomic_add(&R.nfin, 1)] = tok;
  }
  block_sync();
  fence_acquire();
  const int nfin = R.nfin;
  for (int f = 0; f < nfin; ++f) {  // this block completed token fin[f] for this row range
    const int tok = R.fin[f];
    if (live) {
      float s = 0.0f;
      for (int k = 0; k < a.K; ++k) {
        const int p = tok * a.K + k;
        if (R.id[p] >= 0) s = ffma(a.topk_w[p], load_coherent(&a.y[(size_t)p * a.D + row]), s);
      }
      a.out[(size_t)tok * a.D + row] = f32_to_bf16(a.out_scale * s);
    }
    if (t == 0) store_relaxed(&a.sync[kSyncTok + tok * ndr + rng], 0u);
  }
  block_sync();
}

// ------------------------------------------------------------------ the kernel
template <int Fmt, int Layout>
__global__ void SMALLM_BOUNDS smallm_moe_kernel(MoeArgs a) {
  __shared__ Routing R;
  __shared__ float red[kWarps][2][kMC][16];
  __shared__ float hs[kMC * kMaxInter];
  const int t = thread_id();
  if (t == 0) R.ticket = (int)atomic_add_relaxed(&a.sync[kSyncTicket], 1u);
  build_routing(a, R);
  const int g1 = a.I / 16, g2 = (a.D + kRows2 - 1) / kRows2;
  const int n1 = R.nd * g1, n = n1 + R.nd * g2;
  int item = R.ticket;
  if (item == 0) {  // tokens with no valid slot get zeros
    for (int tok = 0; tok < a.T; ++tok) {
      int valid = 0;
      for (int s = 0; s < a.K; ++s) valid += R.id[tok * a.K + s] >= 0;
      if (valid == 0)
        for (int d = t; d < a.D; d += kThreads) a.out[(size_t)tok * a.D + d] = 0;
    }
  }
  while (item < n) {
    if (t == 0) R.next = (int)atomic_add_relaxed(&a.sync[kSyncTicket], 1u);
    if (item < n1)
      phase1_item<Fmt, Layout>(a, R, item / g1, item % g1, red);
    else
      phase2_item<Fmt, Layout>(a, R, (item - n1) / g2, (item - n1) % g2, hs);
    block_sync();
    item = R.next;
    block_sync();
  }
  if (t == 0 && atomic_add_release(&a.sync[kSyncExit], 1u) == (unsigned)(a.nblocks - 1)) {
    store_relaxed(&a.sync[kSyncTicket], 0u);  // last block out resets the ticket
    store_relaxed(&a.sync[kSyncExit], 0u);
  }
}

}  // namespace smallm
