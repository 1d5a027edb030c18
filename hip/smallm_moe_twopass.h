// smallm_moe_twopass.h: the fused small-M MoE as two streaming kernels (variant 5).
//
// The block kernel (smallm_moe.h) runs one launch whose items hand partial sums to each other
// through global counters; on the H200 it is bound by that per-item chain (acquire, partial
// reads, release, ticket), not by the weight bytes. Here nothing waits on another block (the
// CUDA default; H200 Qwen3.5 with both passes on tensor cores: FP8 1.41-1.56x (TP4) and 1.61-1.90x
// (TP8) the read floor at 1-20 tokens, faster than SGLang's Triton path up to 20 tokens at TP4 and
// 41 at TP8 (calls over x's stage split, above 20); MXFP4 2.3-3.1x at 1-20; examples/results
// "h200-ab7", "h200-ab8", "h200-ab9"):
//
//   gate/up  as many blocks as are resident; each derives the distinct experts (first-occurrence
//            order) and takes jobs b, b + G, ...: job (expert u, tile) is 4 gate rows and the same
//            4 up rows of W13[e] over all of K (every thread 4-8 vectors of one row), dotted with
//            x of every pair of e, reduced over the block into h[pair, rows] = silu(gate) * up
//            (fp32). The next job's weights are loaded while this one computes. FP8 and MXFP4 on
//            CUDA run the same jobs on tensor cores (smallm_gateup_mma_kernel) while x fits its
//            f16 stage, as one block of two 256-thread teams per SM where two blocks' x would leave
//            the SM too little L1 (the launcher's launch_gateup_mma_teams).
//   down     as many blocks as are resident; block b owns row-blocks (rb output rows) b, b + G, ...
//            for every pair. Its warps take the (row-block, distinct expert) jobs in turn with three
//            jobs' W2 rows in flight, read h (staged in shared memory when small), write
//            y[pair, rows] to shared memory, and the block then sums each token's slots in slot
//            order into out (deterministic: every sum has a fixed order).
//            FP8 and MXFP4 on CUDA run it on tensor cores (smallm_down_mma_kernel) while its stage
//            (h, y) fits the block's shared memory, h's lo half as e5m2 where f16 would not; FP8 past
//            I = 256 (to 512) with each job split along I, its parts taken in turn by one warp.
//
// On sm_90 the down kernel is launched as a programmatic dependent of the gate/up kernel: its
// prologue and its first W2 loads run while the gate/up kernel finishes, and it waits
// (griddepcontrol.wait) only before reading h. The tensor-core gate/up is in turn a programmatic
// dependent of whatever precedes it and waits at its entry. Elsewhere the launches are stream-ordered.
#pragma once

#include "smallm_gateup_tma.h"  // tma:: (x's bulk copy on sm_90a)
#include "smallm_moe.h"

namespace smallm {

constexpr int kVecB = 4;        // W2 vectors per lane per job in the down kernel
constexpr int kMaxRowsB = 16;   // output rows per down row-block (fewer for wide I)
constexpr int kRingB = 3;       // down jobs whose weights are in flight per warp
constexpr int kHStageBytes = 32 * 1024;  // h staged in shared memory when it fits

// Block size 256; on CUDA at least `minb` resident blocks per SM (register budget).
// The tensor-core gate/up's block (CUDA only): `teams` teams of 256 threads, 2 / teams blocks per
// SM (128 registers per thread either way).
#if defined(SMALLM_HIP)
#define SMALLM_TP_BOUNDS(minb) __attribute__((amdgpu_flat_work_group_size(1, 256)))
#define SMALLM_TEAMS_BOUNDS(teams) __attribute__((amdgpu_flat_work_group_size(1, 256 * (teams))))
#else
#define SMALLM_TP_BOUNDS(minb) __launch_bounds__(256, minb)
#define SMALLM_TEAMS_BOUNDS(teams) __launch_bounds__(256 * (teams), 2 / (teams))
#endif

// Gate/up job shape for hidden size D: kRows W13 rows (half gate, half up) over all of K, every
// thread kJ vectors of one row. 8 rows while a row fits 8 vectors per thread, else 4; 0 = no fit.
struct GateUpShape {
  int rows, vectors;
};
template <int Fmt>
__host__ __device__ inline GateUpShape gateup_shape(int D) {
  const int nv = D / 16 / Format<Fmt>::kRowBytesDiv;
  const int per8 = (nv * 8 + kThreads - 1) / kThreads, per4 = (nv * 4 + kThreads - 1) / kThreads;
  if (per8 <= 4) return {8, 4};
  if (per8 <= 8) return {8, 8};
  if (per4 <= 8) return {4, 8};
  return {0, 0};
}

// Output rows per down row-block: every lane holds at most kVecB vectors of its row.
template <int Fmt>
__host__ __device__ inline int down_rows(int I) {
  const int nv2 = I / 16 / Format<Fmt>::kRowBytesDiv;
  int rb = kMaxRowsB;
  while (rb > 2 && nv2 * rb > kVecB * kWarp) rb >>= 1;
  return rb;
}

// Dynamic shared memory of the down kernel: y of every pair for the block's row-blocks, then h
// when it fits kHStageBytes.
// Row-blocks b, b + G, ... belong to block b: at most down_local_blocks per block, block b's own count.
__host__ __device__ inline int down_local_blocks(int nrb, int G) { return (nrb + G - 1) / G; }
__host__ __device__ inline int down_owned_blocks(int nrb, int G, int b) { return b < nrb ? (nrb - 1 - b) / G + 1 : 0; }
__host__ __device__ inline bool down_stages_h(int N, int I) { return (long)N * I * 4 <= kHStageBytes; }
__host__ __device__ inline int down_ys_floats(int N, int rb, int nloc) { return (nloc * N * rb + 3) / 4 * 4; }
__host__ __device__ inline int down_smem_bytes(int N, int I, int rb, int nloc) {
  return down_ys_floats(N, rb, nloc) * 4 + (down_stages_h(N, I) ? N * I * 4 : 0);
}
constexpr int kMaxYsBytes = 96 * 1024;  // the launcher adds blocks until y fits

// ------------------------------------------------------------------ gate/up kernel
// Jobs b, b + G, ... (< njobs) of block b, the next job's weights loaded while this one computes.
// `ready`: block-wide work the jobs need but their loads do not (x staging), run after the first
// job's loads are issued, or before them with kReadyFirst. (Two alternating register sets instead
// of the copy cur = nxt were measured slower on the H200: examples/results "h200-mma-down" run 1,
// and again for the tensor-core gate/up at 1 token in "h200-timeline" run 4.)
// `settle(cur)`, before the next job's loads are issued, returns 0 computed from this job's loaded
// registers; the next job's index is offset by it, so that its loads cannot be issued before this
// job's have arrived (NoSettle: the constant 0, no such order).
struct NoSettle {
  template <class L>
  SMALLM_DEV int operator()(L&) const {
    return 0;
  }
};
template <class Loads, bool kReadyFirst = false, class Issue, class Ready, class Compute, class Settle = NoSettle>
SMALLM_DEV void run_jobs(int first, int njobs, int G, Issue& issue, Ready& ready, Compute& compute, Settle settle = {}) {
  int job = first;
  Loads cur, nxt;
  if (kReadyFirst) ready();
  if (job < njobs) issue(job, cur);
  if (!kReadyFirst) ready();
  while (job < njobs) {
    // The settle is part of the next index itself (not only of the issued one), so the wait for this
    // job's loads is taken on every path, also where there is no next job: else the compiler sinks it
    // into the issuing branch and waits again after it, for the next job's loads too (two-team blocks).
    const int jn = job + G + settle(cur);
    if (jn < njobs) issue(jn, nxt);
    compute(job, cur);
    cur = nxt;
    job = jn;
  }
}

// Job (distinct expert u, tile): kRows/2 gate rows tile*kRows/2.. and the same up rows, over all
// of K. Thread t holds row t % kRows at vectors t / kRows + (kThreads / kRows) j. As many blocks as
// are resident; block b takes jobs b, b + G, ... and loads the next job's weights while it
// computes this one.
template <int kJ>
struct GateUpLoads {
  Vec16 v[kJ];
  float s[kJ];
};

template <int Fmt, int Layout, int kRows, int kJ>
__global__ void SMALLM_TP_BOUNDS(2) smallm_gateup_kernel(MoeArgs a) {
  using F = Format<Fmt>;
  using Loads = GateUpLoads<kJ>;
  constexpr int kHalf = kRows / 2, kStep = kThreads / kRows;
  __shared__ Routing R;
  __shared__ float red[2][kMC][kWarps][kRows];
  grid_dependents_launch();  // the down kernel may start its prologue and W2 loads now
  const int t = thread_id(), lane = lane_id(), w = t / kWarp, rr = t % kRows;
  build_routing(a, R);
  const int tiles = a.I / kHalf, njobs = R.nd * tiles, G = a.nblocks;
  const int rowb = a.D / F::kRowBytesDiv, nv = rowb / 16;
  const PairToken ptok{a.pair_magic};
  auto issue = [&](int job, Loads& L) {
    const int u = job / tiles, tile = job - u * tiles;
    const int row = (rr < kHalf ? 0 : a.Iw) + kHalf * tile + rr % kHalf;
    const int e = R.id[R.ulead[u]];
    const uint8_t* wb = a.w13 + (size_t)e * 2 * a.Iw * rowb;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int kvi = t / kRows + kStep * j;
      if (kvi < nv) L.v[j] = load_weights(wb + vec_offset<Layout>(row, kvi, rowb));
    }
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int kvi = t / kRows + kStep * j;
      if (kvi < nv) L.s[j] = F::template scale<Layout>(a.s13, e, 2 * a.Iw, a.D, row, kvi);
    }
  };
  constexpr int kXv = F::kElems / 8;  // bf16 vectors of x per weight vector
  int buf = 0;
  auto compute = [&](int job, Loads& L) {
    const int u = job / tiles, tile = job - u * tiles;
    const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
    for (int m0 = 0; m0 < M; m0 += kMC) {
      const int mc = imin(kMC, M - m0);
      const uint16_t* xr[kMC];
#pragma unroll
      for (int m = 0; m < kMC; ++m)
        xr[m] = a.x + (size_t)ptok(R.plist[beg + m0 + imin(m, mc - 1)]) * a.D + (size_t)(t / kRows) * F::kElems;
      float acc[kMC];
#pragma unroll
      for (int m = 0; m < kMC; ++m) acc[m] = 0.0f;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        if (t / kRows + kStep * j < nv) {
          opaque(L.v[j]);  // keep decoded weights from being hoisted out of the pair-group loop
#pragma unroll
          for (int m = 0; m < kMC; ++m) {
            if (m < mc) {
              const uint16_t* xp = xr[m] + (size_t)(kStep * j) * F::kElems;
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
        if (m < mc) {
          for (int o = kRows; o < kWarp; o <<= 1) acc[m] += shfl_xor(acc[m], o);  // lanes of one row
          if (lane < kRows) red[buf][m][w][lane] = acc[m];
        }
      }
      block_sync();
      if (t < kHalf * kMC) {
        const int m = t / kHalf, i = t % kHalf;
        if (m < mc) {
          float g = 0.0f, up = 0.0f;
          for (int ww = 0; ww < kWarps; ++ww) {
            g += red[buf][m][ww][i];
            up += red[buf][m][ww][kHalf + i];
          }
          a.h[(size_t)R.plist[beg + m0 + m] * a.I + kHalf * tile + i] = silu(g) * up;
        }
      }
      buf ^= 1;  // the next group writes the other buffer; the one after waits behind its barrier
    }
  };
  auto nothing = [] {};
  run_jobs<Loads>(block_id(), njobs, G, issue, nothing, compute);
}

// Power-of-two scale of a row staged as f16 (x in the tensor-core gate/up, h in the tensor-core
// down): e with amax * 2^-e in [2^14, 2^15), clamped to e >= -100 (reference.quant._f16_stage_scale).
SMALLM_DEV int f16_stage_exponent(float amax) {
  const int e = (int)((__builtin_bit_cast(uint32_t, amax) >> 23) & 0xff) - 127 - 14;
  return e < -100 ? -100 : e;
}
SMALLM_DEV float exp2_int(int e) { return __builtin_bit_cast(float, (127 + e) << 23); }  // 2^e, |e| <= 126

// ------------------------------------------------------------------ gate/up on tensor cores (sm_89+)
// Same jobs as smallm_gateup_kernel (4 gate + 4 up rows over all of K), computed with mma.sync
// m16n8k16 (f16 in, fp32 accumulate), the weights as A and x as B:
//   A = the weights as f16: FP8 e4m3 -> f16 is exact (one conversion per two weights); MXFP4 below.
//       A has 16 rows but a job only 8, so row g and row g + 8 of A both hold job row g: row g the
//       first half of the lane's k values of the MMA, row g + 8 the second half. No A row is zero.
//   B = x as f16, scaled per token by 2^-e_t so that max|x_t| lands in [2^14, 2^15) (bf16 -> f16 is
//       then exact for every value above 2^-14 of the scaled range; smaller ones, below 2^-28 of the
//       token's largest, round to f16 subnormals), staged once per block in shared memory. Column
//       2m holds pair m's x at the first halves' k values, column 2m + 1 at the second halves'; so
//       C[g, 2m] + C[g + 8, 2m + 1] is row g's sum for pair m (the other two C entries are cross
//       terms and are dropped). 4 pairs per pass; 2^e_t is applied with the weight scales at the end.
//   (With x as A and the weights as B, rows g + 8 of A were zero: twice the MMAs, and each MMA's
//   A registers gathered as [x, 0, x, 0]: examples/results "h200-ab".)
// Lane l = (g = l/4, q = l%4) holds, for step s (vectors 4s..4s+3 of every row: 64 values of K for
// FP8, inside one 128-wide scale block; 128 for MXFP4), vector 4s+q of job row g, and loads the x
// half (h = g % 2) of pair g / 2 that its B column takes. FP8: MMA i (0, 1) of the step takes bytes
// 4i..4i+3 of the vector as row g (k slots 2q, 2q+1, 2q+8, 2q+9) and bytes 8+4i..8+4i+3 as row g+8;
// x in natural order, the lane reading values 8h..8h+7 of the vector's 16. MXFP4: word i (0, 1)
// is row g and word i+2 row g+8 of MMAs 2i, 2i+1 (e2m1x8_to_f16x2: slots 2q, 2q+1 = values 0, 4,
// then 1, 5 for the first MMA; 2, 6 and 3, 7 for the second), and x is staged in that order
// (mxfp4_mma_order), the lane reading the 16 values 16h..16h+15 of the vector's 32. The dot product
// does not depend on the order of k as long as x takes the same order. Warp w takes steps w, w+8,
// ...; kJ steps at most per warp.
//
// MXFP4 scales on tensor cores, the gate/up and the down where I takes four chunks: a lane's vector
// has its own e8m0 scale s; the quad's four vectors of one row and step have the largest R. The lane
// multiplies its decoded values (v 2^-14, exact) by 2^(s - R + 15) in f16, exact while R - s <= 24
// (smaller blocks round to f16 subnormals or zero: reference.quant.mxfp4_tensor_core_weights models
// it); the step's MMA sums take 2^(R - 128) in fp32. The down where I takes two chunks (kBlockMma)
// instead gives every MMA one block (each lane word q of it) and takes the block's scale on the MMA's
// fp32 sums: exact, no f16 multiplies (3-7 % faster, examples/results "h200-ab7" runs 2-3). The same
// for the gate/up, its lanes loading 4-byte words of four vectors instead of one 16-byte vector, was
// slower (run 1: per-block loads spread over 8 rows). (Decoding through e4m3 bytes and the FP8
// conversion, 7 bit operations and 4 conversions for 8 values instead of 16 bit operations, was 0-4 %
// slower: examples/results "h200-ab6" run 3.)
constexpr int kMmaPairs = 4;                 // pairs per MMA pass: B columns 2m, 2m+1 are pair m's two halves
// x staged as f16 when T * D * 2 fits (T <= 20 at D = 4096; above, the launcher splits the call into
// parts that fit, mma_split_tokens, or with SMALLM_MMA_SPLIT=0 runs the CUDA-core kernels): two
// one-team blocks per SM while both fit the 196 KB carveout, else one block of two teams
// (the launcher's launch_gateup_mma_teams).
constexpr int kXStageBytes = 160 * 1024;
// Pairs of a tensor-core call (x of 20 tokens at D = 4096 with 16 slots; the launcher splits a call
// of more into parts, mma_split_tokens). Its down and its two-team gate/up hold their routing for this
// many pairs (MmaRouting, 10.4 KB; Routing for kMaxPairs takes 19.1 KB): at Qwen3.5 TP4 18 tokens
// both kernels' blocks then stay within a smaller shared-memory carveout (gate/up 164 KB, down
// 196 KB), which leaves L1 room for more weight loads in flight: FP8 160.7 -> 144.9 us, TP8 84.3 ->
// 79.9 (examples/results "h200-ab14" run 3). The one-team gate/up keeps Routing: its blocks per SM
// follow its bytes (launch_gateup_mma_teams), measured with it.
constexpr int kMmaMaxPairs = 320;
using MmaRouting = RoutingFor<kMmaMaxPairs, kMaxExperts>;

// Values of K per step (4 lanes x one 16-byte vector): 64 FP8, 128 MXFP4.
template <int Fmt>
__host__ __device__ constexpr int mma_step_values() { return 4 * Format<Fmt>::kElems; }

// Bytes of x staged as f16 by the tensor-core gate/up (its dynamic shared memory).
__host__ __device__ inline long gateup_x_stage_bytes(int T, int D) { return (long)T * D * 2; }
// The tensor-core gate/up's dynamic shared memory: x, then a per-token scale each (gateup_xmax)
__host__ __device__ inline long gateup_mma_smem_bytes(int T, int D) { return gateup_x_stage_bytes(T, D) + (T * 4 + 15) / 16 * 16; }

// x fits the f16 stage, the pairs kMmaMaxPairs, and every warp takes at most 8 steps.
template <int Fmt>
__host__ __device__ inline bool gateup_mma_fits(int T, int K, int D) {
  constexpr int sv = mma_step_values<Fmt>();
  return gateup_x_stage_bytes(T, D) <= kXStageBytes && T * K <= kMmaMaxPairs && D % sv == 0 && D / sv <= 8 * kWarps;
}

// Tokens per part where x is over the stage, or the pairs over kMmaMaxPairs, but D suits the
// tensor-core gate/up: T in the fewest parts that fit, near-equal (ceil(T / parts)): 32 -> 16 + 16,
// 48 -> 16 x 3, 21 -> 11 + 10 at D = 4096. 0 where D does not suit it (kernels.mma_split_tokens
// mirrors this). most_tokens > 0 caps a part's tokens further (SMALLM_MMA_SPLIT_TOKENS, A/B runs).
template <int Fmt>
__host__ __device__ inline int mma_split_tokens(int T, int K, int D, int most_tokens = 0) {
  const long by_x = kXStageBytes / gateup_x_stage_bytes(1, D), by_pairs = kMmaMaxPairs / (K > 0 ? K : 1);
  int most = (int)(by_x < by_pairs ? by_x : by_pairs);
  if (most_tokens > 0 && most_tokens < most) most = most_tokens;
  if (T <= 0 || most < 1 || !gateup_mma_fits<Fmt>(1, K, D)) return 0;
  const int parts = (T + most - 1) / most;
  return (T + parts - 1) / parts;
}

#if defined(SMALLM_MMA_F16)
SMALLM_DEV int quad_max(int v) {  // max over the 4 lanes of a quad (one row's vectors of a step)
  v = imax(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return imax(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Eight f16 of a staged row (x or h) in MXFP4 k order: word j = values j, j + 4 (e2m1x8_to_f16x2).
SMALLM_DEV Vec16 mxfp4_mma_order(const uint16_t (&h)[8]) {
  Vec16 o;
#pragma unroll
  for (int j = 0; j < 4; ++j) o.w[j] = (uint32_t)h[j] | ((uint32_t)h[j + 4] << 16);
  return o;
}
#endif

template <int kJ>
struct GateUpMmaLoads {
  Vec16 v[kJ];
  float s[kJ];     // FP8: block scale of the lane's row g at its step
  uint32_t b[kJ];  // MXFP4: e8m0 byte of the lane's own vector
};

#if defined(SMALLM_MMA_F16)
// The static shared memory of the tensor-core gate/up kernel (x is in its dynamic shared memory). Its
// routing is for kPairs pairs: one team Routing's, two MmaRouting's (kMmaMaxPairs above says why); a
// call's tokens are at most its pairs.
// The per-token scales (xmax) follow x in the dynamic shared memory, T of them
// (gateup_mma_smem_bytes), and each team's cross-warp sums (red) take the routing's expert map
// (e2u), which only build_routing uses: it ends with a barrier before the first job, and no job reads
// e2u. So the block is 5.25 KB smaller than with both as members (routing 10624 B, sums 4096, scales
// 1280): at D = 4096 and 19 tokens the two-team block (x 152 KB) then fits the 164 KB carveout beside
// 92 KB of L1 instead of taking the 196 KB one (60 KB of L1; examples/results "h200-s35" run 3):
// 6 % faster at TP4 19 tokens, 4.5 % at TP8 ("h200-s36" run 1).
template <int kTeams>
struct GateUpMmaShared {
  static constexpr int kPairs = kTeams == 2 ? kMmaMaxPairs : kMaxPairs;
  using Red = float[2][kWarps][kMmaPairs][8];  // a team's sums, two buffers: rows 0-3 gate, 4-7 up
  RoutingFor<kPairs, kMaxExperts> R;
  unsigned long long xbar;  // sm_90a: x's bulk copy arrived
  SMALLM_DEV Red& red(int team) { return reinterpret_cast<Red*>(R.e2u)[team]; }
  static_assert(kTeams * sizeof(Red) <= sizeof(R.e2u), "the teams' sums must fit the routing's expert map");
};
// The tensor-core gate/up's per-token scales: after x ([T][D] f16) in its dynamic shared memory, max |x|
// (float bits) while x is staged, then 2^e_t (float bits).
SMALLM_DEV int* gateup_xmax(uint16_t* xs, const MoeArgs& a) { return reinterpret_cast<int*>(xs + (size_t)a.T * a.D); }
SMALLM_DEV const int* gateup_xmax(const uint16_t* xs, const MoeArgs& a) {
  return reinterpret_cast<const int*>(xs + (size_t)a.T * a.D);
}

// The block's barrier, or with two teams (gate/up, 512 threads) the team's own: named barrier 1 + team
// over its 256 threads.
template <int kTeams>
SMALLM_DEV void team_sync(int team) {
  if constexpr (kTeams == 1) {
    (void)team;
    block_sync();
  } else {
    asm volatile("bar.sync %0, %1;" ::"r"(1 + team), "r"(kThreads) : "memory");
  }
}

// In two-team blocks (16 warps, from 10 tokens at D = 4096), warp w copies and then stages tokens
// w, w + 16, ... alone, lane l the vectors l, l + 32, ... of each: no block barrier between the copy,
// the max and the rescale (block-wide they are T rounds of two barriers). TP4 12 tokens 117.9 ->
// 113.1 us, 14: 144.7 -> 136.9 (examples/results "h200-ab4", runs 2 -> 3); in one-team blocks
// (8 warps) it was slower, 4 tokens 44.7 -> 46.6 (run 3).
template <int kBlockThreads>
SMALLM_DEV bool stage_x_by_warps(int T) { return kBlockThreads > kThreads && 2 * T >= kBlockThreads / kWarp; }

// x -> shared memory xs [T][D] as it is (bf16), asynchronously: issued during the routing, right
// after the expert ids are requested, so that its latency hides behind the routing (staged after
// the first weight loads it took 3.5 us of the gate/up's 13 at T = 1: examples/results
// "h200-timeline").
// Two-team blocks on sm_90a (FP8 from 2 tokens, MXFP4 from 10) take one bulk copy of all of x by
// thread 0 on the transaction barrier xbar instead, so that no other thread stalls issuing copies while
// the routing runs: x staged 0.4-1.0 us earlier at 8-16 tokens, the layer 0-1.3 % faster at 2-20
// tokens (examples/results "h200-mxtma" runs 9-10). One-team blocks keep cp.async: with the bulk copy
// FP8 TP4 1 token was 7 % slower (16.7 -> 17.9 us, run 9).
template <int kBlockThreads>
SMALLM_DEV constexpr bool stage_x_bulk() {
#if defined(SMALLM_SM90_TMA)
  return kBlockThreads > kThreads;
#else
  return false;
#endif
}
template <int kBlockThreads>
SMALLM_DEV void stage_x_issue(const MoeArgs& a, uint16_t* xs, unsigned long long* xbar) {
  if constexpr (stage_x_bulk<kBlockThreads>()) {
    if (thread_id() == 0) {
      const uint32_t bar = tma::saddr(xbar);
      tma::mbar_init(bar);
      tma::mbar_init_fence();
      tma::mbar_expect(bar, (uint32_t)(a.T * a.D * 2));
      tma::bulk_copy(tma::saddr(xs), a.x, (uint32_t)(a.T * a.D * 2), bar);
    }
    return;
  }
  if (stage_x_by_warps<kBlockThreads>(a.T)) {
    const int dv = a.D / 8, lane = lane_id();
    for (int tok = thread_id() / kWarp; tok < a.T; tok += kBlockThreads / kWarp)
      for (int i = lane; i < dv; i += kWarp) copy16_async(xs + (size_t)tok * a.D + 8 * i, a.x + (size_t)tok * a.D + 8 * i);
  } else {
    const int nv = a.T * a.D / 8;
    for (int i = thread_id(); i < nv; i += kBlockThreads) copy16_async(xs + 8 * i, a.x + 8 * i);
  }
  copy_async_commit();
}

// Vector v of x (8 bf16) -> 8 f16 * inv (for MXFP4 in mxfp4_mma_order).
template <bool kFp4>
SMALLM_DEV Vec16 stage_x_vector(const Vec16& v, float inv) {
  uint16_t hv[8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    hv[2 * k] = f32_to_f16(bf16_lo(v.w[k]) * inv);
    hv[2 * k + 1] = f32_to_f16(bf16_hi(v.w[k]) * inv);
  }
  Vec16 o;
  if constexpr (kFp4) {
    o = mxfp4_mma_order(hv);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) o.w[k] = (uint32_t)hv[2 * k] | ((uint32_t)hv[2 * k + 1] << 16);
  }
  return o;
}

// x's copy complete for this thread: the bulk copy's barrier (stage_x_bulk), else its own cp.async groups.
template <int kBlockThreads>
SMALLM_DEV void stage_x_wait(unsigned long long* xbar) {
  if constexpr (stage_x_bulk<kBlockThreads>())
    tma::mbar_wait(tma::saddr(xbar), 0);
  else
    copy_async_wait();
}

// stage_x_finish by warps (two-team blocks): each lane reads back only vectors it copied (cp.async) or
// that the bulk copy's barrier, which every thread waits for, covers, so that wait is all the ordering
// it needs until the closing barrier.
template <bool kFp4, int kBlockThreads>
SMALLM_DEV void stage_x_finish_by_warps(const MoeArgs& a, uint16_t* xs, int* xmax, unsigned long long* xbar) {
  const int lane = lane_id(), dv = a.D / 8;
  stage_x_wait<kBlockThreads>(xbar);
  for (int tok = thread_id() / kWarp; tok < a.T; tok += kBlockThreads / kWarp) {
    Vec16* row = reinterpret_cast<Vec16*>(xs + (size_t)tok * a.D);
    float mx = 0.0f;
#pragma unroll 2
    for (int i = lane; i < dv; i += kWarp) {
      const Vec16 v = row[i];
#pragma unroll
      for (int k = 0; k < 4; ++k) mx = fmaxf(mx, fmaxf(fabsf(bf16_lo(v.w[k])), fabsf(bf16_hi(v.w[k]))));
    }
    for (int o = 1; o < kWarp; o <<= 1) mx = fmaxf(mx, shfl_xor(mx, o));
    const int e = f16_stage_exponent(mx);
    if (lane == 0) xmax[tok] = __builtin_bit_cast(int, exp2_int(e));
    const float inv = exp2_int(-e);
#pragma unroll 2
    for (int i = lane; i < dv; i += kWarp) row[i] = stage_x_vector<kFp4>(row[i], inv);
  }
  block_sync();
}

// The staged bf16 x -> f16 * 2^-e_t in place: per token the max |x| (warp reduction, one shared
// atomic per warp), then 2^e_t with max|x| * 2^-e_t in [2^14, 2^15), then the scaled values (for
// MXFP4 every 8 in mxfp4_mma_order), each thread rewriting the vectors it read. xmax must be zero on
// entry.
template <bool kFp4, int kBlockThreads>
SMALLM_DEV void stage_x_finish(const MoeArgs& a, uint16_t* xs, int* xmax, unsigned long long* xbar) {
  if (stage_x_by_warps<kBlockThreads>(a.T)) {
    stage_x_finish_by_warps<kFp4, kBlockThreads>(a, xs, xmax, xbar);
    return;
  }
  const int t = thread_id(), lane = lane_id();
  const int dv = a.D / 8;  // 16-byte vectors per token row
  stage_x_wait<kBlockThreads>(xbar);
  block_sync();
  for (int tok = 0; tok < a.T; ++tok) {
    float mx = 0.0f;
    for (int i = t; i < dv; i += kBlockThreads) {
      const Vec16 v = *reinterpret_cast<const Vec16*>(xs + (size_t)tok * a.D + 8 * i);
#pragma unroll
      for (int k = 0; k < 4; ++k) mx = fmaxf(mx, fmaxf(fabsf(bf16_lo(v.w[k])), fabsf(bf16_hi(v.w[k]))));
    }
    for (int o = 1; o < kWarp; o <<= 1) mx = fmaxf(mx, shfl_xor(mx, o));
    if (lane == 0) atomicMax(&xmax[tok], __builtin_bit_cast(int, mx));
  }
  block_sync();
  for (int tok = t; tok < a.T; tok += kBlockThreads) {
    xmax[tok] = __builtin_bit_cast(int, exp2_int(f16_stage_exponent(__builtin_bit_cast(float, xmax[tok]))));
  }
  block_sync();
  for (int tok = 0; tok < a.T; ++tok) {
    const float inv = exp2_int(127 - ((xmax[tok] >> 23) & 0xff));  // 2^-e
    for (int i = t; i < dv; i += kBlockThreads) {
      Vec16* xp = reinterpret_cast<Vec16*>(xs + (size_t)tok * a.D + 8 * i);
      *xp = stage_x_vector<kFp4>(*xp, inv);
    }
  }
  block_sync();
}

// One gate/up job (distinct expert u, tile) from the weights in L: every pass of up to 4 pairs runs
// the warp's steps on tensor cores, reduces over the warps and writes h = silu(gate) * up.
// kFull: every warp has all kJ steps (nsteps == 8 kJ), so the steps need no guards and their MMA
// chains can interleave; MXFP4 steps accumulate in two independent chains (cs, cs2). FP8 takes its
// steps in pairs under one guard (below). kFirstApart: the first pass outside the pass loop (see the
// kernel's kSettle).
template <int Fmt, int kJ, bool kFull, int kTeams, bool kFirstApart>
SMALLM_DEV void gateup_mma_job(const MoeArgs& a, GateUpMmaShared<kTeams>& S, const uint16_t* xs, int& buf, int job,
                               int tiles, int nsteps, PairToken ptok, GateUpMmaLoads<kJ>& L) {
  using F = Format<Fmt>;
  constexpr bool kFp4 = Fmt == kMxfp4;
  constexpr int kSv = mma_step_values<Fmt>();
  const auto& R = S.R;
  const int team = kTeams == 1 ? 0 : thread_id() / kThreads;  // this team's thread t
  const int t = kTeams == 1 ? thread_id() : thread_id() % kThreads;
  const int lane = lane_id(), w = t / kWarp, g = lane >> 2, q = lane & 3;
  const int u = kFp4 ? JobExpert{a.tile_magic}(job) : job / tiles, tile = job - u * tiles;  // as the kernel's issue
  const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
  const int pm = g >> 1, hf = g & 1;  // this lane's B column 2 pm + hf: pair pm of the pass, half hf
  // The token of pair p. FP8 divides: with PairToken its kernel was 3-5 % slower at TP4 2-8 tokens
  // (jobs in the steady state 16 % longer, fewer instructions), though 1-4 % faster at 16-20 tokens
  // and at TP8 1-2 (examples/results "h200-ab7" run 3); MXFP4 gained 1-2 % (run 2).
  auto token = [&](int p) { return kFp4 ? ptok(p) : p / a.K; };
  auto pass = [&](int m0) {
    const int mc = imin(kMmaPairs, M - m0);
    // B column g of an MMA, loaded by lane (g, q) at its own k slots: pair pm of the pass, half hf
    // (C[g, 2q] + C[g + 8, 2q + 1] is row g's sum for pair q). MXFP4 jobs of one pair (kLane): column
    // g nonzero only at the k slots of lane pm, so that C[g, 2q] + C[g + 8, 2q + 1] is lane q's own
    // vector alone and takes its own e8m0 in fp32, with no f16 multiplies; summed over the quad after
    // the steps. The choice follows the job's pairs M, not the pass's: the two ways round differently
    // (f16 relative to the quad's largest scale, or exact), and a pair's place in its expert's list
    // is the order of shared atomics (build_routing), so choosing by the pass (a last pass of one
    // pair where M = 4k + 1) made the output differ from call to call (examples/results "h200-ab18").
    float acc = 0.0f;
    auto steps = [&](auto Lane) {
      constexpr bool kLane = decltype(Lane)::value != 0;
      const bool live = kLane ? pm == q : pm < mc;
      const uint16_t* xr = xs + (size_t)token(R.plist[beg + m0 + (kLane || !live ? 0 : pm)]) * a.D + q * F::kElems +
                           hf * (F::kElems / 2);
      auto step = [&](auto J) {  // step st = w + 8 j of this warp, known to exist
        constexpr int j = decltype(J)::value;
        const int st = w + kWarps * j;
        opaque(L.v[j]);
        float cs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if constexpr (kFp4) {
          // kLane: each lane's e8m0 on the fp32 sums; else the f16 values times 2^(s - R), R the quad's largest
          float cs2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          int rmax = 0;
          [[maybe_unused]] uint32_t fac = 0u;  // read only without kLane
          if constexpr (!kLane) {
            rmax = quad_max((int)L.b[j]);  // R of row g (this quad)
            fac = f16x2_pow2((int)L.b[j] - rmax + 15);
          }
          auto sc = [&](uint32_t v) {
            if constexpr (kLane)
              return v;
            else
              return hmul2(v, fac);
          };
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            Vec16 xv{};
            if (live) xv = *reinterpret_cast<const Vec16*>(xr + st * kSv + 8 * i);
            uint32_t p[4], r[4];
            e2m1x8_to_f16x2(L.v[j].w[i], p);
            e2m1x8_to_f16x2(L.v[j].w[i + 2], r);
            mma_f16_16x8x16(cs, sc(p[0]), sc(r[0]), sc(p[1]), sc(r[1]), xv.w[0], xv.w[1]);
            mma_f16_16x8x16(cs2, sc(p[2]), sc(r[2]), sc(p[3]), sc(r[3]), xv.w[2], xv.w[3]);
          }
          const float outer = kLane ? e8m0_to_f32(L.b[j]) : e8m0_half_to_f32(rmax);  // kLane: times 2^-14
          acc = ffma(outer, (cs[0] + cs2[0]) + (cs[3] + cs2[3]), acc);
        } else {
          Vec16 x0{};
          if (live) x0 = *reinterpret_cast<const Vec16*>(xr + st * kSv);
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const uint32_t w0 = L.v[j].w[i], w2 = L.v[j].w[i + 2];
            mma_f16_16x8x16(cs, e4m3x2_to_f16x2(w0), e4m3x2_to_f16x2(w2), e4m3x2_hi_to_f16x2(w0),
                            e4m3x2_hi_to_f16x2(w2), x0.w[2 * i], x0.w[2 * i + 1]);
          }
          acc = ffma(L.s[j], cs[0] + cs[3], acc);
        }
      };
      if constexpr (kFp4) {
        auto guarded = [&](auto J) {
          if (kFull || w + kWarps * decltype(J)::value < nsteps) step(J);
        };
        StaticFor<0, kJ>::run(guarded);
      } else {
        // FP8: steps in pairs under one guard, so that the two steps' MMA chains (each on its own
        // accumulators) interleave; a guard per step made every step wait for the one before (the
        // block's first job spent 1.7 us in its MMAs at T = 1, examples/results "h200-ab" run 8). The
        // sums into acc keep the step order.
        auto pairs = [&](auto P) {
          constexpr int j0 = 2 * decltype(P)::value;
          if (kFull || w + kWarps * (j0 + 1) < nsteps) {
            step(IntC<j0>{});
            step(IntC<j0 + 1>{});
          } else if (w + kWarps * j0 < nsteps) {
            step(IntC<j0>{});
          }
        };
        StaticFor<0, kJ / 2>::run(pairs);
      }
    };
    // Lane scales only where a warp holds four steps (kJ = 4, D <= 4096): with eight the kernel's
    // registers passed 128 (ptxas spilled 24 bytes), so those keep the f16 scales.
    if constexpr (kFp4 && kJ == 4) {
      if (M == 1) {  // by the job's pairs, not the pass's: see above
        steps(IntC<1>{});
        acc += shfl_xor(acc, 1);  // the quad's four vectors
        acc += shfl_xor(acc, 2);
        acc *= 16384.0f;          // the decode's 2^-14 (e2m1x8_to_f16x2)
      } else {
        steps(IntC<0>{});
      }
    } else {
      steps(IntC<0>{});
    }
    auto& red = S.red(team);
    if (q < mc) red[buf][w][q][g] = acc;  // rows 0-3 gate, 4-7 up
    team_sync<kTeams>(team);
    if (t < 4 * kMmaPairs) {
      const int m = t / 4, i = t % 4;
      if (m < mc) {
        float gs = 0.0f, us = 0.0f;
        for (int ww = 0; ww < kWarps; ++ww) {
          gs += red[buf][ww][m][i];
          us += red[buf][ww][m][4 + i];
        }
        const int p = R.plist[beg + m0 + m];
        const float sc = __builtin_bit_cast(float, gateup_xmax(xs, a)[token(p)]);  // 2^e_t
        a.h[(size_t)p * a.I + 4 * tile + i] = silu(gs * sc) * (us * sc);
      }
    }
    buf ^= 1;  // the next pass writes the other buffer; the one after waits behind this barrier
  };
  if constexpr (kFirstApart) {
    // The first pass (every job has one) outside the loop, so that the wait for this job's loads is
    // not taken at the loop's head, where the compiler waits for all loads in flight, the next
    // job's included (sm_90a SASS).
    pass(0);
    for (int m0 = kMmaPairs; m0 < M; m0 += kMmaPairs) pass(m0);
  } else {
    for (int m0 = 0; m0 < M; m0 += kMmaPairs) pass(m0);
  }
}
#endif

// kTeams = 2: one block of two teams per SM instead of two blocks. The teams take jobs as two blocks
// would (team k of block b is virtual block 2b + k), each with its own reduction buffers and named
// barrier, but they share one routing and one copy of x: with x in shared memory once per SM
// instead of twice, more of the SM's 256 KB stays L1, which holds the weight loads in flight (at TP4
// 10 tokens two one-team blocks leave 28 KB of L1: 125.8 us, two teams 109.8; examples/results "h200-ab3").
template <int Fmt, int Layout, int kJ, int kTeams>
__global__ void SMALLM_TEAMS_BOUNDS(kTeams) smallm_gateup_mma_kernel(MoeArgs a) {
#if defined(SMALLM_MMA_F16)  // instantiated for CUDA only (the package builds sm_90a)
  using F = Format<Fmt>;
  constexpr bool kFp4 = Fmt == kMxfp4;
  constexpr int kBlockThreads = kThreads * kTeams;
  using Loads = GateUpMmaLoads<kJ>;
  extern __shared__ __attribute__((aligned(16))) uint16_t xs[];  // [T][D] f16, x * 2^-e_t
  __shared__ GateUpMmaShared<kTeams> S;
  SMALLM_TL_ENTRY(0);
  grid_dependents_launch();
  // Launched as a programmatic dependent of the stream's previous kernel (launch_gateup_mma): x and
  // the routing may be that kernel's output, and h the previous call's down may still be reading.
  grid_dependency_wait();
  int* xmax = gateup_xmax(xs, a);
  for (int tok = thread_id(); tok < a.T; tok += kBlockThreads) xmax[tok] = 0;
  auto copy_x = [&] { stage_x_issue<kBlockThreads>(a, xs, &S.xbar); };
  build_routing<kBlockThreads>(a, S.R, copy_x);  // ends with a barrier
  const int team = kTeams == 1 ? 0 : thread_id() / kThreads;
  // w: the warp within its team (the measured form: reordering these declarations changes the SASS)
  const int lane = lane_id(), w = (kTeams == 1 ? thread_id() : thread_id() % kThreads) / kWarp, g = lane >> 2, q = lane & 3;
  const auto& R = S.R;
  SMALLM_TL_MARK(0, kTlRouting);
  const int tiles = a.I / 4, njobs = R.nd * tiles, G = a.nblocks * kTeams, vb = block_id() * kTeams + team;
  const int rowb = a.D / F::kRowBytesDiv, nsteps = a.D / mma_step_values<Fmt>();
  const PairToken ptok{a.pair_magic};
  auto issue = [&](int job, Loads& L) {
    // The job's expert: MXFP4 by JobExpert's multiply, 3-4 % faster at 4-20 tokens than the division
    // (examples/results "h200-ab17" run 2); FP8 divides: with JobExpert its one-team kernel was 8 %
    // slower at TP4 1 token (16.7 -> 18.1 us) and the rest level within 1.5 %.
    const int u = kFp4 ? JobExpert{a.tile_magic}(job) : job / tiles, tile = job - u * tiles;
    const int row = (g < 4 ? 0 : a.Iw) + 4 * tile + (g & 3);               // A rows g, g + 8
    const int e = R.id[R.ulead[u]];
    const uint8_t* wb = a.w13 + (size_t)e * 2 * a.Iw * rowb;
    if constexpr (Layout == kRowMajor) {
      // One base per job and constant offsets per step (step st = w + 8j: vector 4st + q of the row;
      // FP8 block scale st / 2 = w / 2 + 4j; MXFP4 e8m0 of vector 4st + q). These restate the
      // row-major cases of vec_offset and Format::scale / scale_byte in 32-bit, non-negative terms:
      // through those helpers the kernels' SASS differs (FP8: 24 more instructions, a signed division).
      const uint8_t* wp = wb + (size_t)row * rowb + (4 * w + q) * 16;
      const float* sp = static_cast<const float*>(a.s13) + ((size_t)e * (2 * a.Iw / 128) + row / 128) * (a.D / 128) + w / 2;
      const uint8_t* bp = static_cast<const uint8_t*>(a.s13) + ((size_t)e * 2 * a.Iw + row) * (a.D / 32) + 4 * w + q;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        if (w + kWarps * j < nsteps) {
          L.v[j] = load_weights(wp + 64 * kWarps * j);
          if constexpr (kFp4)
            L.b[j] = bp[4 * kWarps * j];
          else
            L.s[j] = sp[4 * j];
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const int st = w + kWarps * j;
        if (st < nsteps) {
          L.v[j] = load_weights(wb + vec_offset<Layout>(row, 4 * st + q, rowb));
          if constexpr (kFp4)
            L.b[j] = F::template scale_byte<Layout>(a.s13, e, 2 * a.Iw, a.D, row, 4 * st + q);
          else
            L.s[j] = F::template scale<Layout>(a.s13, e, 2 * a.Iw, a.D, row, 4 * st);
        }
      }
    }
  };
  int buf = 0;
  // FP8 in one-team blocks stages x before the first job's loads are issued, so that the staging is
  // not queued behind them (x staged 4.6 -> 1.7 us at TP4 1 token) and the second job's loads follow
  // the first at once: FP8 at 1-9 tokens 1-3 % faster, TP4 and TP8 (examples/results "h200-ab9" runs
  // 1-2; issuing 1, 2 or 4 of the job's 8 steps before the staging was slower than none, run 4).
  // MXFP4 was slower that way (TP4 1 token 17.2 -> 18.0 us, TP8 11.8 -> 12.7), and two-team blocks
  // (16-20 tokens) 0-1 %: they stage x after the first job's loads are issued.
  constexpr bool kStageXFirst = !kFp4 && kTeams == 1;
  // MXFP4 in row-major blocks with kJ = 4 (Qwen3.5 on the H200) waits for this job's loads before the
  // next job's are issued (run_jobs' settle) and takes the job's first pass apart. One team (1-9
  // tokens): TP4 1-8 tokens 7-9 % faster, TP8 3-8 tokens 6-8 % (examples/results "h200-ab12" runs
  // 1-2). Two teams (10-20 tokens), once the settle was part of the next index on every path: 7-11 %
  // (run 5; before that the compiler sank the wait into the issuing branch and waited again after
  // it, and the change was 2-4 % slower, run 1). FP8 row-major in two-team blocks with kJ = 8 (the
  // launcher's choice from 2 tokens at D = 4096) the same way: 10-16 tokens 10-13 % faster ("h200-ab13"
  // run 1). The FP8 one-team loop with kJ = 8 waited in this order without it (until "h200-s50", below). With kJ = 4 (FP8 at
  // D <= 2048) it did not: the next job's loads were issued before this job's first e4m3 conversion, which
  // waited on the scoreboard they share (nvdisasm of the sm_90a build, examples/results "h200-s43"). With
  // kSettle, E = 513 top-10 at D = 2048 ("h200-s44" run 1, two rounds): I = 256 4-15 % faster (1 token
  // 12.0 -> 11.5 us, 8: 51.8 -> 45.8, 20: 102.2 -> 87.4), I = 128 level at 1 token, 4-13 % faster from 2
  // (20: 58.2 -> 50.5). MXFP4 in two-team blocks with kJ = 8 (D > 4096, from 7 tokens at MiniMax-M3's
  // D = 6144) likewise: 8-24 tokens 7-8 % faster (8: 67.5 -> 62.7 us, 24: 187.1 -> 175.1), 4 tokens (one
  // team) level, two rounds each ("h200-s46" run 3). The shuffled kernels (not measured since) and MXFP4's
  // one-team kJ = 8 loop still wait for the next job's loads: settled, that loop was 4 % slower at 1 token
  // and 2-2.5 % faster at 4-6 (MiniMax-M3-like, "h200-s47" run 1), so it keeps the plain loop.
  // FP8's one-team kJ = 8 loop (1 token at D = 4096) waited in the settled order without it until the kernels took
  // the weights' stored intermediate as a stride (MoeArgs::Iw, "h200-s50"): with that, the compiler issued the next
  // job's loads before this job's first conversion (sm_90a SASS, tests/test_kernel_compile.py), so it is settled too.
  constexpr bool kSettle = Layout == kRowMajor && (kJ == 4 || (kJ == 8 && (kTeams == 2 || !kFp4)));
  auto stage_x = [&] {  // block-wide barriers (both teams)
    stage_x_finish<kFp4, kBlockThreads>(a, xs, xmax, &S.xbar);
    SMALLM_TL_MARK(0, kTlReady);
  };
  auto jobs = [&](auto full) {  // full = 1: every warp has all kJ steps (gateup_mma_job's kFull)
    auto compute = [&](int job, Loads& L) {
      gateup_mma_job<Fmt, kJ, decltype(full)::value != 0, kTeams, kSettle>(a, S, xs, buf, job, tiles, nsteps, ptok, L);
      SMALLM_TL_MARK(0, kTlJob0 + imin((job - vb) / G, 5));
    };
    // kSettle: this job's loads are waited for before the next job's are issued. All of them count on
    // one scoreboard, and the compiler waits for it to drain: issued first, the next job's loads were
    // waited for before this job's compute began (sm_90a SASS), so no load overlapped a compute. The
    // next job's index depends, through a zero the compiler cannot see (T < 2^31), on words of the
    // first and last of this job's loads, so its loads wait for them; an empty asm barrier on the
    // registers reads nothing in SASS and moved no wait.
    // Elsewhere the settle is the constant 0.
    [[maybe_unused]] const uint32_t zero = (uint32_t)a.T >> 31;
    auto settle = [&](Loads& L) -> int {
      if constexpr (kSettle) {
        uint32_t z;
        asm volatile("{\n.reg .b32 t;\nor.b32 t, %1, %2;\nor.b32 t, t, %3;\nand.b32 %0, t, %4;\n}"
                     : "=r"(z)
                     : "r"(L.v[0].w[0]), "r"(L.v[kJ - 1].w[3]),
                       "r"(kFp4 ? L.b[kJ - 1] : __float_as_uint(L.s[kJ - 1])), "r"(zero));
        return (int)z;
      } else {
        (void)L;
        return 0;
      }
    };
    run_jobs<Loads, kStageXFirst>(vb, njobs, G, issue, stage_x, compute, settle);
  };
  if (kFp4 && nsteps == kWarps * kJ)
    jobs(IntC<1>{});
  else
    jobs(IntC<0>{});
  SMALLM_TL_EXIT(0);
#else
  (void)a;
#endif
}

// ------------------------------------------------------------------ down kernel
// The end of both down kernels: out[token, rows of the block's row-blocks] = out_scale * the sum
// over the token's slots, in slot order, of tw * y (y: [nloc][T*K][rb] in shared memory; tw: the
// routing weights, a.topk_w or a copy of them in shared memory).
template <int kBlockThreads = kThreads, class R_t>
SMALLM_DEV void slot_sums(const MoeArgs& a, const R_t& R, const float* ys, const float* tw, int nloc, int rb) {
  const int N = a.T * a.K, G = a.nblocks, b = block_id();
  for (int idx = thread_id(); idx < nloc * a.T * rb; idx += kBlockThreads) {
    const int i = idx / (a.T * rb), rest = idx - i * a.T * rb, tok = rest / rb, r = rest - tok * rb;
    float sum = 0.0f;
    for (int k = 0; k < a.K; ++k) {
      const int pq = tok * a.K + k;
      if (R.id[pq] >= 0) sum = ffma(tw[pq], ys[(i * N + pq) * rb + r], sum);
    }
    a.out[(size_t)tok * a.D + (b + G * i) * rb + r] = f32_to_bf16(a.out_scale * sum);
  }
}

// Row-block i (rb output rows) x distinct expert u is one warp job: the lane holds row i*rb + lane%rb
// at vectors lane/rb + (kWarp/rb) c. As many blocks as are resident; block b owns row-blocks
// b, b + G, ... (nloc of them); its warps take the (row-block, expert) jobs in turn, kRingB jobs'
// weights in flight per warp, write y[pair, rows] to shared memory, and the block finally sums
// each token's slots in slot order into out.
struct DownLoads {
  Vec16 v[kVecB];
  float s[kVecB];
};

template <int Fmt, int Layout>
__global__ void SMALLM_TP_BOUNDS(2) smallm_down_kernel(MoeArgs a) {
  using F = Format<Fmt>;
  extern __shared__ __attribute__((aligned(16))) float dsm[];  // ys [nloc][T*K][rb], then staged h [T*K][I]
  __shared__ Routing R;
  const int t = thread_id(), lane = lane_id(), w = t / kWarp;
  const int N = a.T * a.K, G = a.nblocks, b = block_id();
  const int rb = down_rows<Fmt>(a.I), nrb = a.D / rb;
  const int nloc = down_owned_blocks(nrb, G, b);
  const int nlmax = down_local_blocks(nrb, G);
  float* ys = dsm;
  const bool staged = down_stages_h(N, a.I);
  float* hs = dsm + down_ys_floats(N, rb, nlmax);
  const int rowb2 = a.Iw / F::kRowBytesDiv, nv2 = a.I / F::kRowBytesDiv / 16;  // W2's stored row, its read part
  const int lr = lane % rb, cls = lane / rb, lpr = kWarp / rb;  // lane's row, K class, lanes per row
  build_routing(a, R);
  const int nd = R.nd, njobs = nloc * nd;
  auto issue = [&](int jj, DownLoads& L) {
    if (jj >= njobs) return;
    const int i = jj / nd, u = jj - i * nd;
    const int row = (b + G * i) * rb + lr, e = R.id[R.ulead[u]];
    const uint8_t* wb = a.w2 + (size_t)e * a.D * rowb2;
#pragma unroll
    for (int c = 0; c < kVecB; ++c) {
      const int kvi = cls + lpr * c;
      if (kvi < nv2) L.v[c] = load_weights(wb + vec_offset<Layout>(row, kvi, rowb2));
    }
#pragma unroll
    for (int c = 0; c < kVecB; ++c) {
      const int kvi = cls + lpr * c;
      if (kvi < nv2) L.s[c] = F::template scale<Layout>(a.s2, e, a.D, a.Iw, row, kvi);
    }
  };
  // This warp's jobs are w, w + kWarps, ...; the first kRingB are loaded before waiting for h.
  DownLoads ring[kRingB];
#pragma unroll
  for (int k = 0; k < kRingB; ++k) issue(w + kWarps * k, ring[k]);
  grid_dependency_wait();  // h comes from the gate/up kernel (and out may alias what it reads)
  if (staged) {
    for (int i = 4 * t; i < N * a.I; i += 4 * kThreads) *reinterpret_cast<float4*>(hs + i) = load_coherent4(a.h + i);
  }
  block_sync();
  auto jobs = [&](auto S) {  // h from shared memory (S = 1) or global memory (S = 0)
    constexpr bool kStaged = decltype(S)::value != 0;
    for (int jj = w; jj < njobs; jj += kWarps) {
      DownLoads& L = ring[0];
      const int i = jj / nd, u = jj - i * nd;
      const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
      for (int m = 0; m < M; ++m) {
        const int pq = R.plist[beg + m];
        const float* hq = (kStaged ? hs : a.h) + (size_t)pq * a.I;
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < kVecB; ++c) {
          const int kvi = cls + lpr * c;
          if (kvi < nv2) {
            opaque(L.v[c]);
            const float* hv = hq + kvi * F::kElems;
            float hr[F::kElems];
#pragma unroll
            for (int q = 0; q < F::kElems / 4; ++q) {
              float4 f;
              if constexpr (kStaged)
                f = *reinterpret_cast<const float4*>(hv + 4 * q);
              else
                f = load_coherent4(hv + 4 * q);
              hr[4 * q] = f.x;
              hr[4 * q + 1] = f.y;
              hr[4 * q + 2] = f.z;
              hr[4 * q + 3] = f.w;
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
        if (cls == 0) ys[(i * N + pq) * rb + lr] = acc;
      }
#pragma unroll
      for (int k = 0; k + 1 < kRingB; ++k) ring[k] = ring[k + 1];
      issue(jj + kWarps * kRingB, ring[kRingB - 1]);
    }
  };
  if (staged)
    jobs(IntC<1>{});
  else
    jobs(IntC<0>{});
  block_sync();
  slot_sums(a, R, ys, a.topk_w, nloc, rb);
}

// ------------------------------------------------------------------ down on tensor cores (sm_89+)
// Same row-block ownership and slot sums as smallm_down_kernel; a warp job is 16 output rows of one
// distinct expert over all of I, computed as C[row, pair] = sum_k W2[row, k] h[pair, k] with
// mma.sync m16n8k16 (f16 in, fp32 accumulate), 4 pairs per pass:
//   A = W2 as f16. Lane l = (g = l/4, q = l%4) holds vector 4c+q of every chunk c (64 values of I for
//       FP8, 128 for MXFP4) of rows g and g+8. FP8: e4m3 -> f16 exact, MMA i of a chunk takes bytes
//       4i..4i+3 as the k slots 2q, 2q+1, 2q+8, 2q+9. MXFP4: MMAs 2i, 2i+1 take word i in
//       e2m1x8_to_f16x2 order, the values scaled in f16 relative to their quad's largest e8m0 (the
//       gate/up kernel's comment; R per row and chunk), 2^(R - 128) applied to the chunk's sums.
//   B = h in the same k order, staged once per block in shared memory as two f16 halves,
//       hi = f16(h s_p) and lo = f16(h s_p - hi), s_p = 2^-e_p putting the pair's max |h| in
//       [2^14, 2^15): hi + lo carries 22 significant bits, every value above 2^-38 of the pair's
//       largest. kLo8 (where the f16 halves do not fit the block's shared memory, Qwen3.5 TP4 from
//       17 tokens, or for FP8 would pass the 196 KB carveout, from 14: the launcher's
//       down_mma_lo_bytes): lo = e5m2(h s_p - hi), one byte widened to f16 exactly when read, hi + lo within
//       2^-14 of h s_p (3 bytes a value; as the default it was 1-6 % slower at 1-12 tokens and its
//       bf16 outputs' error against the reference 2-4x larger: examples/results "h200-ab5" run 2).
//       Column 2m is pair m's hi, column 2m + 1 its lo, so one MMA takes both halves and
//       C[row, 2m] + C[row, 2m + 1] (fp32) is the row's sum for pair m (a separate MMA per half
//       took twice the MMAs: examples/results "h200-ab2"). 2^e_p and the weight scales (FP8: the
//       128x128 block scales) are applied to C.
// Each warp keeps kDepth jobs' W2 in a ring of register sets (three where a job holds two chunks,
// down_mma_ring_chunks; else two), all loaded before the wait for the gate/up kernel.
constexpr int kDownMmaRows = 16;           // output rows per row-block (one MMA tile)
constexpr int kDownMmaChunks = 4;          // chunks of I per job: I <= 256 (FP8), 512 (MXFP4)
// FP8 over kDownMmaChunks chunks (I = 384, 512: Qwen3-235B-like at TP4) splits each job along I into
// parts of up to four chunks (two 128-wide scale blocks; I = 384: four and two), taken in turn by the
// warp that holds the job, the parts' sums added to its y in order (kSplit); its h stage holds up to
// kDownSplitChunks chunks. (Parts of two chunks, three jobs' W2 in flight, were 1.4-4 % slower at 1-12
// tokens: at 1 token up to six parts one after another per warp; examples/results "h200-s41" run 4. The
// four-chunk split kernels take 128 registers and spill 0-28 bytes, as the unsplit four-chunk ones do.)
constexpr int kDownSplitChunks = 8;
// The down's dynamic shared memory (y, 2^e_p, routing weights, staged h) may take what an sm_90 block
// can have beside its static MmaRouting. The launcher checks it at the smallest grid it may pick (one
// block per SM, down_mma_smem_at); from about 90 KB one block fits an SM. Qwen3.5 TP4 at 20 tokens
// (the gate/up's x stage limit) takes 194.2 KB with h's lo half as e5m2: h 165.0 KB, y 27.5 KB. (A
// fixed 160 KB for h alone, 4 bytes a value, held TP4 to 14 tokens.)
constexpr int kDownMmaSmemBytes = 207 * 1024;
constexpr int kMaxYsMmaBytes = 32 * 1024;   // y of a block's row-blocks: the launcher adds blocks until it fits

// f16 values per staged h row (with the lo half as f16, a pair's hi and lo halves are a row each,
// placed by the down's stage_row; with it as e5m2, a pair's hi half is a row and its lo bytes follow
// all hi rows). With the lo half as f16 the rows are padded by 8 values, against bank conflicts. With
// it as e5m2 (kLo8) they are not: the pad took 8 x 3 B a pair, at Qwen3.5 TP4 19 tokens 5016 B, which
// put the down's block 4.9 KB past the 196 KB carveout. Unpadded, two pairs of one expert read by one
// MMA may conflict; at up to 20 tokens most experts have one pair. Qwen3.5 FP8 TP4 19 tokens
// 175.1 -> 166.8 us, MXFP4 157.9 -> 155.8, 15-18 and 20 tokens level (examples/results "h200-ab15" run
// 3). (Swizzling odd pairs' values instead, c ^ 8, took one more base register: alike at 19 tokens, 2 %
// slower at 18, run 2.)
__host__ __device__ inline int down_mma_hstride(int I, bool lo8) { return lo8 ? I : I + 8; }
// MXFP4 with the lo half as f16: the first lo row (the lo half of the pair at place i in row
// down_mma_lo_row0(N) + i), the least >= N that is 4 mod 8, which puts a pair's lo row 64 bytes from its
// hi row in bank offset (a row being 16 bytes more than a multiple of 128): up to 7 rows more.
__host__ __device__ inline int down_mma_lo_row0(int N) { return N + ((4 - N) & 7); }
// f16 rows of a staged h (kLo8: hi rows only; the lo bytes follow them)
template <int Fmt>
__host__ __device__ inline int down_mma_stage_rows(int N, bool lo8) {
  return lo8 ? N : Fmt == kMxfp4 ? down_mma_lo_row0(N) + N : 2 * N;
}
// Chunks of I (MMA steps of mma_step_values) a tensor-core down job covers.
template <int Fmt>
__host__ __device__ inline int down_mma_chunks(int I) {
  return (I + mma_step_values<Fmt>() - 1) / mma_step_values<Fmt>();
}
// FP8 whose I passes kDownMmaChunks chunks: jobs split along I (kSplit)
template <int Fmt>
__host__ __device__ inline bool down_mma_split(int I) {
  return Fmt == kFp8Block128 && down_mma_chunks<Fmt>(I) > kDownMmaChunks;
}
// I within the MMA chunks this kernel covers (FP8: up to kDownSplitChunks, split; the shared-memory check
// is the launcher's)
template <int Fmt>
__host__ __device__ inline bool down_mma_takes(int I) {
  return I % 128 == 0 && down_mma_chunks<Fmt>(I) <= (Fmt == kFp8Block128 ? kDownSplitChunks : kDownMmaChunks);
}
// Chunks of I a job's loads hold (the kernel's kCh): 2 where I takes at most two (each warp then keeps
// three jobs' W2 in flight, its registers no more than two jobs of four chunks: Qwen3.5 MXFP4 TP4 16
// tokens 153.3 -> 147.2 us, 20: 201.0 -> 187.3; FP8 TP8 16: 84.0 -> 81.9; examples/results "h200-ab6"
// runs 3-4), else kDownMmaChunks (two jobs; split jobs, down_mma_split, too: a part of four chunks).
template <int Fmt>
__host__ __device__ inline int down_mma_ring_chunks(int I) {
  return down_mma_chunks<Fmt>(I) <= 2 ? 2 : kDownMmaChunks;
}
__host__ __device__ inline int down_mma_exp_floats(int N) { return (N + 3) / 4 * 4; }  // 2^e_p per pair, 16-byte padded
// lo_bytes: 2 (lo as f16) or 1 (kLo8: lo as e5m2)
template <int Fmt>
__host__ __device__ inline int down_mma_smem_bytes(int N, int I, int nloc, int lo_bytes) {
  const bool lo8 = lo_bytes == 1;
  return down_ys_floats(N, kDownMmaRows, nloc) * 4 + 2 * down_mma_exp_floats(N) * 4 +
         down_mma_stage_rows<Fmt>(N, lo8) * down_mma_hstride(I, lo8) * 2 + (lo8 ? N * I : 0);
}

#if defined(SMALLM_MMA_F16)
// kLo8's B of one lane: eight staged values of h from element `at`, hi (f16) or lo (e5m2, in the hi
// vector's order, widened to f16). Both take the same instructions: two 8-byte loads (lo: its 8 bytes twice)
// and selects, no branch.
SMALLM_DEV Vec16 stage_b(const uint16_t* hhi, const uint8_t* hlo, int at, bool lo) {
  const uint2* p = lo ? reinterpret_cast<const uint2*>(hlo + at) : reinterpret_cast<const uint2*>(hhi + at);
  const uint2 u = p[0], u1 = p[lo ? 0 : 1];
  uint32_t l[4];
  e5m2x4_to_f16x2(u.x, l[0], l[1]);
  e5m2x4_to_f16x2(u.y, l[2], l[3]);
  Vec16 v;
  v.w[0] = lo ? l[0] : u.x;
  v.w[1] = lo ? l[1] : u.y;
  v.w[2] = lo ? l[2] : u1.x;
  v.w[3] = lo ? l[3] : u1.y;
  return v;
}
#endif
static_assert(kDownMmaSmemBytes + (int)sizeof(MmaRouting) <= 227 * 1024,
              "the tensor-core down's shared memory must fit one sm_90 block");

template <int kCh>
struct DownMmaLoads {
  Vec16 v[2][kCh];                // rows g, g+8 x chunks
  float s[kCh / 2];               // FP8: block scale per 128-wide k block
  // MXFP4, rows g, g+8: two chunks (kBlockMma), the e8m0 bytes of chunk c's vectors 4c..4c+3 (byte v:
  // vector 4c+v); four chunks, the bytes of the lane's own vectors (byte c: vector 4c+q)
  uint32_t b[2][kCh == 2 ? 2 : 1];
};

// kTeams = 2: 512 threads (16 warps) per block, from down_teams_min_pairs (hip/smallm_moe.hip): both teams
// share the routing, the h stage and y, and take the jobs in turn, so twice the W2 is in flight per
// block (from about 8 tokens at TP4 the h stage holds the SM to one block).
// kSplit (FP8, I over kDownMmaChunks chunks): a job (row-block, expert) is taken in parts of kCh = 4
// chunks along I (the last may hold fewer), all by one warp, in order: job index jj holds part (jj / B) % P of job
// (jj / (B P)) B + jj % B (B: the block's warps, P: the parts), so a warp's ring holds a job's parts
// one after another and each part adds its sums to the y that the part before wrote (same lane, same
// element: no sync, the same order every run).
template <int Fmt, int Layout, int kTeams, bool kLo8, int kCh, bool kSplit>
__global__ void SMALLM_TEAMS_BOUNDS(kTeams) smallm_down_mma_kernel(MoeArgs a) {
#if defined(SMALLM_MMA_F16)  // instantiated for CUDA only (the package builds sm_90a)
  using F = Format<Fmt>;
  constexpr bool kFp4 = Fmt == kMxfp4;
  constexpr int kBlockThreads = kThreads * kTeams, kBlockWarps = kWarps * kTeams;
  constexpr int kCv = mma_step_values<Fmt>();  // values of I per chunk
  constexpr int rb = kDownMmaRows;
  static_assert(kCh == 2 || kCh == kDownMmaChunks, "chunks a job's loads hold: 2 or kDownMmaChunks");
  static_assert(!kSplit || (!kFp4 && kCh == kDownMmaChunks), "jobs split along I: FP8, parts of four chunks");
  constexpr int kDepth = kCh == 2 ? 3 : 2;  // jobs' W2 in flight per warp (down_mma_ring_chunks)
  // MXFP4 with two chunks: every MMA takes one e8m0 block, its sums scaled in fp32 (four chunks'
  // scales, 32 bytes per row and job, would not fit the registers beside the ring)
  constexpr bool kBlockMma = kFp4 && kCh == 2;
  using Loads = DownMmaLoads<kCh>;
  extern __shared__ __attribute__((aligned(16))) float dsm[];  // ys [nloc][T*K][16], 2^e_p [T*K], topk_w [T*K], h hi, h lo
  __shared__ MmaRouting R;  // T * K <= kMmaMaxPairs (the launcher)
  SMALLM_TL_ENTRY(1);
  // The routing weights for the slot sums, requested at entry and stored beside h (read from
  // global memory in the slot sums, their latency was the call's last). They come from the router,
  // which finished before the gate/up kernel began, so they may be read before the wait.
  const float tw0 = thread_id() < a.T * a.K ? a.topk_w[thread_id()] : 0.0f;
  build_routing<kBlockThreads>(a, R);
  SMALLM_TL_MARK(1, kTlRouting);
  const int t = thread_id(), lane = lane_id(), w = t / kWarp, g = lane >> 2, q = lane & 3;
  const int N = a.T * a.K, G = a.nblocks, b = block_id();
  const int nrb = a.D / rb;
  const int nloc = down_owned_blocks(nrb, G, b);
  float* ys = dsm;
  float* hexp = ys + down_ys_floats(N, rb, down_local_blocks(nrb, G));
  const int hst = down_mma_hstride(a.I, kLo8), nch = a.I / kCv, rowb2 = a.Iw / F::kRowBytesDiv;
  float* tws = hexp + down_mma_exp_floats(N);
  uint16_t* hhi = reinterpret_cast<uint16_t*>(tws + down_mma_exp_floats(N));
  uint8_t* hlo8 = reinterpret_cast<uint8_t*>(hhi + N * hst);  // kLo8: lo as e5m2 (f16 lo: rows of hhi, stage_row)
  const int nd = R.nd, nwhole = nloc * nd;
  // kSplit: jobs are parts (part_of); njobs covers whole rounds of the block's warps, each job checked
  // against nwhole (job_ok)
  const int nparts = kSplit ? (nch + kCh - 1) / kCh : 1;  // the last part's chunks past nch: not loaded, not computed
  const int njobs = kSplit ? (nwhole + kBlockWarps - 1) / kBlockWarps * kBlockWarps * nparts : nwhole;
  struct Part {
    int whole, c0;  // the job (row-block, expert) and its first chunk of I
  };
  auto part_of = [&](int jj) -> Part {
    if constexpr (kSplit) {
      const int r = jj / kBlockWarps, p = r % nparts;
      return {(r / nparts) * kBlockWarps + jj % kBlockWarps, p * kCh};
    } else {
      return {jj, 0};
    }
  };
  auto job_ok = [&](int jj) { return jj < njobs && (!kSplit || part_of(jj).whole < nwhole); };
  auto issue = [&](int jj, Loads& L) {
    const Part P = part_of(jj);
    const int i = P.whole / nd, u = P.whole - i * nd, c0 = P.c0;
    const int row0 = (b + G * i) * rb, e = R.id[R.ulead[u]];
    const uint8_t* wb = a.w2 + (size_t)e * a.D * rowb2;
    if constexpr (kBlockMma) {
      // word q of each of chunk c's vectors 4c..4c+3 (one e8m0 block each), and their four scales
#pragma unroll
      for (int c = 0; c < kCh; ++c) {
        if (c < nch) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const uint8_t* wp = wb + vec_offset<Layout>(row0 + g + 8 * r, 4 * c, rowb2) + 4 * q;
#pragma unroll
            for (int v = 0; v < 4; ++v) L.v[r][c].w[v] = load_weight_word(wp + (Layout == kRowMajor ? 16 : 256) * v);
            L.b[r][c] = F::template scale_word<Layout>(a.s2, e, a.D, a.Iw, row0 + g + 8 * r, 4 * c);
          }
        }
      }
    } else {
#pragma unroll
      for (int c = 0; c < kCh; ++c) {
        if (c0 + c < nch) {
          L.v[0][c] = load_weights(wb + vec_offset<Layout>(row0 + g, 4 * (c0 + c) + q, rowb2));
          L.v[1][c] = load_weights(wb + vec_offset<Layout>(row0 + g + 8, 4 * (c0 + c) + q, rowb2));
        }
      }
      if constexpr (kFp4) {
        L.b[0][0] = L.b[1][0] = 0;
#pragma unroll
        for (int c = 0; c < kCh; ++c) {
          if (c < nch) {
            L.b[0][0] |= F::template scale_byte<Layout>(a.s2, e, a.D, a.Iw, row0 + g, 4 * c + q) << (8 * c);
            L.b[1][0] |= F::template scale_byte<Layout>(a.s2, e, a.D, a.Iw, row0 + g + 8, 4 * c + q) << (8 * c);
          }
        }
      } else {
#pragma unroll
        for (int kb = 0; kb < kCh / 2; ++kb)
          if (c0 + 2 * kb < nch) L.s[kb] = F::template scale<Layout>(a.s2, e, a.D, a.Iw, row0, 4 * c0 + 8 * kb);
      }
    }
  };
  Loads ring[kDepth];
  auto prologue = [&](auto K) {
    constexpr int k = decltype(K)::value;
    if (job_ok(w + k * kBlockWarps)) issue(w + k * kBlockWarps, ring[k]);
  };
  StaticFor<0, kDepth>::run(prologue);
  SMALLM_TL_MARK(1, kTlDownIssued);
  grid_dependency_wait();  // h comes from the gate/up kernel (and out may alias what it reads)
  SMALLM_TL_MARK(1, kTlHReady);
  // h -> hi/lo f16 halves, pair p = plist[i] scaled by 2^-e_p (warp w takes places i = w, w + kBlockWarps,
  // ...; pairs without a valid expert are not in plist, have no h and are never read), staged at its
  // place i (stage_row), so that an MMA's B columns, an expert's consecutive pairs in plist, read rows
  // whose hi and lo halves fall in different 16-byte bank groups of a quarter-warp's 16-byte loads (one
  // wavefront per quarter, examples/sass/stage_banks.py): FP8 (pieces 32 bytes apart) in rows 2i and
  // 2i + 1, 16 bytes apart in bank offset; MXFP4 (pieces 16 bytes apart, 64 a row's) in rows i and
  // down_mma_lo_row0(N) + i, 64 bytes apart. (Rows p and N + p took two wavefronts at every even N for
  // FP8, and unless N % 8 == 4 for MXFP4.) kLo8: row i of hhi and of hlo8 (lo loaded 8 bytes at a time).
  // FP8: the lane takes values 128j + 4 lane + [0, 4); MXFP4: 256j + 8 lane + [0, 8), stored in
  // mxfp4_mma_order.
  const int lrow0 = down_mma_lo_row0(N);
  auto stage_row = [&](int i, bool lo) { return kLo8 ? i : kFp4 ? (lo ? lrow0 + i : i) : 2 * i + lo; };
  constexpr int kLv = kFp4 ? 8 : 4, kPass = kWarp * kLv;  // values per lane and pass; values per pass
  constexpr int kPasses = (kSplit ? kDownSplitChunks : kDownMmaChunks) * kCv / kPass;
  // A warp loads kHGroup pairs' h before converting any (one round trip per group, not per pair:
  // per pair they were 5.5 us at T = 8, examples/results "h200-timeline"), as many as the registers
  // beside the two jobs' W2 hold without spilling (kSplit: twice the passes, half the pairs).
  constexpr int kHGroup = kFp4 || kSplit ? 2 : 4;
  const int nvalid = R.ucnt[nd];  // pairs with a valid expert: plist's length
  for (int i0 = w; i0 < nvalid; i0 += kBlockWarps * kHGroup) {
    float v[kHGroup][kPasses][kLv];
#pragma unroll
    for (int gi = 0; gi < kHGroup; ++gi) {
      const int i = i0 + kBlockWarps * gi;
      if (i >= nvalid) continue;
      const float* hp = a.h + (size_t)R.plist[i] * a.I;
#pragma unroll
      for (int j = 0; j < kPasses; ++j) {
        if (kPass * j + kLv * lane < a.I) {
#pragma unroll
          for (int z = 0; z < kLv / 4; ++z) {
            const float4 f = load_coherent4(hp + kPass * j + kLv * lane + 4 * z);
            v[gi][j][4 * z] = f.x;
            v[gi][j][4 * z + 1] = f.y;
            v[gi][j][4 * z + 2] = f.z;
            v[gi][j][4 * z + 3] = f.w;
          }
        }
      }
    }
#pragma unroll
    for (int gi = 0; gi < kHGroup; ++gi) {
      const int i = i0 + kBlockWarps * gi;
      if (i >= nvalid) continue;
      const int p = R.plist[i];
      const int hrow = stage_row(i, false), lrow = stage_row(i, true);  // lrow: the f16 lo half's
      float mx = 0.0f;
#pragma unroll
      for (int j = 0; j < kPasses; ++j)
        if (kPass * j + kLv * lane < a.I)
#pragma unroll
          for (int k = 0; k < kLv; ++k) mx = fmaxf(mx, fabsf(v[gi][j][k]));
      for (int o = 1; o < kWarp; o <<= 1) mx = fmaxf(mx, shfl_xor(mx, o));
      const int e = f16_stage_exponent(mx);
      const float inv = exp2_int(-e);
      if (lane == 0) hexp[p] = exp2_int(e);
#pragma unroll
      for (int j = 0; j < kPasses; ++j) {
        if (kPass * j + kLv * lane < a.I) {
          uint16_t hi[kLv];
          float lo[kLv];
#pragma unroll
          for (int k = 0; k < kLv; ++k) {
            const float f = v[gi][j][k] * inv;
            hi[k] = f32_to_f16(f);
            lo[k] = f - f16_to_f32(hi[k]);  // exact
          }
          const int at = hrow * hst + kPass * j + kLv * lane;
          auto store_f16 = [&](uint16_t* dst, const uint16_t (&hv)[kLv]) {
            if constexpr (kFp4 && kLo8)  // (nvcc split the plain store in four here)
              store_shared16(dst + at, mxfp4_mma_order(hv));
            else if constexpr (kFp4)
              *reinterpret_cast<Vec16*>(dst + at) = mxfp4_mma_order(hv);
            else
              *reinterpret_cast<uint2*>(dst + at) = make_uint2(hv[0] | ((uint32_t)hv[1] << 16), hv[2] | ((uint32_t)hv[3] << 16));
          };
          store_f16(hhi, hi);
          if constexpr (kLo8) {
            if constexpr (kFp4)  // lo bytes in mxfp4_mma_order too: value j, then j + 4
              *reinterpret_cast<uint2*>(hlo8 + at) =
                  make_uint2(f32x2_to_e5m2x2(lo[0], lo[4]) | (f32x2_to_e5m2x2(lo[1], lo[5]) << 16),
                             f32x2_to_e5m2x2(lo[2], lo[6]) | (f32x2_to_e5m2x2(lo[3], lo[7]) << 16));
            else
              *reinterpret_cast<uint32_t*>(hlo8 + at) = f32x2_to_e5m2x2(lo[0], lo[1]) | (f32x2_to_e5m2x2(lo[2], lo[3]) << 16);
          } else {
            uint16_t lh[kLv];
#pragma unroll
            for (int k = 0; k < kLv; ++k) lh[k] = f32_to_f16(lo[k]);
            store_f16(hhi + (lrow - hrow) * hst, lh);
          }
        }
      }
    }
  }
  if (t < N) tws[t] = tw0;
  for (int p = t + kBlockThreads; p < N; p += kBlockThreads) tws[p] = a.topk_w[p];
  block_sync();
  SMALLM_TL_MARK(1, kTlHStaged);
#if defined(SMALLM_TIMELINE)
  // the timeline harness only: when thread 0's first W2 load has arrived (its job 0 "weights in")
  if (t == 0 && njobs > 0) {
    asm volatile("" ::"r"(ring[0].v[0][0].w[0]));
    SMALLM_TL_MARK(1, kTlJob0Data);
  }
#endif
  auto compute = [&](int jj, Loads& L) {
    const Part P = part_of(jj);
    const int i = P.whole / nd, u = P.whole - i * nd, c0 = P.c0;
    const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
    for (int m0 = 0; m0 < M; m0 += kMmaPairs) {
      const int mc = imin(kMmaPairs, M - m0);
      const bool live = (g >> 1) < mc;
      // B column g: pair g / 2 of the pass (place ig = beg + m0 + g / 2 in plist), its hi half (even g) or
      // lo half (odd g): its stage rows as staged above.
      // FP8: values 16q.. of each chunk's 64; MXFP4: values 8q..8q+7 of each block of 32
      const int ig = beg + m0 + (live ? g >> 1 : 0);
      const int at = stage_row(ig, g & 1) * hst + (kBlockMma ? 8 : F::kElems) * q;
      const bool lo = g & 1;
      auto b_vec = [&](int e) {  // B: 8 staged values of h from element at + e
        if constexpr (kLo8) return stage_b(hhi, hlo8, at + e, lo);
        else return *reinterpret_cast<const Vec16*>(hhi + at + e);
      };
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if constexpr (kFp4) {
#pragma unroll
        for (int ch = 0; ch < kCh; ++ch) {
          if (ch < nch) {
            opaque(L.v[0][ch]);
            opaque(L.v[1][ch]);
            if constexpr (!kBlockMma) {
              const int s0 = (L.b[0][0] >> (8 * ch)) & 0xff, s1 = (L.b[1][0] >> (8 * ch)) & 0xff;
              const int r0 = quad_max(s0), r1 = quad_max(s1);  // R of rows g, g+8
              const uint32_t f0 = f16x2_pow2(s0 - r0 + 15), f1 = f16x2_pow2(s1 - r1 + 15);
              float cs[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cs2[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // two chains
#pragma unroll
              for (int wi = 0; wi < 4; ++wi) {
                Vec16 bv{};
                if (live) bv = b_vec(kCv * ch + 8 * wi);
                uint32_t pa[4], pb[4];
                e2m1x8_to_f16x2(L.v[0][ch].w[wi], pa);
                e2m1x8_to_f16x2(L.v[1][ch].w[wi], pb);
                mma_f16_16x8x16(cs, hmul2(pa[0], f0), hmul2(pb[0], f1), hmul2(pa[1], f0), hmul2(pb[1], f1), bv.w[0], bv.w[1]);
                mma_f16_16x8x16(cs2, hmul2(pa[2], f0), hmul2(pb[2], f1), hmul2(pa[3], f0), hmul2(pb[3], f1), bv.w[2], bv.w[3]);
              }
              const float m0s = e8m0_half_to_f32(r0), m1s = e8m0_half_to_f32(r1);
              c[0] = ffma(m0s, cs[0] + cs2[0], c[0]);
              c[1] = ffma(m0s, cs[1] + cs2[1], c[1]);
              c[2] = ffma(m1s, cs[2] + cs2[2], c[2]);
              c[3] = ffma(m1s, cs[3] + cs2[3], c[3]);
            } else {
              // block v of the chunk (vector 4 ch + v) alone in two MMAs, its sums scaled in fp32
#pragma unroll
              for (int v = 0; v < 4; ++v) {
                Vec16 bv{};
                if (live) bv = b_vec(kCv * ch + 32 * v);
                uint32_t pa[4], pb[4];
                e2m1x8_to_f16x2(L.v[0][ch].w[v], pa);
                e2m1x8_to_f16x2(L.v[1][ch].w[v], pb);
                float cs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                mma_f16_16x8x16(cs, pa[0], pb[0], pa[1], pb[1], bv.w[0], bv.w[1]);
                mma_f16_16x8x16(cs, pa[2], pb[2], pa[3], pb[3], bv.w[2], bv.w[3]);
                const float s0 = e8m0_byte_to_f32_flush(L.b[0][ch], v);
                const float s1 = e8m0_byte_to_f32_flush(L.b[1][ch], v);
                c[0] = ffma(s0, cs[0], c[0]);
                c[1] = ffma(s0, cs[1], c[1]);
                c[2] = ffma(s1, cs[2], c[2]);
                c[3] = ffma(s1, cs[3], c[3]);
              }
            }
          }
        }
      } else {
#pragma unroll
        for (int kb = 0; kb < kCh / 2; ++kb) {
          if (c0 + 2 * kb < nch) {
            // the scale block's two chunks accumulate in two chains (4 MMAs deep each)
            float cs[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cs2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int cc = 0; cc < 2; ++cc) {
              const int ch = 2 * kb + cc;
              opaque(L.v[0][ch]);
              opaque(L.v[1][ch]);
              Vec16 bv[2] = {};
              if (live) {
#pragma unroll
                for (int z = 0; z < 2; ++z) bv[z] = b_vec(kCv * (c0 + ch) + 8 * z);
              }
#pragma unroll
              for (int mi = 0; mi < 4; ++mi) {
                const uint32_t wg = L.v[0][ch].w[mi], wg8 = L.v[1][ch].w[mi];
                const uint32_t a0 = e4m3x2_to_f16x2(wg), a2 = e4m3x2_hi_to_f16x2(wg);
                const uint32_t a1 = e4m3x2_to_f16x2(wg8), a3 = e4m3x2_hi_to_f16x2(wg8);
                const int z = mi / 2, wd = 2 * (mi % 2);  // h values 4mi..4mi+3: words 2mi, 2mi+1
                mma_f16_16x8x16(cc == 0 ? cs : cs2, a0, a1, a2, a3, bv[z].w[wd], bv[z].w[wd + 1]);
              }
            }
#pragma unroll
            for (int r = 0; r < 4; ++r) c[r] = ffma(L.s[kb], cs[r] + cs2[r], c[r]);
          }
        }
      }
      // c[0] + c[1]: row g, pair m0 + q (hi + lo); c[2] + c[3]: row g + 8, the same pair.
      if (q < mc) {
        const int pq = R.plist[beg + m0 + q];
        const float sc = hexp[pq] * (kBlockMma ? 16384.0f : 1.0f);  // kBlockMma: the decoded weights' 2^14
        float* yp = ys + (i * N + pq) * rb + g;
        if (kSplit && c0 > 0) {  // a later part: onto the sums this lane stored for the parts before
          yp[0] += (c[0] + c[1]) * sc;
          yp[8] += (c[2] + c[3]) * sc;
        } else {
          yp[0] = (c[0] + c[1]) * sc;
          yp[8] = (c[2] + c[3]) * sc;
        }
      }
    }
  };
  for (int jj = w; jj < njobs; jj += kDepth * kBlockWarps) {
    auto one = [&](auto K) {  // set k holds job jj + k B; once computed it takes job jj + (k + kDepth) B
      constexpr int k = decltype(K)::value;
      const int j = jj + k * kBlockWarps;
      if (job_ok(j)) {
        compute(j, ring[k]);
        if (j == 0) SMALLM_TL_MARK(1, kTlJob0Mma);  // warp 0's first job computed (timeline harness)
        if (job_ok(j + kDepth * kBlockWarps)) issue(j + kDepth * kBlockWarps, ring[k]);
      }
    };
    StaticFor<0, kDepth>::run(one);
  }
  block_sync();
  SMALLM_TL_MARK(1, kTlDownJobs);
  slot_sums<kBlockThreads>(a, R, ys, tws, nloc, rb);
  SMALLM_TL_EXIT(1);
#else
  (void)a;
#endif
}

}  // namespace smallm
