// grouped_probe.cu: two one-launch MoE designs for 1-4 tokens (FP8 128x128 block scales, row-major),
// each timed beside a read-only kernel over the same bytes (the floor), with the graph discipline of
// `sglang-smallm bench` (8 weight copies rotated in one CUDA graph, so the weights are not L2-resident),
// and checked against an fp64 reference (rounded to bf16, as `selftest`), out poisoned, two calls equal.
// Recorded in examples/results "h200-ab16": correct, not faster than the committed two kernels, dropped.
//
// Why: at 1 token the committed kernels (a gate/up kernel, then the down as its programmatic dependent)
// spend ~5.7 of 16.7 us (Qwen3.5 TP4) after the gate/up has streamed its weights: the grid-wide wait,
// the down's prologue and W2, which its blocks request only once gate/up blocks leave the SMs (README
// "Why not 1.25x"). Both designs launch one block per SM (all resident) and have W2 in flight before
// they wait:
//   A (grouped_kernel), per-expert groups: blocks / U blocks per distinct expert; member m streams its
//     share of the expert's W13 and then W2 rows through a ring of shared-memory slots (cp.async.bulk),
//     writes its h slice, counts on the expert's counter and waits for its group; member m of every
//     group covers the same output rows, and the last of the U groups to finish them sums each token's
//     slots in slot order. Arithmetic on CUDA cores in fp32.
//   B (olp::onelaunch_kernel), one grid-wide counter: each block a byte-balanced share, W13 tiles (4 gate +
//     4 up rows of one expert) and 1-2 output row-blocks of every expert's W2, through one ring; after its
//     tiles it writes h, counts on one counter, waits for all blocks, stages every pair's h as hi/lo f16
//     and computes y on tensor cores (the package's mma.sync fragment mapping, from hip/), then sums each
//     token's slots in the block.
// Every counter is reset by its last user (graph replays need no memset).
//
// Usage: grouped_probe [tokens, default 1,2,3,4] (Qwen3.5 shapes: D 4096, E 513, K 11, I 256 and 128).
// PROBE_KERNEL=A|B|AB (default B); PROBE_MODE=1 skips the arithmetic (the stream and the waits alone);
// PROBE_LOADER (B): 0 one bulk copy per padded row, 1 cp.async 16-byte chunks by every thread, 2 (the
// default: what streamed best) one bulk copy per 16 KB of gate or up rows (the up rows 64 bytes further:
// the other bank half) and per W2 expert piece, rows unpadded. PROBE_XFIRST=1 (B, loader 2): the ring's
// first slots issued only after x is staged (the default issues them first).
// Build: nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -Ihip examples/grouped/grouped_probe.cu -o gp
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "smallm_moe_twopass.h"  // (-I hip) the package's helpers, for probe B


#include "../probe_common.cuh"

constexpr int kT = 256, kW = kT / 32;
constexpr int kNS = 8;           // ring slots
constexpr int kSB = 16384;       // bytes per slot: 4 W13 rows at D = 4096, 64 W2 rows at I = 256
constexpr int kMaxN = 64;        // pairs (routing by threads 0..63)
constexpr int kMP = 8;           // pairs of one expert per pass
constexpr int kMaxD = 4096, kMaxI = 256;
constexpr int kStamps = 11;  // %globaltimer points per block (0-7 both probes; 8-10 B's setup: ring issued, x in, x max)

struct Args {
  const uint8_t* w13;  // [E, 2I, D] e4m3
  const float* s13;    // [E, 2I/128, D/128]
  const uint8_t* w2;   // [E, D, I] e4m3
  const float* s2;     // [E, D/128, I/128]
  const __nv_bfloat16* x;  // [T, D]
  const int* ids;          // [T, K]
  const float* tw;         // [T, K]
  __nv_bfloat16* out;      // [T, D]
  float* h;                // [N, I]
  float* y;                // [N, D]
  unsigned* gcnt;          // [blocks] per expert group: members that wrote h
  unsigned* gdone;         // [blocks] per group: members past the wait
  unsigned* rcnt;          // [blocks] per member index: groups that wrote y
  unsigned long long* stamps;  // [blocks][8] %globaltimer at points of the block (thread 0), or null
  int T, K, E, D, I;
  int mode;                // 0 as described; 1 no arithmetic (the stream and the waits alone)
};

__device__ __forceinline__ unsigned saddr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void bar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(bar)) : "memory");
}
__device__ __forceinline__ void bar_arm(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nGP_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra GP_WAIT;\n}\n" ::"r"(saddr(bar)),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bulk(void* dst, const void* src, unsigned n, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(saddr(dst)),
               "l"(src), "r"(n), "r"(saddr(bar))
               : "memory");
}
__device__ __forceinline__ void cp16(void* smem, const void* g) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(smem)), "l"(g) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void dec16(const uint4 w, float (&f)[16]) {
  const uint32_t ww[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)((ww[i] >> (16 * hh)) & 0xffffu), __NV_E4M3);
      const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&r));
      f[4 * i + 2 * hh] = v.x;
      f[4 * i + 2 * hh + 1] = v.y;
    }
  }
}
__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

struct Shared {
  uint64_t full[kNS];
  int U, N;
  int pe[kMaxN];        // expert of pair (or -1)
  int lead[kMaxN];      // first pair of the pair's expert (or -1)
  unsigned leads[kMaxN / 32];
  int ue[kMaxN];        // expert of distinct u
  int ucnt[kMaxN + 1];  // pair list offsets
  int plist[kMaxN];
  alignas(16) float s13[(2 * kMaxI / 128) * (kMaxD / 128)];
  alignas(16) float s2[(kMaxD / 128) * (kMaxI / 128)];
  float red[2][kW][kMP];
  float gs[kMP][4];
  float tw[kMaxN];
  unsigned last;
};

// Dynamic shared memory: ring [kNS][kSB], then x as f32 [T][4][D/16] float4 (for vector v of a row, its
// quarter c at [c][v]: consecutive lanes read consecutive 16 bytes), then h as f32 [kMP][4][I/16] float4.
__global__ void __launch_bounds__(kT, 1) grouped_kernel(Args a) {
  extern __shared__ __attribute__((aligned(128))) uint8_t dsm[];
  __shared__ Shared S;
  const int t = threadIdx.x, lane = t & 31, w = t >> 5, b = blockIdx.x, G = gridDim.x;
  auto mark = [&](int i) {
    if (a.stamps && t == 0) a.stamps[b * kStamps + i] = gtime();
  };
  mark(0);
  const int N = a.T * a.K, D = a.D, I = a.I, nv = D / 16, iv = I / 16;
  uint8_t* ring = dsm;
  float4* hq = reinterpret_cast<float4*>(dsm + kNS * kSB + (size_t)a.T * D * 2);
  // x requested first (it does not depend on the routing): cp.async, bf16 as [tok][half][v] 16-byte units
  uint4* xs = reinterpret_cast<uint4*>(dsm + kNS * kSB);
  const int nxv = a.T * nv;
  for (int i = t; i < 2 * nxv; i += kT) {
    const int tok = i / (2 * nv), r = i - tok * 2 * nv, v = r / 2, q = r & 1;
    cp16(xs + ((size_t)tok * 2 + q) * nv + v, a.x + (size_t)tok * D + 16 * v + 8 * q);
  }
  if (t < kNS) bar_init(&S.full[t]);
  // routing: distinct experts in first-occurrence order, their pairs in pair order. Up to 32 pairs by
  // warp 0 alone (lanes of one expert find each other with match.any); else by threads 0..N-1.
  if (N <= 32) {
    if (w == 0) {
      const int v = lane < N ? a.ids[lane] : -1;
      const int pex = (lane < N && v >= 0 && v < a.E) ? v : -1;
      if (lane < N) {
        S.pe[lane] = pex;
        S.tw[lane] = a.tw[lane];
      }
      const bool valid = pex >= 0;
      const unsigned same = __match_any_sync(0xffffffffu, valid ? pex : -1);
      const bool lead = valid && __ffs(same) - 1 == lane;
      const unsigned leads = __ballot_sync(0xffffffffu, lead);
      const int cnt = lead ? __popc(same) : 0;
      int incl = cnt;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += n;
      }
      const int off = incl - cnt, total = __shfl_sync(0xffffffffu, incl, 31);
      if (lead) {
        const int u = __popc(leads & ((1u << lane) - 1u));
        S.ue[u] = pex;
        S.ucnt[u] = off;
      }
      const int base = __shfl_sync(0xffffffffu, off, valid ? __ffs(same) - 1 : lane);
      if (valid) S.plist[base + __popc(same & ((1u << lane) - 1u))] = lane;
      if (lane == 0) {
        S.U = __popc(leads);
        S.ucnt[__popc(leads)] = total;
      }
    }
  } else {
    int pex = -1, lead = -1, rank = 0;
    if (t < N) {
      const int v = a.ids[t];
      pex = (v >= 0 && v < a.E) ? v : -1;
      S.pe[t] = pex;
      S.tw[t] = a.tw[t];
    }
    __syncthreads();
    if (t < N && pex >= 0) {
      lead = t;
      for (int q = 0; q < t; ++q)
        if (S.pe[q] == pex) {
          if (rank == 0) lead = q;
          ++rank;
        }
      S.lead[t] = lead;
    } else if (t < N) {
      S.lead[t] = -1;
    }
    const unsigned bal = __ballot_sync(0xffffffffu, t < N && pex >= 0 && rank == 0);
    if (lane == 0 && w < kMaxN / 32) S.leads[w] = bal;
    __syncthreads();
    if (t < N && pex >= 0) {
      auto below = [&](int p) {  // leaders with a smaller pair index
        int n = 0;
        for (int k = 0; k < kMaxN / 32; ++k) {
          const int lo = 32 * k;
          n += p >= lo + 32 ? __popc(S.leads[k]) : (p > lo ? __popc(S.leads[k] & ((1u << (p - lo)) - 1u)) : 0);
        }
        return n;
      };
      const int u = below(lead);
      if (rank == 0) {
        int off = 0;  // valid pairs whose leader comes before this one
        for (int q = 0; q < N; ++q) off += (S.lead[q] >= 0 && S.lead[q] < t);
        S.ue[u] = pex;
        S.ucnt[u] = off;
      }
    }
    if (t == 0) {
      int U = 0, valid = 0;
      for (int k = 0; k < kMaxN / 32; ++k) U += __popc(S.leads[k]);
      for (int q = 0; q < N; ++q) valid += S.lead[q] >= 0;
      S.U = U;
      S.ucnt[U] = valid;
    }
    __syncthreads();
    if (t < N && pex >= 0) {
      int u = 0;
      for (int k = 0; k < kMaxN / 32; ++k) {
        const int lo = 32 * k;
        u += lead >= lo + 32 ? __popc(S.leads[k]) : (lead > lo ? __popc(S.leads[k] & ((1u << (lead - lo)) - 1u)) : 0);
      }
      S.plist[S.ucnt[u] + rank] = t;
    }
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  mark(1);
  const int U = S.U;
  const int Gs = U > 0 ? G / U : 0;
  if (U == 0 || b >= U * Gs) {  // no expert or an idle block: only the row sums' counters need U per rows
    return;
  }
  const int u = b / Gs, m = b - u * Gs, e = S.ue[u];
  const int beg = S.ucnt[u], M = S.ucnt[u + 1] - beg;
  const int tiles = I / 4, ta = m * tiles / Gs, tb = (m + 1) * tiles / Gs;
  const int nrb = D / 16, ra = 16 * (m * nrb / Gs), rb = 16 * ((m + 1) * nrb / Gs);
  const int p2 = kSB / I;  // W2 rows per piece
  const int n1 = 2 * (tb - ta), n2 = (rb - ra + p2 - 1) / p2, nitems = n1 + n2;
  const uint8_t* w13e = a.w13 + (size_t)e * 2 * I * D;
  const uint8_t* w2e = a.w2 + (size_t)e * D * I;
  auto issue = [&](int it) {  // thread 0: item it into slot it % kNS
    const int s = it % kNS;
    const uint8_t* src;
    unsigned bytes;
    if (it < n1) {
      const int tt = ta + it / 2;
      src = w13e + (size_t)((it & 1) ? I + 4 * tt : 4 * tt) * D;
      bytes = 4 * D;
    } else {
      const int r0 = ra + (it - n1) * p2, rows = min(p2, rb - r0);
      src = w2e + (size_t)r0 * I;
      bytes = rows * I;
    }
    bar_arm(&S.full[s], bytes);
    bulk(ring + (size_t)s * kSB, src, bytes, &S.full[s]);
  };
  if (t == 0)
    for (int it = 0; it < kNS && it < nitems; ++it) issue(it);
  for (int i = t; i < 2 * I / 128 * (D / 128) / 4; i += kT) cp16(&S.s13[4 * i], a.s13 + (size_t)e * (2 * I / 128) * (D / 128) + 4 * i);
  for (int i = t; i < D / 128 * (I / 128) / 4; i += kT) cp16(&S.s2[4 * i], a.s2 + (size_t)e * (D / 128) * (I / 128) + 4 * i);
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  // the group's h: every member's rows written (h by threads < 32 after the last W13 barrier); signal,
  // wait for the group's other members, then h of the expert's pairs -> [mp][c][q] float4
  mark(2);
  auto signal_and_wait = [&] {
    __syncthreads();
    mark(4);
    if (t == 0) {
      __threadfence();
      atomicAdd(&a.gcnt[u], 1u);
      // bounded (a probe must not hang its job): ~0.1 s, then out is left wrong and the check fails
      for (int spin = 0; ld_acquire(&a.gcnt[u]) < (unsigned)Gs && spin < (1 << 22); ++spin) __nanosleep(32);
      if (atomicAdd(&a.gdone[u], 1u) == (unsigned)Gs - 1) {
        a.gcnt[u] = 0;
        a.gdone[u] = 0;
      }
    }
    __syncthreads();
    for (int i = t; i < M * I / 4; i += kT) {
      const int mp = i / (I / 4), r = i - mp * (I / 4), q = r / 4, c = r % 4;
      hq[((size_t)mp * 4 + c) * iv + q] = __ldcg(reinterpret_cast<const float4*>(a.h + (size_t)S.plist[beg + mp] * I) + r);
    }
    __syncthreads();
    mark(5);
  };
  const int nkb = D / 128, nib = I / 128;
  for (int it = 0; it < nitems; ++it) {
    const int s = it % kNS;
    if (it == n1) signal_and_wait();
    bar_wait(&S.full[s], (unsigned)(it / kNS) & 1u);
    if (it == 0) mark(3);
    const uint8_t* slot = ring + (size_t)s * kSB;
    if (a.mode == 1) {
      __syncthreads();
    } else if (it < n1) {
      const int tt = ta + it / 2, up = it & 1;
      const int r = w >> 1, hf = w & 1, row = (up ? I : 0) + 4 * tt + r;
      const float* sr = S.s13 + (row / 128) * nkb;
      float acc[kMP];
#pragma unroll
      for (int k = 0; k < kMP; ++k) acc[k] = 0.0f;
      for (int j = 0; j < nv / 64; ++j) {
        const int v = hf * (nv / 2) + lane + 32 * j;
        float f[16];
        dec16(*reinterpret_cast<const uint4*>(slot + (size_t)r * D + 16 * v), f);
        const float sc = sr[v / 8];
#pragma unroll
        for (int k = 0; k < kMP; ++k) {
          if (k < M) {
            const int tok = S.plist[beg + k] / a.K;
            float p = 0.0f;
#pragma unroll
            for (int q = 0; q < 2; ++q) {
              const uint4 xv = xs[((size_t)tok * 2 + q) * nv + v];
              const uint32_t xw[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
              for (int j = 0; j < 4; ++j)
                p = fmaf(f[8 * q + 2 * j], __uint_as_float(xw[j] << 16), fmaf(f[8 * q + 2 * j + 1], __uint_as_float(xw[j] & 0xffff0000u), p));
            }
            acc[k] = fmaf(sc, p, acc[k]);
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kMP; ++k) {
        if (k < M) {
          float v = acc[k];
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
          if (lane == 0) S.red[it & 1][w][k] = v;
        }
      }
      __syncthreads();  // slot s read; red[it & 1] complete
      if (t < 4 * kMP) {
        const int k = t / 4, rr = t % 4;
        if (k < M) {
          const float v = S.red[it & 1][2 * rr][k] + S.red[it & 1][2 * rr + 1][k];
          if (!up)
            S.gs[k][rr] = v;
          else
            a.h[(size_t)S.plist[beg + k] * I + 4 * tt + rr] = silu(S.gs[k][rr]) * v;
        }
      }
    } else {
      const int r0 = ra + (it - n1) * p2, rows = min(p2, rb - r0);
      const int rpw = 32 / iv;  // rows per warp step
      const int c = lane % iv, sub = lane / iv;
      const float* s2r = S.s2 + c * 16 / 128;
      for (int rr = w * rpw + sub; rr - sub < rows; rr += kW * rpw) {
        float f[16];
        const bool ok = rr < rows;
        if (ok) dec16(*reinterpret_cast<const uint4*>(slot + (size_t)rr * I + 16 * c), f);
        const float sc = ok ? s2r[((r0 + rr) / 128) * nib] : 0.0f;
#pragma unroll
        for (int k = 0; k < kMP; ++k) {
          if (k < M) {
            float p = 0.0f;
            if (ok) {
#pragma unroll
              for (int q = 0; q < 4; ++q) {
                const float4 hv = hq[((size_t)k * 4 + q) * iv + c];
                p = fmaf(f[4 * q], hv.x, fmaf(f[4 * q + 1], hv.y, fmaf(f[4 * q + 2], hv.z, fmaf(f[4 * q + 3], hv.w, p))));
              }
            }
            p *= sc;
            for (int o = iv / 2; o > 0; o >>= 1) p += __shfl_xor_sync(0xffffffffu, p, o);
            if (ok && c == 0) a.y[(size_t)S.plist[beg + k] * D + r0 + rr] = p;
          }
        }
      }
      __syncthreads();  // slot s read
    }
    if (t == 0 && it + kNS < nitems) issue(it + kNS);
  }
  mark(6);
  if (n2 == 0) signal_and_wait();  // (no W2 rows: still a member of the group's wait)
  // y of rows [ra, rb) for the expert's pairs is written; the last of the U groups sums the slots
  if (t == 0) {
    __threadfence();
    S.last = atomicAdd(&a.rcnt[m], 1u) == (unsigned)U - 1;
    if (S.last) a.rcnt[m] = 0;
  }
  __syncthreads();
  if (S.last) {
    __threadfence();
    for (int i = t; i < a.T * (rb - ra); i += kT) {
      const int tok = i / (rb - ra), r = ra + i - tok * (rb - ra);
      float yv[16];
#pragma unroll
      for (int k = 0; k < 16; ++k)  // all loads first (K <= 16), then the sum in slot order
        if (k < a.K) yv[k] = __ldcg(a.y + (size_t)(tok * a.K + k) * D + r);
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < 16; ++k)
        if (k < a.K && S.pe[tok * a.K + k] >= 0) sum = fmaf(S.tw[tok * a.K + k], yv[k], sum);
      a.out[(size_t)tok * D + r] = __float2bfloat16(sum);
    }
  }
  mark(7);
}


// ---------------------------------------------------------------- probe B: one launch, one grid-wide counter
// The package's helpers (MMA, conversions, routing) from hip/ (-I hip). Every block takes a balanced
// share of the call's bytes: a contiguous range of W13 tiles (distinct expert u, 4 gate + 4 up rows, in
// (u, tile) order) and the output row-blocks [rbs, rbe) (16 rows) for every distinct expert, the W13
// range sized so that W13 + W2 bytes are equal across blocks. The block's items (W13 tiles, then W2
// (row-block, experts) pieces) stream into a ring of shared-memory slots (PROBE_LOADER: the header), so
// W2 is in flight while the block waits. After its tiles the
// block writes h, counts itself on one counter and waits for all blocks (grid <= SMs, one block per SM:
// all resident); then stages every pair's h as hi/lo f16 (as the tensor-core down), computes y for its
// row-blocks on tensor cores and sums each token's slots in slot order: no reduction across blocks.
namespace olp {
using namespace smallm;
constexpr int kRowPad = 64;  // W13 rows: consecutive rows in alternate bank halves
constexpr int kW2Pad = 16;   // W2 rows: 4 banks further per row
constexpr int kSlots = 5;
constexpr int kScaleBytes = 4 * (4096 / 128);  // one W13 scale row (D <= 4096)
constexpr int kSlotBytes = 8 * (4096 + kRowPad) + 128 + 2 * kScaleBytes;
constexpr int kMaxP = 64;

struct Shared {
  uint64_t full[kSlots];
  RoutingFor<kMaxP, kMaxExperts> R;
  float red[2][kWarps][kMmaPairs][8];
  float sc[kMaxP];    // 2^e_t per token
  float tw[kMaxP];    // routing weights
  float hexp[kMaxP];  // 2^e_p per pair
  int xmax[kMaxP];    // per token max |x| (float bits)
};

SMALLM_DEV unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
SMALLM_DEV unsigned saddr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__global__ void __launch_bounds__(kThreads, 1) onelaunch_kernel(MoeArgs a, unsigned* sync, unsigned long long* stamps, int mode, int loader, int xfirst) {
#if defined(SMALLM_MMA_F16)  // device pass only
  extern __shared__ __attribute__((aligned(128))) uint8_t dsm[];
  __shared__ Shared S;
  const int t = thread_id(), lane = lane_id(), w = t / kWarp, g = lane >> 2, q = lane & 3;
  const int b = block_id(), G = gridDim.x;
  auto mark = [&](int i) {
    if (stamps && t == 0) stamps[b * kStamps + i] = gtime();
  };
  mark(0);
  const int T = a.T, K = a.K, D = a.D, I = a.I, N = T * K;
  // loader 2: rows unpadded, W13 gate / up rows and each W2 expert piece as one bulk copy
  const int rowpad = loader == 2 ? 0 : kRowPad, w2pad = loader == 2 ? 0 : kW2Pad;
  uint8_t* ring = dsm;
  uint16_t* xs = reinterpret_cast<uint16_t*>(dsm + kSlots * kSlotBytes);  // [T][D] bf16, then f16 * 2^-e_t
  const int hst = I + 8;
  uint16_t* hhi = xs + (size_t)T * D;  // [N][hst] f16 hi, then [N][hst] lo
  for (int i = t; i < T * D / 8; i += kThreads) {
    const unsigned s = saddr(xs + 8 * i);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(a.x + 8 * i) : "memory");
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  if (t < kSlots) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(&S.full[t])) : "memory");
  if (t < N) S.tw[t] = a.topk_w[t];
  if (t < T) S.xmax[t] = 0;
  auto nothing = [] {};
  build_routing<kThreads>(a, S.R, nothing);  // ends with a barrier
  mark(1);
  const auto& R = S.R;
  const int U = R.nd, tiles = I / 4, total_t = U * tiles, nrb = D / 16;
  const long tb = 8L * D, rbb = (long)U * 16 * I, target = (total_t * tb + nrb * rbb + G - 1) / G;
  // W13 tiles before block bb: its share of all bytes less the W2 of the row-blocks before it. (Where
  // this is not monotone in bb a block takes an empty range or recomputes tiles of the block before it,
  // writing the same h: no tile is left out.)
  auto t13 = [&](int bb) {
    const long f = ((long)bb * target - (long)(bb * nrb / G) * rbb) / tb;
    return (int)(f < 0 ? 0 : f < total_t ? f : total_t);
  };
  const int ts = t13(b), te = b == G - 1 ? total_t : t13(b + 1);
  const int rbs = b * nrb / G, rbe = (b + 1) * nrb / G, nrl = rbe - rbs;
  const int epi = (kSlotBytes - 2 * kScaleBytes) / (16 * (I + w2pad)), npc = (U + epi - 1) / epi;
  const int n13 = te > ts ? te - ts : 0, nitems = n13 + nrl * npc;
  float* ys = reinterpret_cast<float*>(hhi + 2 * (size_t)N * hst);  // [nrl][N][16]
  float* s2s = ys + (size_t)nrl * N * 16;                             // [nrl][U][I/128]
  // loader 1: every thread copies its 16-byte chunks of the item (cp.async), one commit group per item
  auto issue_cp = [&](int it) {  // all threads
    const int s = it % kSlots;
    uint8_t* slot = ring + (size_t)s * kSlotBytes;
    auto cp = [&](void* dst, const void* src) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(dst)), "l"(src) : "memory");
    };
    if (it < n13) {
      const int gt = ts + it, u = gt / tiles, tt = gt - u * tiles, e = R.id[R.ulead[u]];
      const int cpr = D / 16, nsc = D / 128 / 4;  // chunks per row, per scale row
      for (int c = t; c < 8 * cpr + 2 * nsc; c += kThreads) {
        if (c < 8 * cpr) {
          const int r = c / cpr, k = c - r * cpr, row = r < 4 ? 4 * tt + r : I + 4 * tt + r - 4;
          cp(slot + (size_t)r * (D + rowpad) + 16 * k, a.w13 + ((size_t)e * 2 * I + row) * D + 16 * k);
        } else {
          const int r = (c - 8 * cpr) / nsc, k = (c - 8 * cpr) % nsc, row = r == 0 ? 4 * tt : I + 4 * tt;
          cp(slot + 8 * (D + rowpad) + 128 + r * kScaleBytes + 16 * k,
             static_cast<const float*>(a.s13) + ((size_t)e * (2 * I / 128) + row / 128) * (D / 128) + 4 * k);
        }
      }
    } else {
      const int j = it - n13, rbk = rbs + j / npc, u0 = (j % npc) * epi, u1 = min(U, u0 + epi);
      const int cpr = I / 16;
      for (int c = t; c < (u1 - u0) * 16 * cpr; c += kThreads) {
        const int rr = c / cpr, k = c - rr * cpr, ku = rr / 16, r = rr % 16, e = R.id[R.ulead[u0 + ku]];
        cp(slot + (size_t)rr * (I + w2pad) + 16 * k, a.w2 + ((size_t)e * D + rbk * 16 + r) * I + 16 * k);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  auto issue = [&](int it) {  // warp 0
    const int s = it % kSlots;
    uint8_t* slot = ring + (size_t)s * kSlotBytes;
    const unsigned bar = saddr(&S.full[s]);
    auto bulk = [&](void* dst, const void* src, unsigned n) {
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(saddr(dst)),
                   "l"(src), "r"(n), "r"(bar)
                   : "memory");
    };
    if (it < n13) {
      const int gt = ts + it, u = gt / tiles, tt = gt - u * tiles, e = R.id[R.ulead[u]];
      if (lane == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(8 * D + 8 * (D / 128)) : "memory");
      __syncwarp();
      if (loader == 2 && lane < 2) {
        bulk(slot + (size_t)lane * (4 * D + 64), a.w13 + ((size_t)e * 2 * I + (lane ? I : 0) + 4 * tt) * D, 4 * D);
      } else if (loader != 2 && lane < 8) {
        const int row = lane < 4 ? 4 * tt + lane : I + 4 * tt + lane - 4;
        bulk(slot + (size_t)lane * (D + rowpad), a.w13 + ((size_t)e * 2 * I + row) * D, D);
      } else if (lane >= 8 && lane < 10) {
        const int row = lane == 8 ? 4 * tt : I + 4 * tt;
        bulk(slot + 8 * (D + rowpad) + 128 + (lane - 8) * kScaleBytes,
             static_cast<const float*>(a.s13) + ((size_t)e * (2 * I / 128) + row / 128) * (D / 128), 4 * (D / 128));
      }
    } else {
      const int j = it - n13, rbk = rbs + j / npc, u0 = (j % npc) * epi, u1 = min(U, u0 + epi);
      if (lane == 0) asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"((u1 - u0) * 16 * I) : "memory");
      __syncwarp();
      if (loader == 2) {
        if (lane < u1 - u0) bulk(slot + (size_t)lane * 16 * I, a.w2 + ((size_t)R.id[R.ulead[u0 + lane]] * D + rbk * 16) * I, 16 * I);
      } else {
        for (int c = lane; c < (u1 - u0) * 16; c += kWarp) {
          const int k = c / 16, r = c % 16, e = R.id[R.ulead[u0 + k]];
          bulk(slot + (size_t)(k * 16 + r) * (I + w2pad), a.w2 + ((size_t)e * D + rbk * 16 + r) * I, I);
        }
      }
    }
  };
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  block_sync();
  // the ring's first slots first (x's copies, issued at entry, are ahead of them), then x staged by every
  // thread: per token max |x| (warp max, one shared atomic per warp), then f16 * 2^-e_t in place, each
  // thread rewriting the vectors it read
  // (xfirst, loader 2 only: the ring's first slots only after x is staged)
  if (loader == 1) {
    for (int it = 0; it < kSlots; ++it) {
      if (it < nitems)
        issue_cp(it);
      else
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
  } else if (w == 0 && !xfirst) {
    for (int it = 0; it < kSlots && it < nitems; ++it) issue(it);
  }
  mark(8);
  if (loader == 1)
    asm volatile("cp.async.wait_group %0;" ::"n"(kSlots) : "memory");  // x's group, older than the slots'
  else
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  mark(9);
  block_sync();
  for (int tok = 0; tok < T; ++tok) {
    const Vec16* row = reinterpret_cast<const Vec16*>(xs + (size_t)tok * D);
    float mx = 0.0f;
    for (int i = t; i < D / 8; i += kThreads) {
      const Vec16 v = row[i];
#pragma unroll
      for (int k = 0; k < 4; ++k) mx = fmaxf(mx, fmaxf(fabsf(bf16_lo(v.w[k])), fabsf(bf16_hi(v.w[k]))));
    }
    for (int o = 1; o < kWarp; o <<= 1) mx = fmaxf(mx, shfl_xor(mx, o));
    if (lane == 0) atomicMax(&S.xmax[tok], __float_as_int(mx));
  }
  block_sync();
  mark(10);
  for (int tok = 0; tok < T; ++tok) {
    const int ex = f16_stage_exponent(__int_as_float(S.xmax[tok]));
    if (t == 0) S.sc[tok] = exp2_int(ex);
    const float inv = exp2_int(-ex);
    Vec16* row = reinterpret_cast<Vec16*>(xs + (size_t)tok * D);
    for (int i = t; i < D / 8; i += kThreads) {
      const Vec16 v = row[i];
      Vec16 o;
#pragma unroll
      for (int k = 0; k < 4; ++k) o.w[k] = (uint32_t)f32_to_f16(bf16_lo(v.w[k]) * inv) | ((uint32_t)f32_to_f16(bf16_hi(v.w[k]) * inv) << 16);
      row[i] = o;
    }
  }
  block_sync();
  mark(2);
  if (xfirst && loader == 2 && w == 0)
    for (int it = 0; it < kSlots && it < nitems; ++it) issue(it);
  const int nsteps = D / 64, pm = g >> 1, hf = g & 1;
  int buf = 0;
  auto grid_wait_and_stage_h = [&] {
    block_sync();
    mark(4);
    // W2 scales of the block's row-blocks, every expert (they do not depend on h: requested before the count)
    for (int i = t; i < nrl * U * (I / 128); i += kThreads) {
      const int rl = i / (U * (I / 128)), r2 = i - rl * U * (I / 128), u = r2 / (I / 128), kb = r2 % (I / 128);
      const int e = R.id[R.ulead[u]];
      s2s[i] = static_cast<const float*>(a.s2)[((size_t)e * (D / 128) + (rbs + rl) * 16 / 128) * (I / 128) + kb];
    }
    if (t == 0) {
      __threadfence();
      atomicAdd(&sync[0], 1u);
      while (load_acquire(&sync[0]) < (unsigned)G) {
      }
      if (atomicAdd(&sync[1], 1u) == (unsigned)G - 1) {
        sync[0] = 0;
        sync[1] = 0;
      }
    }
    block_sync();
    // h of every pair -> hi / lo f16 * 2^-e_p (warp w takes pairs w, w + 8, ..; lane: I / 32 values)
    const int kv = I / kWarp;  // 8 (I 256) or 4 (I 128)
    for (int p = w; p < N; p += kWarps) {
      if (R.id[p] < 0) continue;
      float v[8];
#pragma unroll
      for (int z = 0; z < 2; ++z)
        if (4 * z < kv) {
          const float4 f = __ldcg(reinterpret_cast<const float4*>(a.h + (size_t)p * I + kv * lane + 4 * z));
          v[4 * z] = f.x, v[4 * z + 1] = f.y, v[4 * z + 2] = f.z, v[4 * z + 3] = f.w;
        }
      float mx = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (k < kv) mx = fmaxf(mx, fabsf(v[k]));
      for (int o = 1; o < kWarp; o <<= 1) mx = fmaxf(mx, shfl_xor(mx, o));
      const int ex = f16_stage_exponent(mx);
      if (lane == 0) S.hexp[p] = exp2_int(ex);
      const float inv = exp2_int(-ex);
#pragma unroll
      for (int k = 0; k < 8; ++k)
        if (k < kv) {
          const float f = v[k] * inv;
          const uint16_t hi = f32_to_f16(f);
          hhi[(size_t)p * hst + kv * lane + k] = hi;
          hhi[(size_t)(N + p) * hst + kv * lane + k] = f32_to_f16(f - f16_to_f32(hi));
        }
    }
    block_sync();
    mark(5);
  };
  for (int it = 0; it < nitems; ++it) {
    const int s = it % kSlots;
    if (it == n13) grid_wait_and_stage_h();
    if (loader == 1) {
      asm volatile("cp.async.wait_group %0;" ::"n"(kSlots - 1) : "memory");
      block_sync();
    } else {
      const unsigned bar = saddr(&S.full[s]), par = (unsigned)(it / kSlots) & 1u;
      asm volatile(
          "{\n.reg .pred done;\nOL_WAIT:\n"
          "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
          "@!done bra OL_WAIT;\n}\n" ::"r"(bar),
          "r"(par)
          : "memory");
    }
    if (it == 0) mark(3);
    const uint8_t* slot = ring + (size_t)s * kSlotBytes;
    if (mode == 1) {
      block_sync();
    } else if (it < n13) {
      const int gt = ts + it, u = gt / tiles, tt = gt - u * tiles;
      const int beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
      const float* scl = reinterpret_cast<const float*>(slot + 8 * (D + rowpad) + 128) + (g < 4 ? 0 : D / 128);
      const uint8_t* wr = slot + (size_t)g * (D + rowpad) + (loader == 2 && g >= 4 ? 64 : 0) + 16 * q;
      for (int m0 = 0; m0 < M; m0 += kMmaPairs) {
        const int mc = imin(kMmaPairs, M - m0);
        const bool live = pm < mc;
        const int tok = R.plist[beg + m0 + (live ? pm : 0)] / K;
        const uint16_t* xr = xs + (size_t)tok * D + 16 * q + 8 * hf;
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int st = w + kWarps * j;
          if (st >= nsteps) break;
          const Vec16 v = *reinterpret_cast<const Vec16*>(wr + 64 * st);
          Vec16 x0{};
          if (live) x0 = *reinterpret_cast<const Vec16*>(xr + 64 * st);
          float cs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const uint32_t w0 = v.w[i], w2 = v.w[i + 2];
            mma_f16_16x8x16(cs, e4m3x2_to_f16x2(w0), e4m3x2_to_f16x2(w2), e4m3x2_to_f16x2(w0 >> 16), e4m3x2_to_f16x2(w2 >> 16),
                            x0.w[2 * i], x0.w[2 * i + 1]);
          }
          acc = ffma(scl[st / 2], cs[0] + cs[3], acc);
        }
        if (q < mc) S.red[buf][w][q][g] = acc;
        block_sync();
        if (t < 4 * kMmaPairs) {
          const int m = t / 4, i = t % 4;
          if (m < mc) {
            float gs = 0.0f, us = 0.0f;
            for (int ww = 0; ww < kWarps; ++ww) {
              gs += S.red[buf][ww][m][i];
              us += S.red[buf][ww][m][4 + i];
            }
            const int p = R.plist[beg + m0 + m];
            const float sc = S.sc[p / K];
            a.h[(size_t)p * I + 4 * tt + i] = smallm::silu(gs * sc) * (us * sc);
          }
        }
        buf ^= 1;
      }
      if (M == 0) block_sync();
    } else {
      const int j = it - n13, rl = j / npc, u0 = (j % npc) * epi, u1 = min(U, u0 + epi);
      for (int k = w; k < u1 - u0; k += kWarps) {  // warp: one expert of the piece, all its pairs
        const int u = u0 + k, beg = R.ucnt[u], M = R.ucnt[u + 1] - beg;
        const uint8_t* pr = slot + (size_t)k * 16 * (I + w2pad) + 16 * q;
        const float* s2u = s2s + ((size_t)rl * U + u) * (I / 128);
        for (int m0 = 0; m0 < M; m0 += kMmaPairs) {
          const int mc = imin(kMmaPairs, M - m0);
          const bool live = (g >> 1) < mc;
          const int at = ((g & 1) * N + R.plist[beg + m0 + (live ? g >> 1 : 0)]) * hst + 16 * q;
          float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int kb = 0; kb < 2; ++kb) {  // I <= 256
            if (kb >= I / 128) break;
            float cs[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cs2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int cc = 0; cc < 2; ++cc) {
              const int ch = 2 * kb + cc;
              const Vec16 va = *reinterpret_cast<const Vec16*>(pr + (size_t)g * (I + w2pad) + 64 * ch);
              const Vec16 vb = *reinterpret_cast<const Vec16*>(pr + (size_t)(g + 8) * (I + w2pad) + 64 * ch);
              Vec16 bv[2] = {};
              if (live) {
                bv[0] = *reinterpret_cast<const Vec16*>(hhi + at + 64 * ch);
                bv[1] = *reinterpret_cast<const Vec16*>(hhi + at + 64 * ch + 8);
              }
#pragma unroll
              for (int mi = 0; mi < 4; ++mi) {
                const uint32_t wg = va.w[mi], wg8 = vb.w[mi];
                const int z = mi / 2, wd = 2 * (mi % 2);
                mma_f16_16x8x16(cc == 0 ? cs : cs2, e4m3x2_to_f16x2(wg), e4m3x2_to_f16x2(wg8), e4m3x2_to_f16x2(wg >> 16),
                                e4m3x2_to_f16x2(wg8 >> 16), bv[z].w[wd], bv[z].w[wd + 1]);
              }
            }
#pragma unroll
            for (int r = 0; r < 4; ++r) c[r] = ffma(s2u[kb], cs[r] + cs2[r], c[r]);
          }
          if (q < mc) {
            const int pq = R.plist[beg + m0 + q];
            const float sc = S.hexp[pq];
            ys[((size_t)rl * N + pq) * 16 + g] = (c[0] + c[1]) * sc;
            ys[((size_t)rl * N + pq) * 16 + g + 8] = (c[2] + c[3]) * sc;
          }
        }
      }
      block_sync();
    }
    if (loader == 1) {
      if (it + kSlots < nitems)
        issue_cp(it + kSlots);
      else
        asm volatile("cp.async.commit_group;" ::: "memory");
    } else if (w == 0 && it + kSlots < nitems) {
      issue(it + kSlots);
    }
  }
  if (n13 == nitems) grid_wait_and_stage_h();
  block_sync();
  mark(6);
  for (int idx = t; idx < nrl * T * 16; idx += kThreads) {
    const int rl = idx / (T * 16), rest = idx - rl * T * 16, tok = rest / 16, r = rest % 16;
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) {
      const int pq = tok * K + k;
      if (R.id[pq] >= 0) sum = ffma(S.tw[pq], ys[((size_t)rl * N + pq) * 16 + r], sum);
    }
    a.out[(size_t)tok * D + (rbs + rl) * 16 + r] = f32_to_bf16(sum);
  }
  mark(7);
#endif
}
}  // namespace olp

// ---------------------------------------------------------------- reference, floor, setup
__device__ float e4m3f(uint8_t v) {
  const __half_raw r = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E4M3);
  return __half2float(*reinterpret_cast<const __half*>(&r));
}
__global__ void ref_h(Args a, float* h) {  // one thread per (pair, i)
  const int i = blockIdx.x * blockDim.x + threadIdx.x, N = a.T * a.K;
  if (i >= N * a.I) return;
  const int p = i / a.I, j = i % a.I, e = a.ids[p], tok = p / a.K;
  double g = 0, up = 0;
  for (int k = 0; k < a.D; ++k) {
    const double xv = __bfloat162float(a.x[(size_t)tok * a.D + k]);
    const int rg = j, ru = a.I + j;
    g += xv * e4m3f(a.w13[((size_t)e * 2 * a.I + rg) * a.D + k]) * a.s13[((size_t)e * (2 * a.I / 128) + rg / 128) * (a.D / 128) + k / 128];
    up += xv * e4m3f(a.w13[((size_t)e * 2 * a.I + ru) * a.D + k]) * a.s13[((size_t)e * (2 * a.I / 128) + ru / 128) * (a.D / 128) + k / 128];
  }
  h[i] = (float)(g / (1.0 + exp(-g)) * up);
}
__global__ void ref_out(Args a, const float* h, float* out) {  // one thread per (token, row)
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.T * a.D) return;
  const int tok = i / a.D, r = i % a.D;
  double s = 0;
  for (int k = 0; k < a.K; ++k) {
    const int p = tok * a.K + k, e = a.ids[p];
    double y = 0;
    for (int j = 0; j < a.I; ++j)
      y += (double)h[(size_t)p * a.I + j] * e4m3f(a.w2[((size_t)e * a.D + r) * a.I + j]) *
           a.s2[((size_t)e * (a.D / 128) + r / 128) * (a.I / 128) + j / 128];
    s += a.tw[p] * y;
  }
  out[i] = (float)s;
}
__global__ void floor_kernel(const uint8_t* base, const int* ids, long expert_bytes, int chunks, unsigned* sink) {
  const int c = blockIdx.x % chunks, i = blockIdx.x / chunks;
  const uint8_t* p = base + (long)ids[i] * expert_bytes;
  const long vecs = expert_bytes / 16, per = (vecs + chunks - 1) / chunks;
  const long lo = c * per, hi = min(lo + per, vecs);
  uint32_t acc = 0;
  long v = lo + threadIdx.x;
  for (; v + 3 * 256 < hi; v += 4 * 256) {
    const uint4 x0 = __ldcs(reinterpret_cast<const uint4*>(p) + v), x1 = __ldcs(reinterpret_cast<const uint4*>(p) + v + 256);
    const uint4 x2 = __ldcs(reinterpret_cast<const uint4*>(p) + v + 512), x3 = __ldcs(reinterpret_cast<const uint4*>(p) + v + 768);
    acc ^= x0.x ^ x0.y ^ x0.z ^ x0.w ^ x1.x ^ x1.y ^ x1.z ^ x1.w ^ x2.x ^ x2.y ^ x2.z ^ x2.w ^ x3.x ^ x3.y ^ x3.z ^ x3.w;
  }
  for (; v < hi; v += 256) {
    const uint4 x0 = __ldcs(reinterpret_cast<const uint4*>(p) + v);
    acc ^= x0.x ^ x0.y ^ x0.z ^ x0.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}
__global__ void fill_fp8(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = (uint8_t)((h % 0x70u) | (h & 0x80u));  // finite e4m3, |v| < 256
  }
}
__global__ void fill_f32(float* p, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    p[i] = lo + (hi - lo) * (h >> 8) * (1.0f / 16777216.0f);
  }
}

struct Copy {
  uint8_t *w13, *w2;
  float *s13, *s2;
};

int main(int argc, char** argv) {
  const std::vector<int> toks = token_counts(argc, argv, {1, 2, 3, 4});
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  const int SM = prop.multiProcessorCount;
  const int E = 513, K = 11, D = 4096, copies = 8;
  CK(cudaFuncSetAttribute(grouped_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  unsigned* cnt;
  CK(cudaMalloc(&cnt, 3 * 1024 * sizeof(unsigned)));
  CK(cudaMemset(cnt, 0, 3 * 1024 * sizeof(unsigned)));
  unsigned* sink;
  CK(cudaMalloc(&sink, 4));
  unsigned long long* stamps;
  CK(cudaMalloc(&stamps, 1024 * kStamps * 8));
  const int mode = getenv("PROBE_MODE") ? atoi(getenv("PROBE_MODE")) : 0;
  const int xfirst = getenv("PROBE_XFIRST") ? atoi(getenv("PROBE_XFIRST")) : 0;  // B, loader 2: x staged before the ring
  const char* kinds = getenv("PROBE_KERNEL") ? getenv("PROBE_KERNEL") : "B";  // A grouped, B one launch
  const int loader = getenv("PROBE_LOADER") ? atoi(getenv("PROBE_LOADER")) : 2;  // B: see the header
  CK(cudaFuncSetAttribute(olp::onelaunch_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 216 * 1024));
  printf("device %s, %d SMs; grid %d x %d threads; ring A %d x %d KB, B %d x %d B (loader %d, mode %d)\n", prop.name, SM, SM, kT,
         kNS, kSB / 1024, olp::kSlots, olp::kSlotBytes, loader, mode);
  printf("%c %-5s %3s %4s %9s %9s %9s %7s %10s\n", 'K', "shape", "T", "U", "probe_us", "floor_us", "x_floor", "MB", "rel_err");
  for (int I : {256, 128}) {
    const size_t b13 = (size_t)E * 2 * I * D, b2 = (size_t)E * D * I;
    const size_t n13 = (size_t)E * (2 * I / 128) * (D / 128), n2 = (size_t)E * (D / 128) * (I / 128);
    std::vector<Copy> cp(copies);
    for (int c = 0; c < copies; ++c) {
      CK(cudaMalloc(&cp[c].w13, b13));
      CK(cudaMalloc(&cp[c].w2, b2));
      CK(cudaMalloc(&cp[c].s13, n13 * 4));
      CK(cudaMalloc(&cp[c].s2, n2 * 4));
      fill_fp8<<<1024, 256>>>(cp[c].w13, b13, 11 + c);
      fill_fp8<<<1024, 256>>>(cp[c].w2, b2, 1011 + c);
      fill_f32<<<256, 256>>>(cp[c].s13, n13, 21 + c, 0.5f / 256, 1.5f / 256);
      fill_f32<<<256, 256>>>(cp[c].s2, n2, 31 + c, 0.5f / 256, 1.5f / 256);
    }
    // one flat buffer per copy for the floor: [E][W13 + W2 bytes of an expert]
    const long eb = 3L * I * D;
    std::vector<uint8_t*> flat(copies);
    for (int c = 0; c < copies; ++c) {
      CK(cudaMalloc(&flat[c], (size_t)E * eb));
      fill_fp8<<<1024, 256>>>(flat[c], (size_t)E * eb, 77 + c);
    }
    CK(cudaDeviceSynchronize());
    for (int T : toks) {
      const int N = T * K;
      if (N > kMaxN) {
        printf("T=%d: %d pairs over the probe's %d\n", T, N, kMaxN);
        continue;
      }
      std::vector<Args> args(copies);
      std::vector<int*> dids(copies), dus(copies);
      std::vector<int> nus(copies);
      double err_worst = 0;
      for (int c = 0; c < copies; ++c) {
        srand(1000 * T + 7 * c + I);
        std::vector<int> ids(N);
        std::vector<float> tw(N);
        std::vector<int> distinct;
        for (int tk = 0; tk < T; ++tk) {
          std::vector<int> pick;
          while ((int)pick.size() < K) {
            const int v = rand() % E;
            if (std::find(pick.begin(), pick.end(), v) == pick.end()) pick.push_back(v);
          }
          for (int k = 0; k < K; ++k) {
            ids[tk * K + k] = pick[k];
            tw[tk * K + k] = 0.05f + (rand() % 1000) / 1000.0f * 0.1f;
            if (std::find(distinct.begin(), distinct.end(), pick[k]) == distinct.end()) distinct.push_back(pick[k]);
          }
        }
        nus[c] = (int)distinct.size();
        Args& a = args[c];
        int* d_ids;
        float* d_tw;
        __nv_bfloat16 *d_x, *d_out;
        float *d_h, *d_y;
        CK(cudaMalloc(&d_ids, N * 4));
        CK(cudaMalloc(&d_tw, N * 4));
        CK(cudaMalloc(&d_x, (size_t)T * D * 2));
        CK(cudaMalloc(&d_out, (size_t)T * D * 2));
        CK(cudaMalloc(&d_h, (size_t)N * I * 4));
        CK(cudaMalloc(&d_y, (size_t)N * D * 4));
        CK(cudaMemcpy(d_ids, ids.data(), N * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_tw, tw.data(), N * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dus[c], distinct.size() * 4));
        CK(cudaMemcpy(dus[c], distinct.data(), distinct.size() * 4, cudaMemcpyHostToDevice));
        std::vector<__nv_bfloat16> hx((size_t)T * D);
        for (auto& v : hx) v = __float2bfloat16((rand() % 2001 - 1000) / 1000.0f);
        CK(cudaMemcpy(d_x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
        a = Args{cp[c].w13, cp[c].s13, cp[c].w2, cp[c].s2, d_x, d_ids, d_tw, d_out, d_h, d_y, cnt, cnt + 1024, cnt + 2048, nullptr, T, K, E, D, I, mode};
        dids[c] = d_ids;
      }
      for (const char* kp = kinds; *kp; ++kp) {
      const char kind = *kp;
      const int nrl_max = (D / 16 + SM - 1) / SM;
      const size_t smem = kind == 'A' ? (size_t)kNS * kSB + (size_t)T * D * 2 + (size_t)kMP * I * 4
                                      : (size_t)olp::kSlots * olp::kSlotBytes + (size_t)T * D * 2 + 2 * (size_t)N * (I + 8) * 2 +
                                            (size_t)nrl_max * N * 16 * 4 + (size_t)nrl_max * N * (I / 128) * 4;
      auto moe_args = [&](int c) {
        const Args& g = args[c];
        smallm::MoeArgs m{};
        m.x = reinterpret_cast<const uint16_t*>(g.x);
        m.w13 = g.w13, m.w2 = g.w2, m.s13 = g.s13, m.s2 = g.s2, m.topk_w = g.tw, m.topk_ids = g.ids;
        m.out = reinterpret_cast<uint16_t*>(g.out), m.h = g.h, m.y = g.y;
        m.T = g.T, m.K = g.K, m.E = g.E, m.D = g.D, m.I = g.I, m.Iw = g.I, m.nblocks = SM, m.out_scale = 1.0f;
        return m;
      };
      auto launch_st = [&](int c, unsigned long long* stp) {
        if (kind == 'A') {
          Args x = args[c];
          x.stamps = stp;
          grouped_kernel<<<SM, kT, smem, st>>>(x);
        } else {
          olp::onelaunch_kernel<<<SM, kT, smem, st>>>(moe_args(c), cnt + 3072 - 8, stp, mode, loader, xfirst);
        }
      };
      auto launch = [&](int c) { launch_st(c, nullptr); };
      // correctness: poisoned out, two calls (bitwise equal), against the fp64 reference
      for (int c = 0; c < copies; ++c) {
        const Args& a = args[c];
        std::vector<uint16_t> o1((size_t)T * D), o2((size_t)T * D);
        CK(cudaMemsetAsync(a.out, 0xff, (size_t)T * D * 2, st));
        launch(c);
        CK(cudaMemcpyAsync(o1.data(), a.out, o1.size() * 2, cudaMemcpyDeviceToHost, st));
        CK(cudaMemsetAsync(a.out, 0xff, (size_t)T * D * 2, st));
        launch(c);
        CK(cudaMemcpyAsync(o2.data(), a.out, o2.size() * 2, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        float *rh, *ro;
        CK(cudaMalloc(&rh, (size_t)N * I * 4));
        CK(cudaMalloc(&ro, (size_t)T * D * 4));
        ref_h<<<(N * I + 127) / 128, 128, 0, st>>>(a, rh);
        ref_out<<<(T * D + 127) / 128, 128, 0, st>>>(a, rh, ro);
        std::vector<float> ref((size_t)T * D);
        CK(cudaMemcpyAsync(ref.data(), ro, ref.size() * 4, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        double num = 0, den = 0;
        bool same = memcmp(o1.data(), o2.data(), o1.size() * 2) == 0, nan = false;
        for (auto& r : ref) r = __bfloat162float(__float2bfloat16(r));  // out is bf16: so is the reference (as selftest)
        for (size_t i = 0; i < ref.size(); ++i) {
          uint32_t bits = (uint32_t)o1[i] << 16;
          float v;
          memcpy(&v, &bits, 4);
          if (!std::isfinite(v)) nan = true;
          num += (double)(v - ref[i]) * (v - ref[i]);
          den += (double)ref[i] * ref[i];
        }
        double err = nan ? 1e9 : std::sqrt(num / den);
        if (!same) err = 2e9;
        err_worst = std::max(err_worst, err);
        CK(cudaFree(rh));
        CK(cudaFree(ro));
      }
      // timing: one graph of the copies' calls, median of rounds of 20 replays
      auto time_graph = [&](auto body) { return graph_us_per_call(st, copies, body); };
      const float us = time_graph([&] {
        for (int c = 0; c < copies; ++c) launch(c);
      });
      float fl = 1e9f;
      for (int chunks : {8, 16, 32, 64, 128})
        fl = std::min(fl, time_graph([&] {
               for (int c = 0; c < copies; ++c) floor_kernel<<<nus[c] * chunks, 256, 0, st>>>(flat[c], dus[c], eb, chunks, sink);
             }));
      CK(cudaGetLastError());
      {  // one stamped call (copy 7, after copies 0-6: its weights not in L2): per point, the median and
         // the last block, us after the first block's entry
        for (int c = 0; c < copies; ++c) {
          CK(cudaMemsetAsync(stamps, 0, 1024 * kStamps * 8, st));
          launch_st(c, c == copies - 1 ? stamps : nullptr);
        }
        std::vector<unsigned long long> hs(SM * kStamps);
        CK(cudaMemcpyAsync(hs.data(), stamps, SM * kStamps * 8, cudaMemcpyDeviceToHost, st));
        CK(cudaStreamSynchronize(st));
        unsigned long long t0 = ~0ull;
        for (int bb = 0; bb < SM; ++bb)
          if (hs[bb * kStamps]) t0 = std::min(t0, hs[bb * kStamps]);
        printf("  %c stamps T=%d I=%d (median / last, us): ", kind, T, I);
        const char* names[kStamps] = {"entry", "routed", "setup", "item0", "h_done", "h_ready", "items", "exit",
                                      "issued", "x_in", "x_max"};
        for (int i = 0; i < kStamps; ++i) {
          std::vector<double> v;
          for (int bb = 0; bb < SM; ++bb)
            if (hs[bb * kStamps + i]) v.push_back((hs[bb * kStamps + i] - t0) / 1000.0);
          if (v.empty()) continue;
          std::sort(v.begin(), v.end());
          printf("%s %.2f/%.2f  ", names[i], v[v.size() / 2], v.back());
        }
        printf("\n");
      }
      double mb = 0;
      for (int c = 0; c < copies; ++c) mb += nus[c] * eb / 1e6 / copies;
      printf("%c %-5s %3d %4d %9.1f %9.1f %8.2fx %7.1f %10.2e%s\n", kind, I == 256 ? "TP4" : "TP8", T, nus[0], us, fl, us / fl, mb,
             err_worst, err_worst <= 1e-3 ? "" : "  FAIL");
      }
      for (int c = 0; c < copies; ++c) {
        const Args& a = args[c];
        cudaFree((void*)a.ids), cudaFree((void*)a.tw), cudaFree((void*)a.x), cudaFree(a.out), cudaFree(a.h), cudaFree(a.y);
        cudaFree(dus[c]);
      }
    }
    for (int c = 0; c < copies; ++c) {
      cudaFree(cp[c].w13), cudaFree(cp[c].w2), cudaFree(cp[c].s13), cudaFree(cp[c].s2), cudaFree(flat[c]);
    }
  }
  return 0;
}
