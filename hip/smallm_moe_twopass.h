// smallm_moe_twopass.h: the fused small-M MoE as two streaming kernels (variant 5).
//
// The block kernel (smallm_moe.h) runs one launch whose items hand partial sums to each other
// through global counters; on the H200 it is bound by that per-item chain (acquire, partial
// reads, release, ticket), not by the weight bytes. Here nothing waits on another block:
//
//   gate/up  as many blocks as are resident; each derives the distinct experts (first-occurrence
//            order) and takes jobs b, b + G, ...: job (expert u, tile) is 2 gate rows and the same
//            2 up rows of W13[e] over all of K (every thread 4-8 vectors of one row), dotted with
//            x of every pair of e, reduced over the block into h[pair, rows] = silu(gate) * up
//            (fp32). The next job's weights are loaded while this one computes.
//   down     grid (D / rb row blocks). A block owns rb output rows for every pair: its warps take
//            the distinct experts in turn (the next expert's W2 rows are loaded while this one
//            computes), write y[pair, rows] to shared memory, and the block then sums each token's
//            slots in slot order into out (deterministic: every sum has a fixed order).
//
// On sm_90 the down kernel is launched as a programmatic dependent of the gate/up kernel: its
// prologue and its first W2 loads run while the gate/up kernel finishes, and it waits
// (griddepcontrol.wait) only before reading h. Elsewhere the two launches are stream-ordered.
#pragma once

#include "smallm_moe.h"

namespace smallm {

constexpr int kRowsA = 4;      // W13 rows per gate/up job: 2 gate rows and the same 2 up rows
constexpr int kKStepA = kThreads / kRowsA;  // threads along K per row (vector stride of a thread)
constexpr int kVecB = 4;       // W2 vectors per lane per expert in the down kernel
constexpr int kMaxRowsB = 16;  // output rows per down block (fewer for wide I)

// Block size 256; on CUDA at least `minb` resident blocks per SM (register budget).
#if defined(SMALLM_HIP)
#define SMALLM_TP_BOUNDS(minb) __attribute__((amdgpu_flat_work_group_size(1, 256)))
#else
#define SMALLM_TP_BOUNDS(minb) __launch_bounds__(256, minb)
#endif

// Vectors of one W13 row each gate/up thread holds: 4 or 8 (the launcher picks the instantiation).
template <int Fmt>
__host__ __device__ inline int gateup_vectors_per_thread(int D) {
  const int nv = D / 16 / Format<Fmt>::kRowBytesDiv;
  return (nv + kKStepA - 1) / kKStepA;
}

// Output rows per down block: every lane holds at most kVecB vectors of its row.
template <int Fmt>
__host__ __device__ inline int down_rows(int I) {
  const int nv2 = I / 16 / Format<Fmt>::kRowBytesDiv;
  int rb = kMaxRowsB;
  while (rb > 4 && nv2 * rb > kVecB * kWarp) rb >>= 1;
  return rb;
}

// ------------------------------------------------------------------ gate/up kernel
// Job (distinct expert u, tile): W13 rows 2*tile, 2*tile+1 (gate) and I+2*tile, I+2*tile+1 (up) over
// all of K. Thread t holds row t % 4 at vectors t/4 + 64j. As many blocks as are resident; block b
// takes jobs b, b + G, ... and loads the next job's weights while it computes this one.
struct GateUpLoads {
  template <int kJ>
  struct Of {
    Vec16 v[kJ];
    float s[kJ];
  };
};

template <int Fmt, int Layout, int kJ>
__global__ void SMALLM_TP_BOUNDS(kJ <= 4 ? 3 : 2) smallm_gateup_kernel(MoeArgs a) {
  using F = Format<Fmt>;
  using Loads = GateUpLoads::Of<kJ>;
  __shared__ Routing R;
  __shared__ float red[2][kMC][kWarps][kRowsA];
  grid_dependents_launch();  // the down kernel may start its prologue and W2 loads now
  const int t = thread_id(), lane = lane_id(), w = t / kWarp, rr = t % kRowsA;
  build_routing(a, R);
  const int tiles = a.I / 2, njobs = R.nd * tiles, G = a.nblocks;
  const int rowb = a.D / F::kRowBytesDiv, nv = rowb / 16;
  auto row_of = [&](int tile) { return (rr < 2 ? 0 : a.I) + 2 * tile + (rr & 1); };
  auto issue = [&](int job, Loads& L) {
    const int u = job / tiles, row = row_of(job - u * tiles);
    const int e = R.id[R.ulead[u]];
    const uint8_t* wb = a.w13 + (size_t)e * 2 * a.I * rowb;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int kvi = t / kRowsA + kKStepA * j;
      if (kvi < nv) L.v[j] = load_weights(wb + vec_offset<Layout>(row, kvi, rowb));
    }
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int kvi = t / kRowsA + kKStepA * j;
      if (kvi < nv) L.s[j] = F::template scale<Layout>(a.s13, e, 2 * a.I, a.D, row, kvi);
    }
  };
  constexpr int kXv = F::kElems / 8;  // bf16 vectors of x per weight vector
  int buf = 0;
  auto compute = [&](int job, Loads& L) {
    const int u = job / tiles, tile = job - u * tiles;
    const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
    for (int m0 = 0; m0 < M; m0 += kMC) {
      const int mc = imin(kMC, M - m0);
      float acc[kMC];
#pragma unroll
      for (int m = 0; m < kMC; ++m) acc[m] = 0.0f;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const int kvi = t / kRowsA + kKStepA * j;
        if (kvi < nv) {
          opaque(L.v[j]);  // keep decoded weights from being hoisted out of the pair-group loop
#pragma unroll
          for (int m = 0; m < kMC; ++m) {
            if (m < mc) {
              const uint16_t* xp = a.x + (size_t)(R.plist[beg + m0 + m] / a.K) * a.D + (size_t)kvi * F::kElems;
              Vec16 xv[kXv];
#pragma unroll
              for (int i = 0; i < kXv; ++i) xv[i] = load_cached(xp + 8 * i);
              acc[m] = ffma(L.s[j], F::dot_bf16(L.v[j], xv), acc[m]);
            }
          }
        }
      }
#pragma unroll
      for (int m = 0; m < kMC; ++m) {
        for (int o = kRowsA; o < kWarp; o <<= 1) acc[m] += shfl_xor(acc[m], o);  // lanes of one row
        if (lane < kRowsA) red[buf][m][w][lane] = acc[m];
      }
      block_sync();
      if (t < 2 * kMC) {
        const int m = t / 2, i = t % 2;
        if (m < mc) {
          float g = 0.0f, up = 0.0f;
          for (int ww = 0; ww < kWarps; ++ww) {
            g += red[buf][m][ww][i];
            up += red[buf][m][ww][2 + i];
          }
          a.h[(size_t)R.plist[beg + m0 + m] * a.I + 2 * tile + i] = silu(g) * up;
        }
      }
      buf ^= 1;  // the next group writes the other buffer; the one after waits behind its barrier
    }
  };
  int job = block_id();
  Loads cur, nxt;
  if (job < njobs) issue(job, cur);
  while (job < njobs) {
    const int jn = job + G;
    if (jn < njobs) issue(jn, nxt);
    compute(job, cur);
    cur = nxt;
    job = jn;
  }
}

// ------------------------------------------------------------------ down kernel
// W2 vectors (and scales) of one expert's rb rows held by one lane.
struct DownLoads {
  Vec16 v[kVecB];
  float s[kVecB];
};

template <int Fmt, int Layout>
__global__ void SMALLM_TP_BOUNDS(2) smallm_down_kernel(MoeArgs a) {
  using F = Format<Fmt>;
  extern __shared__ float ys[];  // [T*K][rb]: y of every pair for this block's rows
  __shared__ int first[kMaxExperts];
  __shared__ int ids[kMaxPairs];
  const int t = thread_id(), lane = lane_id(), w = t / kWarp;
  const int N = a.T * a.K;
  const int rb = down_rows<Fmt>(a.I), row0 = block_id() * rb;
  const int rowb2 = a.I / F::kRowBytesDiv, nv2 = rowb2 / 16;
  const int lr = lane % rb, cls = lane / rb, lpr = kWarp / rb;  // lane's row, K class, lanes per row
  for (int e = t; e < a.E; e += kThreads) first[e] = 0x7fffffff;
  block_sync();
  for (int q = t; q < N; q += kThreads) {
    const int e = a.topk_ids[q];
    const int id = (e >= 0 && e < a.E) ? e : -1;
    ids[q] = id;
    if (id >= 0) smem_atomic_min(&first[id], q);
  }
  block_sync();
  auto next_leader = [&](int q) {  // first pair >= q, q = w (mod kWarps), that opens its expert
    while (q < N && (ids[q] < 0 || first[ids[q]] != q)) q += kWarps;
    return q;
  };
  auto issue = [&](int q, DownLoads& L) {
    const int e = ids[q];
    const uint8_t* wb = a.w2 + (size_t)e * a.D * rowb2;
#pragma unroll
    for (int c = 0; c < kVecB; ++c) {
      const int kvi = cls + lpr * c;
      if (kvi < nv2) L.v[c] = load_weights(wb + vec_offset<Layout>(row0 + lr, kvi, rowb2));
    }
#pragma unroll
    for (int c = 0; c < kVecB; ++c) {
      const int kvi = cls + lpr * c;
      if (kvi < nv2) L.s[c] = F::template scale<Layout>(a.s2, e, a.D, a.I, row0 + lr, kvi);
    }
  };
  bool waited = false;
  auto compute = [&](int q, DownLoads& L) {
    if (!waited) {
      grid_dependency_wait();  // h comes from the gate/up kernel
      waited = true;
    }
    const int e = ids[q];
    for (int q0 = q; q0 < N; q0 += kWarp) {
      const int qq = q0 + lane;
      uint64_t m = ballot(qq < N && ids[qq] == e);
      while (m != 0) {
        const int pq = q0 + ctz64(m);
        m &= m - 1;
        const float* hq = a.h + (size_t)pq * a.I;
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < kVecB; ++c) {
          const int kvi = cls + lpr * c;
          if (kvi < nv2) {
            opaque(L.v[c]);
            const float* hv = hq + kvi * F::kElems;
            float hr[F::kElems];
#pragma unroll
            for (int i = 0; i < F::kElems / 4; ++i) {
              const float4 f = load_coherent4(hv + 4 * i);
              hr[4 * i] = f.x;
              hr[4 * i + 1] = f.y;
              hr[4 * i + 2] = f.z;
              hr[4 * i + 3] = f.w;
            }
            float part = 0.0f;
            auto step = [&](auto P) {
              constexpr int pp = decltype(P)::value;
              float lo, hi;
              F::template pair<pp>(L.v[c], lo, hi);
              part = ffma(lo, hr[2 * pp], ffma(hi, hr[2 * pp + 1], part));
            };
            StaticFor<0, F::kElems / 2>::run(step);
            acc = ffma(L.s[c], part, acc);
          }
        }
        for (int o = rb; o < kWarp; o <<= 1) acc += shfl_xor(acc, o);
        if (cls == 0) ys[pq * rb + lr] = acc;
      }
    }
  };
  int q = next_leader(w);
  DownLoads cur, nxt;
  if (q < N) issue(q, cur);
  while (q < N) {
    const int qn = next_leader(q + kWarps);
    if (qn < N) issue(qn, nxt);
    compute(q, cur);
    cur = nxt;
    q = qn;
  }
  grid_dependency_wait();  // before writing out (it may alias memory the gate/up kernel reads)
  block_sync();
  for (int i = t; i < a.T * rb; i += kThreads) {
    const int tok = i / rb, r = i - tok * rb;
    float sum = 0.0f;
    for (int k = 0; k < a.K; ++k) {
      const int pq = tok * a.K + k;
      if (ids[pq] >= 0) sum = ffma(a.topk_w[pq], ys[pq * rb + r], sum);
    }
    a.out[(size_t)tok * a.D + row0 + r] = f32_to_bf16(a.out_scale * sum);
  }
}

}  // namespace smallm
