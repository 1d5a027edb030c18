// smallm_moe_warp.h: the fused small-M MoE kernel with warp-sized work items (variant 3).
//
// Same computation, routing prologue, workspace and numerics contract as smallm_moe.h; the
// difference is the unit of work. The block kernel hands 32 KB items to whole blocks, and every
// item pays block barriers, a shared-memory reduction and a block-wide release; between items a
// block has no weight bytes in flight. Here every warp (wave on gfx950) takes its own 8 KB items
// from the ticket counter, keeps them in registers, reduces with shuffles only and signals with
// one release from one lane, so after the prologue there is no block barrier at all and each SM
// keeps one item per resident warp in flight (16 warps x 8 KB on sm_90).
//
//   phase 1 item (expert u, `NR` rows of gate and the same rows of up, K slice): the warp holds
//            2 x NR row pieces (lane l: vectors l, l+W, ... of each row); per pair of u it dots
//            them with the pair's x (read through L1: x is read-only) and writes the gate and up
//            partials h[pair, slice, gate|up, row]. With K <= 4096 (fp8) or 8192 (mxfp4) there is
//            one slice, so phase 1 writes final pre-activation values.
//   phase 2 item (expert u, `nr2` rows of W2): `tpr` lanes share a row, each holding VPL of its
//            vectors, so a lane's slice of h (VPL x 16 or 32 values per pair) is loaded once per
//            pair and reused over all the item's rows; y[pair, row] is written, and the warp that
//            completes the last valid slot of a token for that row range sums the slots in slot
//            order into out (deterministic, as in the block kernel).
// Tickets are handed out in increasing order and every phase-2 item follows all phase-1 items,
// so a waiting warp only waits on items that running warps already hold and that never wait:
// no deadlock whatever the residency. The next ticket is claimed once the current item's weights
// have arrived, so its round trip overlaps the item's compute.
#pragma once

#include "smallm_moe.h"

namespace smallm {

#if defined(SMALLM_HIP)
constexpr int kWVL = 8;   // weight vectors per lane per item: wave64 x 8 x 16 B = 8 KB
#else
constexpr int kWVL = 16;  // warp32 x 16 x 16 B = 8 KB
#endif
constexpr int kWHalf = kWVL / 2;

// Two resident blocks of 256 per SM / CU: 128 registers per thread on sm_90.
#if defined(SMALLM_HIP)
#define SMALLM_WARP_BOUNDS __attribute__((amdgpu_flat_work_group_size(1, 256)))
#else
#define SMALLM_WARP_BOUNDS __launch_bounds__(256, 2)
#endif

// One item's weight vectors and their scales, in registers. Scales are kept once per distinct
// value where the format shares them (fp8: 128 rows x 8 vectors), so most of the 128 registers
// of sm_90 hold weights.
struct Loads2 {
  Vec16 v[kWVL];
  float s[kWVL];
};

struct WGeometry {
  int nv1, vr, ksplit, n1per;   // phase 1: vectors per row, vectors per lane per row, K slices, items/expert
  int nv2, tpr, vpl, nr2, ndr;  // phase 2: vectors per row, lanes per row, vectors per lane per row, rows/item, items/expert
};

// Host and device: the launcher sizes the grid from the same numbers.
template <int Fmt>
__host__ __device__ inline WGeometry wgeometry(int D, int I) {
  WGeometry g;
  g.nv1 = D / Format<Fmt>::kRowBytesDiv / 16;
  const int per_lane = (g.nv1 + kWarp - 1) / kWarp;
  g.vr = kWHalf;
  while (g.vr / 2 >= per_lane && g.vr > 1) g.vr /= 2;
  g.ksplit = (g.nv1 + kWarp * g.vr - 1) / (kWarp * g.vr);
  g.n1per = (I / (kWHalf / g.vr)) * g.ksplit;
  g.nv2 = I / Format<Fmt>::kRowBytesDiv / 16;
  g.tpr = 1;
  while (g.tpr < g.nv2 && g.tpr < kWarp) g.tpr <<= 1;
  g.vpl = (g.nv2 + g.tpr - 1) / g.tpr;
  g.nr2 = (kWarp / g.tpr) * (kWVL / g.vpl);
  g.ndr = (D + g.nr2 - 1) / g.nr2;
  return g;
}

SMALLM_DEV int warp_bcast(int v) {  // lane 0's value to the whole warp
#if defined(SMALLM_HIP)
  return __builtin_amdgcn_readfirstlane(v);
#else
  return __shfl_sync(0xffffffffu, v, 0);
#endif
}

// The warp's next batch of `ticket_batch` items (lane 0 claims, all lanes get the first). Once the
// counter is past the end a plain load says so, without adding to the one contended address.
SMALLM_DEV int claim_ticket(const MoeArgs& a, int n) {
  int v = 0;
  if (lane_id() == 0) {
    v = (int)load_relaxed(&a.sync[kSyncTicket]);
    if (v < n) v = (int)atomic_add_inorder(&a.sync[kSyncTicket], (unsigned)a.ticket_batch);
  }
  return warp_bcast(v);
}

// ------------------------------------------------------------------ phase 1
// Lane slot j = r*VR + jj < kWHalf: row grp*NR + r, vector w1_kvi(ks, lane, jj); slot kWHalf + j
// is the same vector of the up row (I rows further). A lane pair owns a run of 2*VR vectors and
// reads two adjacent ones per load (full 32-byte sectors), so a lane's vectors span at most two
// 128-value blocks: two fp8 scales per row instead of VR.
template <int VR>
SMALLM_DEV int w1_kvi(int ks, int lane, int jj) { return ks * kWarp * VR + (lane >> 1) * 2 * VR + 2 * jj + (lane & 1); }

// Register slot of the scale of (row r, vector jj): shared by all rows of an fp8 item (NR rows of
// one 128-row block) and by the 4 vectors of a lane inside one 128-value block.
// A lane's vectors step by 2, so one shared scale covers kScaleVecs / 2 of its consecutive slots.
template <int Fmt>
constexpr int kLaneScaleRun = Format<Fmt>::kScaleVecs > 1 ? Format<Fmt>::kScaleVecs / 2 : 1;

template <int Fmt, int VR>
__host__ __device__ constexpr int w1_sslot(int r, int jj) {
  return Format<Fmt>::kScaleRows > 1 ? jj / kLaneScaleRun<Fmt> : r * VR + jj;
}
template <int Fmt, int Layout, int VR>
SMALLM_DEV void w1_loads(const MoeArgs& a, const WGeometry& G, int e, int grp, int ks, Loads2& L) {
  using F = Format<Fmt>;
  constexpr int NR = kWHalf / VR;
  const int lane = lane_id();
  const int rowb = G.nv1 * 16;
  const uint8_t* wb = a.w13 + (size_t)e * 2 * a.I * rowb;
#pragma unroll
  for (int j = 0; j < kWHalf; ++j) {
    const int rg = grp * NR + j / VR, kvi = w1_kvi<VR>(ks, lane, j % VR);
    if (kvi < G.nv1) {
      L.v[j] = load_weights(wb + vec_offset<Layout>(rg, kvi, rowb));
      L.v[kWHalf + j] = load_weights(wb + vec_offset<Layout>(a.I + rg, kvi, rowb));
    }
  }
#pragma unroll
  for (int j = 0; j < kWHalf; ++j) {
    const int r = j / VR, jj = j % VR, rg = grp * NR + r, kvi = w1_kvi<VR>(ks, lane, jj);
    const int sl = w1_sslot<Fmt, VR>(r, jj);
    if (kvi < G.nv1 && (F::kScaleRows == 1 || (r == 0 && jj % kLaneScaleRun<Fmt> == 0))) {
      L.s[sl] = F::template scale<Layout>(a.s13, e, 2 * a.I, a.D, rg, kvi);
      L.s[kWHalf + sl] = F::template scale<Layout>(a.s13, e, 2 * a.I, a.D, a.I + rg, kvi);
    }
  }
}

// `next` is claimed once this item's weights are in registers: early enough to hide the
// atomic's round trip, late enough that a warp never holds a second item while idle warps exist.
template <int Fmt, int Layout, int VR>
SMALLM_DEV void w1_item(const MoeArgs& a, const WGeometry& G, const Routing& R, int u, int grp, int ks, Loads2& L,
                        bool claim, int n, int& next) {
  using F = Format<Fmt>;
  constexpr int NR = kWHalf / VR;
  constexpr int kXv = F::kElems / 8;  // bf16 vectors of x per weight vector
  const int lane = lane_id();
  const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
  for (int m = 0; m < M; ++m) {
    const int p = R.plist[beg + m];
    const uint16_t* xr = a.x + (size_t)(p / a.K) * a.D;
    float ag[NR], au[NR];
#pragma unroll
    for (int r = 0; r < NR; ++r) ag[r] = au[r] = 0.0f;
#pragma unroll
    for (int jj = 0; jj < VR; ++jj) {
      const int kvi = w1_kvi<VR>(ks, lane, jj);
      if (kvi < G.nv1) {
        Vec16 xv[kXv];
#pragma unroll
        for (int q = 0; q < kXv; ++q) xv[q] = load_cached_inorder(xr + (size_t)kvi * F::kElems + q * 8);
#pragma unroll
        for (int r = 0; r < NR; ++r) {
          const int j = r * VR + jj;
          opaque(L.v[j]);  // keep decoded weights from being hoisted out of the pair loop
          opaque(L.v[kWHalf + j]);
          const int sl = w1_sslot<Fmt, VR>(r, jj);
          ag[r] = ffma(L.s[sl], F::dot_bf16(L.v[j], xv), ag[r]);
          au[r] = ffma(L.s[kWHalf + sl], F::dot_bf16(L.v[kWHalf + j], xv), au[r]);
        }
      }
      if (jj == 0 && m == 0 && claim) next = claim_ticket(a, n);  // lane 0 has its first vectors
    }
#pragma unroll
    for (int r = 0; r < NR; ++r) {
#pragma unroll
      for (int o = 1; o < kWarp; o <<= 1) {
        ag[r] += shfl_xor(ag[r], o);
        au[r] += shfl_xor(au[r], o);
      }
    }
    // every lane holds the totals after the butterfly; lane 0 writes them all, so that its one
    // release (signal_add) at the end of the item publishes them
    if (lane == 0) {
      float* hp = a.h + ((size_t)p * G.ksplit + ks) * 2 * a.I + grp * NR;
#pragma unroll
      for (int r = 0; r < NR; ++r) {
        hp[r] = ag[r];
        hp[a.I + r] = au[r];
      }
    }
  }
}

// sum_s topk_w[tok, s] * y[(tok, s), row] over the token's valid slots, in slot order. All the
// slots' loads are issued before the first add (one L2 round trip, not K dependent ones).
SMALLM_DEV float sum_slots(const MoeArgs& a, const int* id, int tok, int row) {
  float yv[kMaxSlots];
#pragma unroll
  for (int k = 0; k < kMaxSlots; ++k) {
    const int p = tok * a.K + k;
    yv[k] = (k < a.K && id[p] >= 0) ? load_coherent(&a.y[(size_t)p * a.D + row]) : 0.0f;
  }
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxSlots; ++k) {
    const int p = tok * a.K + k;
    if (k < a.K && id[p] >= 0) s = ffma(a.topk_w[p], yv[k], s);
  }
  return s;
}

// ------------------------------------------------------------------ phase 2
// Register slot of the scale of (step st, vector jj): an fp8 item's rows lie in one 128-row block
// (nr2 divides 128), so its scales depend on the vector only.
template <int Fmt, int VPL>
__host__ __device__ constexpr int w2_sslot(int st, int jj) { return Format<Fmt>::kScaleRows > 1 ? jj : st * VPL + jj; }

// Lane slot j = step * VPL + jj: row rng*nr2 + step*(W/tpr) + lane/tpr, vector lane%tpr + tpr*jj.
template <int Fmt, int Layout, int VPL>
SMALLM_DEV void w2_loads(const MoeArgs& a, const WGeometry& G, int e, int rng, Loads2& L) {
  using F = Format<Fmt>;
  const int lane = lane_id();
  const int rows_step = kWarp / G.tpr;
  const int rowb = G.nv2 * 16;
  const uint8_t* wb = a.w2 + (size_t)e * a.D * rowb;
#pragma unroll
  for (int j = 0; j < kWVL; ++j) {
    const int row = rng * G.nr2 + (j / VPL) * rows_step + lane / G.tpr;
    const int kvi = lane % G.tpr + G.tpr * (j % VPL);
    if (row < a.D && kvi < G.nv2) L.v[j] = load_weights(wb + vec_offset<Layout>(row, kvi, rowb));
  }
#pragma unroll
  for (int j = 0; j < kWVL; ++j) {
    const int row = rng * G.nr2 + (j / VPL) * rows_step + lane / G.tpr;
    const int kvi = lane % G.tpr + G.tpr * (j % VPL);
    const int sl = w2_sslot<Fmt, VPL>(j / VPL, j % VPL);
    if (row < a.D && kvi < G.nv2 && (F::kScaleRows == 1 || j < VPL))
      L.s[sl] = F::template scale<Layout>(a.s2, e, a.D, a.I, row, kvi);
  }
}

template <int Fmt, int Layout, int VPL>
SMALLM_DEV void w2_item(const MoeArgs& a, const WGeometry& G, const Routing& R, int u, int rng, Loads2& L,
                        bool claim, int n, int& next) {
  using F = Format<Fmt>;
  constexpr int kE = F::kElems;
  const int lane = lane_id();
  const int lead = R.ulead[u];
  const int rows_step = kWarp / G.tpr;
  const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
  // wait until every phase-1 item of this expert has published its partials
  if (lane == 0)
    while (load_acquire(&a.sync[kSyncDone1 + lead]) < (unsigned)G.n1per) pause();
  warp_sync();
  if (claim) next = claim_ticket(a, n);
  for (int m = 0; m < M; ++m) {
    const int p = R.plist[beg + m];
    // this lane's slice of h = silu(gate) * up for pair p (summed over K slices)
    float hv[VPL][kE];
#pragma unroll
    for (int jj = 0; jj < VPL; ++jj) {
      const int kvi = lane % G.tpr + G.tpr * jj;
      if (kvi < G.nv2) {
        const float* hp = a.h + (size_t)p * G.ksplit * 2 * a.I + kvi * kE;
#pragma unroll
        for (int q = 0; q < kE; q += 4) {
          float4 g = load_coherent4(hp + q), up = load_coherent4(hp + a.I + q);
          for (int s = 1; s < G.ksplit; ++s) {
            const float4 g2 = load_coherent4(hp + (size_t)2 * s * a.I + q);
            const float4 u2 = load_coherent4(hp + (size_t)(2 * s + 1) * a.I + q);
            g.x += g2.x; g.y += g2.y; g.z += g2.z; g.w += g2.w;
            up.x += u2.x; up.y += u2.y; up.z += u2.z; up.w += u2.w;
          }
          hv[jj][q] = silu(g.x) * up.x;
          hv[jj][q + 1] = silu(g.y) * up.y;
          hv[jj][q + 2] = silu(g.z) * up.z;
          hv[jj][q + 3] = silu(g.w) * up.w;
        }
      } else {
#pragma unroll
        for (int q = 0; q < kE; ++q) hv[jj][q] = 0.0f;
      }
    }
    float* yp = a.y + (size_t)p * a.D + rng * G.nr2 + lane / G.tpr;
#pragma unroll
    for (int st = 0; st < kWVL / VPL; ++st) {
      float acc = 0.0f;
#pragma unroll
      for (int jj = 0; jj < VPL; ++jj) {
        const int j = st * VPL + jj;
        const int kvi = lane % G.tpr + G.tpr * jj;
        if (kvi < G.nv2) {
          opaque(L.v[j]);
          float part = 0.0f;
          auto step = [&](auto P) {
            constexpr int q = decltype(P)::value;
            float lo, hi;
            F::template pair<q>(L.v[j], lo, hi);
            part = ffma(lo, hv[jj][2 * q], ffma(hi, hv[jj][2 * q + 1], part));
          };
          StaticFor<0, kE / 2>::run(step);
          acc = ffma(L.s[w2_sslot<Fmt, VPL>(st, jj)], part, acc);
        }
      }
      for (int o = 1; o < G.tpr; o <<= 1) acc += shfl_xor(acc, o);
      const int row = rng * G.nr2 + st * rows_step + lane / G.tpr;
      if (lane % G.tpr == 0 && row < a.D) yp[st * rows_step] = acc;
    }
  }
  // publish y (each writing lane releases its own rows), then count each token's completed
  // slots for this row range
  fence_release();
  warp_sync();
  if (lane == 0 && atomic_add_acq_rel(&a.sync[kSyncUsed1 + lead], 1u) == (unsigned)(G.ndr - 1)) {
    store_relaxed(&a.sync[kSyncDone1 + lead], 0u);  // last reader of this expert's partials
    store_relaxed(&a.sync[kSyncUsed1 + lead], 0u);
  }
  for (int m0 = 0; m0 < M; m0 += kWarp) {
    bool fin = false;
    int tok = 0;
    if (m0 + lane < M) {
      tok = R.plist[beg + m0 + lane] / a.K;
      int valid = 0;
      for (int s = 0; s < a.K; ++s) valid += R.id[tok * a.K + s] >= 0;
      fin = atomic_add_acq_rel(&a.sync[kSyncTok + tok * G.ndr + rng], 1u) + 1 == (unsigned)valid;
    }
    uint64_t mask = ballot(fin);
    while (mask) {  // this warp completed token `tk` for this row range: sum its slots in order
      const int src = ctz64(mask);
      mask &= mask - 1;
      const int tk = shfl_int(tok, src);
      fence_acq_rel();  // lane src acquired the other slots' rows; every lane reads them
      for (int r = lane; r < G.nr2; r += kWarp) {
        const int row = rng * G.nr2 + r;
        if (row < a.D) a.out[(size_t)tk * a.D + row] = f32_to_bf16(a.out_scale * sum_slots(a, R.id, tk, row));
      }
      if (lane == 0) store_relaxed(&a.sync[kSyncTok + tk * G.ndr + rng], 0u);
    }
  }
}

// ------------------------------------------------------------------ the kernel
template <int Fmt, int Layout>
__global__ void SMALLM_WARP_BOUNDS smallm_moe_warp_kernel(MoeArgs a) {
  __shared__ Routing R;
  __shared__ int blk_first, blk_warps_left;
  const int t = thread_id(), lane = lane_id(), w = t / kWarp;
  const int B = a.ticket_batch;
  // One claim per block for the first batch of every warp (published by build_routing's barriers).
  if (t == 0) {
    blk_first = (int)atomic_add_relaxed(&a.sync[kSyncTicket], (unsigned)(kWarps * B));
    blk_warps_left = kWarps;
  }
  build_routing(a, R);
  const WGeometry G = wgeometry<Fmt>(a.D, a.I);
  const int n1 = R.nd * G.n1per, n = n1 + R.nd * G.ndr;
  if (block_id() == 0) {  // tokens with no valid slot get zeros
    for (int tok = 0; tok < a.T; ++tok) {
      int valid = 0;
      for (int s = 0; s < a.K; ++s) valid += R.id[tok * a.K + s] >= 0;
      if (valid == 0)
        for (int d = t; d < a.D; d += kThreads) a.out[(size_t)tok * a.D + d] = 0;
    }
  }
  int item = blk_first + w * B, left = B;  // this warp's batch: [item, item + left)
  while (item < n) {
    Loads2 L;  // per item: nothing carried between items
    const bool claim = left == 1;  // the batch's last item claims the next batch
    int next = n;
    if (item < n1) {
      const int u = item / G.n1per, rest = item - u * G.n1per;
      const int grp = rest / G.ksplit, ks = rest - grp * G.ksplit;
      const int e = R.id[R.ulead[u]];
      switch (G.vr) {
#define SMALLM_W1(VRV)                                                   \
  case VRV:                                                              \
    w1_loads<Fmt, Layout, VRV>(a, G, e, grp, ks, L);                     \
    w1_item<Fmt, Layout, VRV>(a, G, R, u, grp, ks, L, claim, n, next);   \
    break;
        SMALLM_W1(1) SMALLM_W1(2) SMALLM_W1(4)
#if !defined(SMALLM_HIP)
        SMALLM_W1(8)
#endif
#undef SMALLM_W1
        default: break;
      }
      if (lane == 0) signal_add(&a.sync[kSyncDone1 + R.ulead[u]], 1u);  // release: lane 0 wrote h
    } else {
      const int i2 = item - n1, u = i2 / G.ndr, rng = i2 - u * G.ndr;
      const int e = R.id[R.ulead[u]];
      w2_loads<Fmt, Layout, 1>(a, G, e, rng, L);
      w2_item<Fmt, Layout, 1>(a, G, R, u, rng, L, claim, n, next);
    }
    if (claim) {
      item = next;
      left = B;
    } else {
      ++item;
      --left;
    }
  }
  // the block's last warp out counts the block; the grid's last block resets the ticket
  if (lane == 0 && smem_atomic_add(&blk_warps_left, -1) == 1 &&
      atomic_add_acq_rel(&a.sync[kSyncExit], 1u) == (unsigned)(a.nblocks - 1)) {
    store_relaxed(&a.sync[kSyncTicket], 0u);
    store_relaxed(&a.sync[kSyncExit], 0u);
  }
}

}  // namespace smallm
