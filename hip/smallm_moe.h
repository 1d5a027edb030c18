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
//   phase 1   item (expert u, 16-row group g, K slice k): partial dot products of gate rows
//             g*16.. and up rows Iw+g*16.. over one K slice -> part[pair, k, gate|up, rows]
//   phase 2   item (expert u, row range r): h = silu(sum_k gate parts) * (sum_k up parts), staged
//             in shared memory; y[pair, rows] = W2 rows . h; the block that completes the last
//             slot of a token for that row range writes out[token, rows], summing slots in slot
//             order (deterministic: every sum has a fixed order).
// Every item issues all its weight loads at once (8 x 16 bytes per thread, 32 KB per block).
// Items are handed out by an atomic ticket in increasing order: a phase-2 item waits only on
// phase-1 items with lower tickets, which running blocks already hold and which never wait, so
// the launch cannot deadlock whatever the residency. Phase-2 blocks load their W2 rows before
// waiting. All counters are reset by their last user, so the workspace stays valid across calls
// and CUDA-graph replays without a memset.
#pragma once

#include "smallm_args.h"
#include "smallm_compat.h"
#include "smallm_timeline.h"

namespace smallm {

constexpr int kMC = 4;       // pairs accumulated per pass
constexpr int kJ1 = 4;       // phase 1: vectors per thread per row (x2: gate and up) -> 8 loads in flight
constexpr int kSlice1 = 16 * kJ1;  // phase 1: vectors of a row per item (K slice)
constexpr int kV2 = 8;       // phase 2: at most 8 W2 vectors per thread, all loaded at once
constexpr int kStageBytes = kMC * kMaxInter * 4;  // shared staging: x slices (phase 1) or h (phase 2)
constexpr int kWarps = kThreads / kWarp;

// The block kernel's pair loops (phase 1's gate/up, phase 2's down) take an expert's pairs two at a time on
// HIP: each weight vector is converted once for both pairs (on gfx950 the conversions are nearly half of a
// pair's vector instructions; docs/gfx950-isa-notes.md), each pair's sums in the same order as one at a time, so
// the output is the same bit for bit. CUDA keeps one at a time (its block kernel serves few shapes; unmeasured).
#if defined(SMALLM_HIP)
constexpr bool kPairsByTwo = true;
#else
constexpr bool kPairsByTwo = false;
#endif
// Phase 2's rows per thread. A thread's vectors of one W2 row meet h (fp32, from LDS) once per pair, 4 bytes
// of h per weight value: on gfx950 the down's LDS reads per weight byte were 4x (FP8) and 8x (MXFP4) its HBM
// bytes per pair, more LDS time than HBM time at about 2.5 (FP8) and 1.2 (MXFP4) pairs per expert if a CU's LDS
// returns 128 bytes a cycle (docs/gfx950-isa-notes.md). With two rows a thread (kRows2 = 2, HIP), rows2 / 2
// apart, the same vectors of each (half as many per row, twice the threads per row, the same rows per item),
// each h value read serves both: half the LDS bytes per weight byte, a butterfly step more per row. CUDA keeps
// one row a thread (its block kernel serves few shapes; unmeasured).
#if defined(SMALLM_HIP)
constexpr int kRows2 = 2;
#else
constexpr int kRows2 = 1;
#endif
constexpr int kVr = kV2 / kRows2;  // phase 2: vectors per row per thread

// Two resident blocks per SM / CU: registers capped at 128 (CUDA) / 256 (gfx950 wave64).
#if defined(SMALLM_HIP)
#if defined(__gfx950__)
#define SMALLM_BOUNDS __attribute__((amdgpu_flat_work_group_size(1, 256), amdgpu_waves_per_eu(2)))
#else
#define SMALLM_BOUNDS __attribute__((amdgpu_flat_work_group_size(1, 256)))
#endif
#else
#define SMALLM_BOUNDS __launch_bounds__(256, Variant == 0 ? 2 : 3)
#endif
// Variant (see examples/results): 0 = cross-item load pipelining, 2 blocks/SM; 1 = no pipelining,
// 3 blocks/SM. Measured and removed: 2 (4 blocks/SM, spills: "h200-variants"), 3 (warp-sized items:
// "h200-warp-kernel"), 4 (phase 1 on tensor cores: "h200-mma-phase1"); variant 5 is
// smallm_moe_twopass.h.

// ------------------------------------------------------------------ format policies
template <int Fmt>
struct Format;

template <>
struct Format<kFp8Block128> {
  static constexpr int kElems = 16;  // values per 16-byte vector
  static constexpr int kRowBytesDiv = 1;
  static constexpr int kScaleRows = 128;  // rows that share a scale (aligned)
  static constexpr int kScaleVecs = 8;    // vectors along K that share a scale (aligned)
  // Scale of vector `kvi` in row `row` of expert `e`'s [rows, kdim] matrix.
  template <int Layout>
  SMALLM_DEV static float scale(const void* s, int e, int rows, int kdim, int row, int kvi) {
    const float* f = static_cast<const float*>(s);
    const int nkb = kdim / 128, nrb = rows / 128;
    return f[((size_t)e * nrb + row / 128) * nkb + (kvi * kElems) / 128];
  }
  SMALLM_DEV static float dot_bf16(const Vec16& w, const Vec16* x) { return dot16_fp8_bf16(w, x[0], x[1]); }
  // Phase 2's dots: W rows' vectors x H pairs' h (dot_vecs_f32).
  template <int W, int H>
  SMALLM_DEV static void dot_f32_rows(const Vec16* const (&w)[W], const float* const (&h)[H], float (&d)[W][H]) {
    dot_vecs_f32<kElems>(w, h, DecodeFp8Pair{}, d);
  }
  template <int P>
  SMALLM_DEV static void pair(const Vec16& w, float& lo, float& hi) { decode_pair_fp8<P>(w, lo, hi); }
};

template <>
struct Format<kMxfp4> {
  static constexpr int kElems = 32;
  static constexpr int kRowBytesDiv = 2;
  static constexpr int kScaleRows = 1;
  static constexpr int kScaleVecs = 1;
  // e8m0 per 32 values: one scale per vector. Shuffled weights come with scales in AITER's
  // e8m0_shuffle layout over the flattened [E*rows, kdim/32] matrix (columns padded to 8).
  template <int Layout>
  SMALLM_DEV static uint32_t scale_byte(const void* s, int e, int rows, int kdim, int row, int kvi) {
    const uint8_t* b = static_cast<const uint8_t*>(s);
    const unsigned cols = kdim / 32;
    const unsigned R = (unsigned)e * rows + row;  // scale tensors stay far below 2^32 bytes
    if (Layout == kRowMajor) return b[R * cols + kvi];
    const unsigned cp = (cols + 7) / 8 * 8;
    const unsigned k = kvi;
    const unsigned idx = (((((R >> 5) * (cp >> 3) + (k >> 3)) * 4 + (k & 3)) * 16 + (R & 15)) * 2 + ((k >> 2) & 1)) * 2 +
                         ((R >> 4) & 1);
    return b[idx];
  }
  // The e8m0 bytes of vectors kvi..kvi+3 (kvi % 4 == 0), byte i for vector kvi + i: row-major one
  // 4-byte load (the scales are 4-byte aligned: smallm_ops checks), shuffled four byte loads.
  template <int Layout>
  SMALLM_DEV static uint32_t scale_word(const void* s, int e, int rows, int kdim, int row, int kvi) {
    if (Layout == kRowMajor) {
      const unsigned R = (unsigned)e * rows + row;
      return *reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(s) + R * (unsigned)(kdim / 32) + kvi);
    }
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) w |= scale_byte<Layout>(s, e, rows, kdim, row, kvi + i) << (8 * i);
    return w;
  }
  template <int Layout>
  SMALLM_DEV static float scale(const void* s, int e, int rows, int kdim, int row, int kvi) {
    return e8m0_to_f32(scale_byte<Layout>(s, e, rows, kdim, row, kvi));
  }
  SMALLM_DEV static float dot_bf16(const Vec16& w, const Vec16* x) { return dot32_fp4_bf16(w, x); }
  // Phase 2's dots: W rows' vectors x H pairs' h (dot_vecs_f32).
  template <int W, int H>
  SMALLM_DEV static void dot_f32_rows(const Vec16* const (&w)[W], const float* const (&h)[H], float (&d)[W][H]) {
    dot_vecs_f32<kElems>(w, h, DecodeFp4Pair{}, d);
  }
  template <int P>
  SMALLM_DEV static void pair(const Vec16& w, float& lo, float& hi) { decode_pair_fp4<P>(w, lo, hi); }
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

// What build_routing derives from topk_ids, for calls of at most kP pairs and kE experts (the
// two-pass kernels hold only this as static shared memory). Routing takes every call the kernels
// take (19.1 KB per block); the tensor-core kernels' MmaRouting fewer pairs (smallm_moe_twopass.h).
template <int kP, int kE>
struct alignas(128) RoutingFor {
  int id[kP];        // expert of each pair, -1 when out of range
  int e2u[kE];       // first pair of an expert, then -(distinct index + 1)
  int ulead[kP];     // first pair of distinct expert u
  int ucnt[kP + 1];  // pairs of u; then offsets into plist
  int ufill[kP];
  int plist[kP];     // pairs grouped by distinct expert
  int nd;
};
using Routing = RoutingFor<kMaxPairs, kMaxExperts>;

// The token of pair p (p / K), as a multiply and a shift by ceil(2^20 / K): exact for every pair index
// below kMaxPairs and 1 <= K <= kMaxSlots (checked below, at compile time). A division by the runtime
// K is ~25 instructions (sm_90a SASS), which the tensor-core gate/up paid on every pass. The kernels
// take the factor from MoeArgs::pair_magic (the launcher sets it): derived in the kernel, it held a
// register for the whole kernel.
struct PairToken {
  uint32_t magic;  // ceil(2^20 / K)
  __host__ __device__ static constexpr uint32_t magic_of(int K) { return ((1u << 20) + (uint32_t)K - 1u) / (uint32_t)K; }
  __host__ __device__ constexpr int operator()(int p) const { return (int)(((uint32_t)p * magic) >> 20); }
};
constexpr bool pair_token_exact() {
  for (int K = 1; K <= kMaxSlots; ++K)
    for (int p = 0; p < kMaxPairs; ++p)
      if (PairToken{PairToken::magic_of(K)}(p) != p / K) return false;
  return true;
}
static_assert(pair_token_exact(), "PairToken must equal p / K for every pair index and slot count");

// The distinct expert u = job / tiles of a gate/up job (tiles = I / 4 jobs per expert), as the high
// word of job * ceil(2^32 / tiles): exact while job * tiles < 2^32 (the factor exceeds 2^32 / tiles by
// r / tiles with r < tiles, so the product exceeds job / tiles by less than job / 2^32 < 1 / tiles),
// here job < kMaxPairs * kMaxInter / 4 and tiles <= kMaxInter / 4: below 2^26. The factor comes from
// MoeArgs::tile_magic, like PairToken's (tiles >= 32: I is a multiple of 128; at tiles = 1 the factor,
// 2^32, would not fit).
struct JobExpert {
  uint32_t magic;  // ceil(2^32 / tiles)
  __host__ __device__ static constexpr uint32_t magic_of(int tiles) {
    return (uint32_t)(((1ull << 32) + (uint64_t)tiles - 1u) / (uint64_t)tiles);
  }
  __host__ __device__ constexpr int operator()(int job) const { return (int)(((uint64_t)(uint32_t)job * magic) >> 32); }
};
// Checked for every tiles at its largest job, kMaxPairs * tiles - 1 (a call's distinct experts are at
// most its pairs): there both the fraction of job / tiles and the excess are largest, so every smaller
// job is exact where it is.
constexpr bool job_expert_exact() {
  for (int tiles = 2; tiles <= kMaxInter / 4; ++tiles) {
    const JobExpert je{JobExpert::magic_of(tiles)};
    const int jobs[4] = {kMaxPairs * tiles - 1, kMaxPairs * tiles - tiles, tiles - 1, tiles};
    for (int job : jobs)
      if (je(job) != job / tiles) return false;
  }
  return true;
}
static_assert(job_expert_exact(), "JobExpert must equal job / tiles for every job of a call");

// The block kernel's routing, with its item tickets and the tokens a phase-2 item completed.
struct FusedRouting : Routing {
  int ticket, next;
  int nfin;
  int fin[kMaxPairs];
};

#if !defined(SMALLM_HIP)
// build_routing for at most 32 pairs, by warp 0 alone with one block barrier (CUDA: __match_any_sync):
// lane p holds pair p; the lanes of one expert find each other, the lowest is its leader; distinct
// experts are numbered in leader order (= first occurrence), their pair lists laid out in that order
// by a prefix sum over the leaders' counts, pairs in lane order. The general path below takes six
// barriers, a table of E entries and shared atomics: about 1.8 us at T = 1 on the H200, on the
// critical path of both kernels (examples/results "h200-timeline").
template <class R_t, class During>
SMALLM_DEV void build_routing_warp(const MoeArgs& a, R_t& R, int N, During& during) {
  const int p = thread_id();
  const int v = p < N ? a.topk_ids[p] : -1;
  during();
  if (p < kWarp) {
    int e = -1;
    if (p < N) {
      e = (v >= 0 && v < a.E) ? v : -1;
      R.id[p] = e;
    }
    const bool valid = p < N && e >= 0;
    const unsigned same = __match_any_sync(0xffffffffu, valid ? e : -1);  // invalid lanes group under -1
    const bool lead = valid && __ffs(same) - 1 == p;
    const unsigned leads = __ballot_sync(0xffffffffu, lead);
    const unsigned below = (1u << p) - 1u;
    const int cnt = lead ? __popc(same) : 0;
    int incl = cnt;  // inclusive prefix sum of the leaders' counts in lane order
#pragma unroll
    for (int o = 1; o < kWarp; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, incl, o);
      if (p >= o) incl += n;
    }
    const int off = incl - cnt;  // a leader's first plist slot
    if (lead) {
      const int u = __popc(leads & below);
      R.ulead[u] = p;
      R.ucnt[u] = off;
    }
    const int base = __shfl_sync(0xffffffffu, off, valid ? __ffs(same) - 1 : p);
    if (valid) R.plist[base + __popc(same & below)] = p;
    const int total = __shfl_sync(0xffffffffu, incl, kWarp - 1);
    if (p == 0) {
      const int nd = __popc(leads);
      R.nd = nd;
      R.ucnt[nd] = total;
    }
  }
  block_sync();
}
#endif

// Derive distinct experts (first-occurrence order) and their pair lists. `during()` runs on every
// thread once the expert ids are requested and before they are used (the gate/up issues its copy of
// x there, behind the ids rather than ahead of them).
// The work is the first kThreads threads'; in larger blocks (kBlockThreads: the two-team gate/up)
// the others only keep the barriers. R_t: a RoutingFor whose kP holds the call's pairs (the
// launchers' part).
template <int kBlockThreads = kThreads, class R_t, class During>
SMALLM_DEV void build_routing(const MoeArgs& a, R_t& R, During& during) {
  const int t = kBlockThreads == kThreads || thread_id() < kThreads ? thread_id() : kMaxPairs + kMaxExperts;
  const int N = a.T * a.K;
#if !defined(SMALLM_HIP)
  if (N <= kWarp) {
    build_routing_warp(a, R, N, during);
    return;
  }
#endif
  const int v0 = t < N ? a.topk_ids[t] : -1;
  during();
  for (int p = t; p < N; p += kThreads) {
    const int e = p == t ? v0 : a.topk_ids[p];
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
template <int kBlockThreads = kThreads, class R_t>
SMALLM_DEV void build_routing(const MoeArgs& a, R_t& R) {
  auto nothing = [] {};
  build_routing<kBlockThreads>(a, R, nothing);
}


SMALLM_DEV int imin(int a, int b) { return a < b ? a : b; }
SMALLM_DEV int imax(int a, int b) { return a > b ? a : b; }

// ------------------------------------------------------------------ geometry
struct Geometry {
  int rowb1, nv1, ksplit, g1, n1per;  // phase 1: row bytes, vectors/row, K slices, row groups, items/expert
  int rowb2, nv2, tpr, vpt, rows2, ndr;  // phase 2: row bytes, vectors/row, threads/row, vectors/thread/row, rows/item, ranges
};

template <int Fmt>
SMALLM_DEV Geometry geometry(const MoeArgs& a) {
  Geometry g;
  g.rowb1 = a.D / Format<Fmt>::kRowBytesDiv;
  g.nv1 = g.rowb1 / 16;
  g.ksplit = (g.nv1 + kSlice1 - 1) / kSlice1;
  g.g1 = a.I / 16;
  g.n1per = g.g1 * g.ksplit;
  g.rowb2 = a.Iw / Format<Fmt>::kRowBytesDiv;  // W2's stored row (Iw), of which the first I values are read
  g.nv2 = a.I / Format<Fmt>::kRowBytesDiv / 16;
  // threads per row for at most kV2 vectors a thread (rows2 = kThreads / that), then kRows2 times as many
  // (kRows2 rows a thread, at most kVr vectors of each: the same rows per item)
  int need = (g.nv2 + kV2 - 1) / kV2;
  g.tpr = 1;
  while (g.tpr < need) g.tpr <<= 1;
  g.tpr *= kRows2;
  g.vpt = (g.nv2 + g.tpr - 1) / g.tpr;
  g.rows2 = kThreads * kRows2 / g.tpr;
  g.ndr = (a.D + g.rows2 - 1) / g.rows2;
  return g;
}

// ------------------------------------------------------------------ phase 1
// Weight vectors (and their scales) of one item, loaded into registers before the item runs:
// phase 1 uses v[0..3] = gate, v[4..7] = up; phase 2 uses v[0..7] of one W2 row.
struct Loads {
  Vec16 v[8];
  float s[8];
};

// Phase 1's weight scales as loaded, and as used. kLoadsDrainInOrder (HIP) with MXFP4: the e8m0 byte is
// kept as it is (in the float's bits) and converted where used, since converting it at the load waits
// for the load, and with it for every load issued before (the item's weights).
template <int Fmt, int Layout>
SMALLM_DEV float phase1_scale(const void* s, int e, int rows, int kdim, int row, int kvi) {
  if constexpr (Fmt == kMxfp4 && kLoadsDrainInOrder)
    return __builtin_bit_cast(float, Format<Fmt>::template scale_byte<Layout>(s, e, rows, kdim, row, kvi));
  else
    return Format<Fmt>::template scale<Layout>(s, e, rows, kdim, row, kvi);
}
template <int Fmt>
SMALLM_DEV float phase1_scale_value(float loaded) {
  if constexpr (Fmt == kMxfp4 && kLoadsDrainInOrder)
    return e8m0_to_f32(__builtin_bit_cast(uint32_t, loaded));
  else
    return loaded;
}

template <int Fmt, int Layout>
SMALLM_DEV void phase1_loads(const MoeArgs& a, const Geometry& G, const Routing& R, int u, int grp, int ks, Loads& L) {
  const int t = thread_id(), r = t & 15, c = t >> 4;
  const int e = R.id[R.ulead[u]];
  const int rows13 = 2 * a.Iw;
  const uint8_t* wb = a.w13 + (size_t)e * rows13 * G.rowb1;
  const int rg = grp * 16 + r, ru = a.Iw + grp * 16 + r;
  // kLoadsDrainInOrder (HIP): every load issued, a vector past the row's end taking the row's last (its
  // value unused: phase1_item skips it), so that no load sits under a guard (see kLoadsDrainInOrder).
#pragma unroll
  for (int j = 0; j < kJ1; ++j) {
    const int kvi = ks * kSlice1 + c + 16 * j, kv = kLoadsDrainInOrder ? imin(kvi, G.nv1 - 1) : kvi;
    if (kLoadsDrainInOrder || kvi < G.nv1) {
      L.v[j] = load_weights(wb + vec_offset<Layout>(rg, kv, G.rowb1));
      L.v[kJ1 + j] = load_weights(wb + vec_offset<Layout>(ru, kv, G.rowb1));
    }
  }
#pragma unroll
  for (int j = 0; j < kJ1; ++j) {
    const int kvi = ks * kSlice1 + c + 16 * j, kv = kLoadsDrainInOrder ? imin(kvi, G.nv1 - 1) : kvi;
    if (kLoadsDrainInOrder || kvi < G.nv1) {
      L.s[j] = phase1_scale<Fmt, Layout>(a.s13, e, rows13, a.D, rg, kv);
      L.s[kJ1 + j] = phase1_scale<Fmt, Layout>(a.s13, e, rows13, a.D, ru, kv);
    }
  }
}

// Item (distinct expert u, 16-row group grp, K slice ks): thread t owns row t%16 of the group and
// vectors kvi = ks*64 + t/16 + 16j (j < 4) of it, for gate and up: 8 loads issued at once and kept
// in registers while all the expert's pairs are accumulated (x slices staged in shared memory).
// x slices of one pair chunk of a phase-1 item into `xs` (half of the shared stage): at most
// kXHalf bytes, so a chunk has kMC pairs (fp8) or fewer (mxfp4: its slices are twice as wide).
constexpr int kXHalf = kStageBytes / 2;
template <int Fmt>
SMALLM_DEV int x_chunk_pairs(const Geometry& G) {
  (void)G;
  constexpr int per_pair = kSlice1 * (Format<Fmt>::kElems / 8) * 16;
  constexpr int fit = kXHalf / per_pair;
  return fit < kMC ? fit : kMC;
}

template <int Fmt>
SMALLM_DEV void stage_x_chunk(const MoeArgs& a, const Geometry& G, const Routing& R, int u, int ks, int m0, int mc,
                              Vec16* xs) {
  using F = Format<Fmt>;
  const int t = thread_id();
  const int k0 = ks * kSlice1;
  constexpr int kXv = F::kElems / 8;
  const int slice_vecs = kSlice1 * kXv;
  const int nvalid = imin(kSlice1, G.nv1 - k0) * kXv;
  const int beg = R.ucnt[u];
  for (int i = t; i < mc * slice_vecs; i += kThreads) {
    const int m = i / slice_vecs, v = i - m * slice_vecs;
    if (v < nvalid) {
      const int tok = PairToken{a.pair_magic}(R.plist[beg + m0 + m]);
      copy16_async(xs + i, a.x + (size_t)tok * a.D + (size_t)k0 * F::kElems + v * 8);
    }
  }
}

// Prefetch the first pair chunk of phase-1 item (u, ks) while another item runs.
template <int Fmt>
SMALLM_DEV void prefetch_x(const MoeArgs& a, const Geometry& G, const Routing& R, int u, int ks, Vec16* xs) {
  const int M = R.ucnt[u + 1] - R.ucnt[u];
  stage_x_chunk<Fmt>(a, G, R, u, ks, 0, imin(x_chunk_pairs<Fmt>(G), M), xs);
  copy_async_commit();
}

// Phase 1: sum the warps' gate / up partials of a pair chunk (red[warp][gate|up][pair][row]) and
// write them to h[pair, K slice, gate|up, rows of the group].
SMALLM_DEV void write_partials(const MoeArgs& a, const Geometry& G, const Routing& R, float (*red)[2][kMC][16], int first,
                               int mc, int grp, int ks) {
  const int t = thread_id();
  if (t < 2 * 16 * kMC) {
    const int half = t / (16 * kMC), m = (t / 16) % kMC, rr = t & 15;
    if (m < mc) {
      float v = 0.0f;
      for (int ww = 0; ww < kWarps; ++ww) v += red[ww][half][m][rr];
      const int p = R.plist[first + m];
      a.h[(((size_t)p * G.ksplit + ks) * 2 + half) * a.I + grp * 16 + rr] = v;
    }
  }
}

// Item (distinct expert u, 16-row group grp, K slice ks): thread t owns row t%16 of the group and
// vectors kvi = ks*64 + t/16 + 16j (j < 4) of it, for gate and up: 8 loads issued at once and kept
// in registers while all the expert's pairs are accumulated (x slices staged in shared memory;
// the first chunk's already on its way when `prefetched`, and the next item's after it when
// `newer_copies`).
template <int Fmt, int Layout>
SMALLM_DEV void phase1_item(const MoeArgs& a, const Geometry& G, const Routing& R, int u, int grp, int ks,
                            Loads& L, float (*red)[2][kMC][16], Vec16* xs, bool prefetched, bool newer_copies) {
  using F = Format<Fmt>;
  const int t = thread_id(), r = t & 15, c = t >> 4, w = t / kWarp;
  const int lead = R.ulead[u];
  const int k0 = ks * kSlice1;
  constexpr int kXv = F::kElems / 8;             // bf16 vectors of x per weight vector
  const int slice_vecs = kSlice1 * kXv;           // x vectors per pair in this slice
  const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
  const int chunk = x_chunk_pairs<Fmt>(G);
  for (int m0 = 0; m0 < M; m0 += chunk) {
    const int mc = imin(chunk, M - m0);
    if (m0 > 0 || !prefetched) {
      stage_x_chunk<Fmt>(a, G, R, u, ks, m0, mc, xs);
      copy_async_commit();
      copy_async_wait();
    } else if (newer_copies) {
      copy_async_wait_older();  // this item's copies, not the next item's
    } else {
      copy_async_wait();
    }
    block_sync();
    // Pairs two at a time where kPairsByTwo (runtime loop): registers hold the 8 weight vectors, not
    // kMC x 8 x-slices; opaque() keeps the converted weights from being hoisted out of the loop, and the two
    // pairs of an iteration share them.
    int m = 0;
    if constexpr (kPairsByTwo) {
      for (; m + 1 < mc; m += 2) {
        float ag0 = 0.0f, au0 = 0.0f, ag1 = 0.0f, au1 = 0.0f;
#pragma unroll
        for (int j = 0; j < kJ1; ++j) {
          const int kl = c + 16 * j;
          if (k0 + kl < G.nv1) {
            opaque(L.v[j]);
            opaque(L.v[kJ1 + j]);
            const Vec16* xv0 = xs + m * slice_vecs + kl * kXv;
            const Vec16* xv1 = xv0 + slice_vecs;
            const float sg = phase1_scale_value<Fmt>(L.s[j]), su = phase1_scale_value<Fmt>(L.s[kJ1 + j]);
            ag0 = ffma(sg, F::dot_bf16(L.v[j], xv0), ag0);
            ag1 = ffma(sg, F::dot_bf16(L.v[j], xv1), ag1);
            au0 = ffma(su, F::dot_bf16(L.v[kJ1 + j], xv0), au0);
            au1 = ffma(su, F::dot_bf16(L.v[kJ1 + j], xv1), au1);
          }
        }
        ag0 = warp_row_sum(ag0);
        au0 = warp_row_sum(au0);
        ag1 = warp_row_sum(ag1);
        au1 = warp_row_sum(au1);
        if (lane_id() < 16) {
          red[w][0][m][r] = ag0;
          red[w][1][m][r] = au0;
          red[w][0][m + 1][r] = ag1;
          red[w][1][m + 1][r] = au1;
        }
      }
    }
    for (; m < mc; ++m) {
      float ag = 0.0f, au = 0.0f;
#pragma unroll
      for (int j = 0; j < kJ1; ++j) {
        const int kl = c + 16 * j;
        if (k0 + kl < G.nv1) {
          opaque(L.v[j]);  // keep converted weights from being hoisted out of the pair loop
          opaque(L.v[kJ1 + j]);
          const Vec16* xv = xs + m * slice_vecs + kl * kXv;
          ag = ffma(phase1_scale_value<Fmt>(L.s[j]), F::dot_bf16(L.v[j], xv), ag);
          au = ffma(phase1_scale_value<Fmt>(L.s[kJ1 + j]), F::dot_bf16(L.v[kJ1 + j], xv), au);
        }
      }
      ag = warp_row_sum(ag);
      au = warp_row_sum(au);
      if (lane_id() < 16) {
        red[w][0][m][r] = ag;
        red[w][1][m][r] = au;
      }
    }
    block_sync();
    write_partials(a, G, R, red, beg + m0, mc, grp, ks);
    if (m0 + chunk < M) block_sync();  // red and the x slices are reused by the next pair chunk
  }
  publish_block_writes();  // also ends the last chunk's use of red and the x slices
  if (t == 0) signal_add(&a.sync[kSyncDone1 + lead], 1u);
}

// ------------------------------------------------------------------ phase 2
// Item (distinct expert u, row range rng): `tpr` adjacent threads share an output row, each holding at most
// kVr of its vectors in registers (all loaded before waiting on phase 1), for kRows2 rows rows2 / kRows2 apart:
// row r's vectors in L.v[r * kVr ..].
SMALLM_DEV int phase2_row(const Geometry& G, int rng, int t, int r) {
  return rng * G.rows2 + t / G.tpr + r * (G.rows2 / kRows2);
}

template <int Fmt, int Layout>
SMALLM_DEV void phase2_loads(const MoeArgs& a, const Geometry& G, const Routing& R, int u, int rng, Loads& L) {
  using F = Format<Fmt>;
  const int t = thread_id();
  const int e = R.id[R.ulead[u]];
  const int kp = t % G.tpr;
  const uint8_t* wb = a.w2 + (size_t)e * a.D * G.rowb2;
  int rows[kRows2];
#pragma unroll
  for (int r = 0; r < kRows2; ++r) rows[r] = phase2_row(G, rng, t, r);
  // Every weight load first, then the scales: two loops of one shape, on purpose. One loop given each body as a
  // lambda compiled for gfx950 into ~200 instructions more per block kernel (SGPRs spilled to VGPR lanes:
  // v_readlane/v_writelane 219 -> 268), the pair steps unchanged.
#pragma unroll
  for (int r = 0; r < kRows2; ++r) {
    const int row = rows[r];
    const bool live = row < a.D;
#pragma unroll
    for (int j = 0; j < kVr; ++j) {
      const int kvi = kp + G.tpr * j;
      if (live && j < G.vpt && kvi < G.nv2)
        L.v[r * kVr + j] = load_weights(wb + vec_offset<Layout>(row, kvi, G.rowb2));
      else if (r > 0 && j < G.vpt && kvi < G.nv2)
        L.v[r * kVr + j] = Vec16{};  // a later row past D: phase2_item computes on it (zeros) and writes nothing
    }
  }
#pragma unroll
  for (int r = 0; r < kRows2; ++r) {
    const int row = rows[r];
    const bool live = row < a.D;
#pragma unroll
    for (int j = 0; j < kVr; ++j) {
      const int kvi = kp + G.tpr * j;
      if (live && j < G.vpt && kvi < G.nv2)
        L.s[r * kVr + j] = F::template scale<Layout>(a.s2, e, a.D, a.Iw, row, kvi);
      else if (r > 0 && j < G.vpt && kvi < G.nv2)
        L.s[r * kVr + j] = 0.0f;
    }
  }
}

template <int Fmt, int Layout>
SMALLM_DEV void phase2_item(const MoeArgs& a, const Geometry& G, FusedRouting& R, int u, int rng, Loads& L, float* hs) {
  using F = Format<Fmt>;
  const int t = thread_id();
  const int lead = R.ulead[u];
  const int kp = t % G.tpr;
  int row[kRows2];
  bool live_row[kRows2];
#pragma unroll
  for (int r = 0; r < kRows2; ++r) {
    row[r] = phase2_row(G, rng, t, r);
    live_row[r] = row[r] < a.D;
  }
  const bool live = live_row[0];  // this thread's first row (its others, further on, may be past D)
  if (t == 0)
    while (load_acquire(&a.sync[kSyncDone1 + lead]) < (unsigned)G.n1per) pause();
  block_sync();
  const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
  for (int m0 = 0; m0 < M; m0 += kMC) {
    const int mc = imin(kMC, M - m0);
    for (int i = t; i < mc * a.I; i += kThreads) {
      const int m = i / a.I, k = i - m * a.I;
      const float* pp = a.h + (size_t)R.plist[beg + m0 + m] * G.ksplit * 2 * a.I + k;
      float gs = 0.0f, us = 0.0f;
      for (int s = 0; s < G.ksplit; ++s) {
        gs += load_coherent(pp + (size_t)(2 * s) * a.I);
        us += load_coherent(pp + (size_t)(2 * s + 1) * a.I);
      }
      hs[m * kMaxInter + k] = silu(gs) * us;
    }
    block_sync();
    // Pairs two at a time where kPairsByTwo, else one (runtime loop); opaque() stops the compiler from
    // hoisting the decoded weights (8 vectors x 16/32 floats) out of it, so registers hold only the raw
    // vectors; the two pairs of an iteration share each vector's decode, the kRows2 rows each h value read.
    // A row past D (only a thread's later ones) computes on zeros (phase2_loads) and writes nothing.
    auto pairs = [&](auto H, int m) {
      constexpr int kH = decltype(H)::value;
      float acc[kRows2][kH];
#pragma unroll
      for (int r = 0; r < kRows2; ++r)
#pragma unroll
        for (int i = 0; i < kH; ++i) acc[r][i] = 0.0f;
#pragma unroll
      for (int j = 0; j < kVr; ++j) {
        const int kvi = kp + G.tpr * j;
        if (live && j < G.vpt && kvi < G.nv2) {
          const Vec16* wv[kRows2];
#pragma unroll
          for (int r = 0; r < kRows2; ++r) {
            opaque(L.v[r * kVr + j]);
            wv[r] = &L.v[r * kVr + j];
          }
          const float* hv[kH];
#pragma unroll
          for (int i = 0; i < kH; ++i) hv[i] = hs + (m + i) * kMaxInter + kvi * F::kElems;
          float d[kRows2][kH];
          F::template dot_f32_rows<kRows2, kH>(wv, hv, d);
#pragma unroll
          for (int r = 0; r < kRows2; ++r)
#pragma unroll
            for (int i = 0; i < kH; ++i) acc[r][i] = ffma(L.s[r * kVr + j], d[r][i], acc[r][i]);
        }
      }
      for (int o = 1; o < G.tpr; o <<= 1)
#pragma unroll
        for (int r = 0; r < kRows2; ++r)
#pragma unroll
          for (int i = 0; i < kH; ++i) acc[r][i] += shfl_xor(acc[r][i], o);
#pragma unroll
      for (int r = 0; r < kRows2; ++r)
        if (live_row[r] && kp == 0)
#pragma unroll
          for (int i = 0; i < kH; ++i) a.y[(size_t)R.plist[beg + m0 + m + i] * a.D + row[r]] = acc[r][i];
    };
    int m = 0;
    if constexpr (kPairsByTwo)
      for (; m + 1 < mc; m += 2) pairs(IntC<2>{}, m);
    for (; m < mc; ++m) pairs(IntC<1>{}, m);
    block_sync();
  }
  if (t == 0) R.nfin = 0;
  publish_block_writes();
  if (t == 0 && atomic_add_release(&a.sync[kSyncUsed1 + lead], 1u) == (unsigned)(G.ndr - 1)) {
    store_relaxed(&a.sync[kSyncDone1 + lead], 0u);  // last reader of this expert's partials
    store_relaxed(&a.sync[kSyncUsed1 + lead], 0u);
  }
  for (int i = t; i < M; i += kThreads) {
    const int p = R.plist[beg + i], tok = PairToken{a.pair_magic}(p);
    int valid = 0;
    for (int s = 0; s < a.K; ++s) valid += R.id[tok * a.K + s] >= 0;
    const unsigned old = atomic_add_release(&a.sync[kSyncTok + tok * G.ndr + rng], 1u);
    if (old + 1 == (unsigned)valid) R.fin[smem_atomic_add(&R.nfin, 1)] = tok;
  }
  block_sync();
  fence_acquire();
  const int nfin = R.nfin;
  for (int f = 0; f < nfin; ++f) {  // this block completed token fin[f] for this row range
    const int tok = R.fin[f];
#pragma unroll
    for (int r = 0; r < kRows2; ++r) {
      if (live_row[r] && kp == 0) {
        float s = 0.0f;
        for (int k = 0; k < a.K; ++k) {
          const int p = tok * a.K + k;
          if (R.id[p] >= 0) s = ffma(a.topk_w[p], load_coherent(&a.y[(size_t)p * a.D + row[r]]), s);
        }
        a.out[(size_t)tok * a.D + row[r]] = f32_to_bf16(a.out_scale * s);
      }
    }
    if (t == 0) store_relaxed(&a.sync[kSyncTok + tok * G.ndr + rng], 0u);
  }
  block_sync();
}

// ------------------------------------------------------------------ the kernel
template <int Fmt, int Layout, int Variant>
__global__ void SMALLM_BOUNDS smallm_moe_kernel(MoeArgs a) {
  __shared__ FusedRouting R;
  __shared__ float red[kWarps][2][kMC][16];
  __shared__ __attribute__((aligned(16))) uint8_t stage[kStageBytes];
  const int t = thread_id();
  if (t == 0) R.ticket = (int)ticket_take(&a.sync[kSyncTicket]);
  build_routing(a, R);
  const Geometry G = geometry<Fmt>(a);
  const int n1 = R.nd * G.n1per, n = n1 + R.nd * G.ndr;
  int item = R.ticket;
  if (item == 0) {  // tokens with no valid slot get zeros
    for (int tok = 0; tok < a.T; ++tok) {
      int valid = 0;
      for (int s = 0; s < a.K; ++s) valid += R.id[tok * a.K + s] >= 0;
      if (valid == 0)
        for (int d = t; d < a.D; d += kThreads) a.out[(size_t)tok * a.D + d] = 0;
    }
  }
  auto issue = [&](int it, Loads& L) {
    if (it >= n) return;
    if (it < n1) {
      const int u = it / G.n1per, rest = it - u * G.n1per;
      phase1_loads<Fmt, Layout>(a, G, R, u, rest / G.ksplit, rest % G.ksplit, L);
    } else {
      const int i2 = it - n1;
      phase2_loads<Fmt, Layout>(a, G, R, i2 / G.ndr, i2 % G.ndr, L);
    }
  };
  auto xhalf = [&](int h) { return reinterpret_cast<Vec16*>(stage + h * kXHalf); };
  auto process = [&](int it, Loads& L, int half, bool prefetched, bool newer_copies) {
    if (it < n1) {
      const int u = it / G.n1per, rest = it - u * G.n1per;
      phase1_item<Fmt, Layout>(a, G, R, u, rest / G.ksplit, rest % G.ksplit, L, red, xhalf(half), prefetched,
                               newer_copies);
    } else {
      const int i2 = it - n1;
      phase2_item<Fmt, Layout>(a, G, R, i2 / G.ndr, i2 % G.ndr, L, reinterpret_cast<float*>(stage));
    }
  };
  // The ticket atomic's result is consumed only at the end of the item (written to shared memory
  // just before the closing barrier), so its round trip overlaps the item instead of stalling it.
  if (Variant == 0) {
    // Software pipeline across items: the next item's weights are in flight while this one
    // computes, reduces and signals. Tickets are fetched one item further ahead.
    if (t == 0) R.next = (int)ticket_take(&a.sync[kSyncTicket]);
    // Between two phase-1 items the next one's x slices are copied into the other half of the
    // stage while this one runs (phase 2 uses the whole stage, so never around it).
    Loads cur, nxt;
    issue(item, cur);
    block_sync();
    int next = R.next, half = 0;
    bool prefetched = false;
    while (item < n) {
      block_sync();  // everyone has read R.next
      auto prefetch = [&] {
        const int un = next / G.n1per;
        prefetch_x<Fmt>(a, G, R, un, (next - un * G.n1per) % G.ksplit, xhalf(half ^ 1));
      };
      // kLoadsDrainInOrder (HIP, where the copy waits for its loads): the next item's x before its
      // weights and the ticket, so that waiting for x does not wait for them too
      if constexpr (kLoadsDrainInOrder) {
        if (a.x_prefetch && item < n1 && next < n1) prefetch();
      }
      unsigned tk = 0;
      if (t == 0 && next < n) tk = ticket_take(&a.sync[kSyncTicket]);
      issue(next, nxt);
      const bool pre_next = a.x_prefetch && item < n1 && next < n1;
      if (!kLoadsDrainInOrder && pre_next) prefetch();
      process(item, cur, half, prefetched, pre_next);
      half ^= 1;
      prefetched = pre_next;
      if (t == 0 && next < n) R.next = (int)tk;
      block_sync();
      item = next;
      next = next < n ? R.next : n;
      cur = nxt;
    }
  } else {
    Loads cur;
    while (item < n) {
      unsigned tk = 0;
      if (t == 0) tk = ticket_take(&a.sync[kSyncTicket]);
      issue(item, cur);
      process(item, cur, 0, false, false);
      if (t == 0) R.next = (int)tk;
      block_sync();
      item = R.next;
      block_sync();
    }
  }
  if (t == 0 && atomic_add_release(&a.sync[kSyncExit], 1u) == (unsigned)(a.nblocks - 1)) {
    store_relaxed(&a.sync[kSyncTicket], 0u);  // last block out resets the ticket
    store_relaxed(&a.sync[kSyncExit], 0u);
  }
}

}  // namespace smallm
