// barrier_floor.cu: what a one-launch small-M MoE could reach at few tokens, measured without arithmetic.
// The package's two kernels (gate/up, then the down as its programmatic dependent) cannot beat the bench's
// "dependent" floor (W13 read, then W2 read in a second launch that waits for the first) but for what their
// first launch gains as a programmatic dependent (measured here too): at Qwen3.5 TP8 1 token that floor
// alone is 1.34x the one-launch floor (examples/results "h200-s37"). A one-launch MoE
// would have every block hold its share of W2 on chip while the gate/up's h is completed elsewhere, meet
// the others at a grid-wide barrier, and read every pair's h. This probe times those bytes and waits
// alone, with the bench's graph discipline (probe_common.cuh: 8 weight copies rotated in one CUDA graph),
// Qwen3.5 shapes (D 4096, E 513, 10 random + 1 shared expert per token, FP8 bytes with the 128x128 scales):
//   floor        one launch reading every touched expert's W13 and W2 bytes (best of five chunkings)
//   persist      n blocks resident on every SM (a grid of n x SMs: one block of 1024 threads, or 2, 4 or the
//                occupancy limit of 256 threads), each streaming a byte-balanced
//                share of the W13 bytes, then of the W2 bytes; no barrier
//   +barrier     the same, then h (T K I fp32, each block writing its share) exchanged through a grid-wide
//                barrier (one counter and a generation word, reset by the last block: graph replays need no
//                memset), every block reading all of h after it: W2 on chip across the dependency
//   W2 after     W13, the barrier and h, then W2: a one-launch design that does not hold W2 on chip
// and (printed last) the launch forms of the floor with programmatic dependent launch (PDL) wherever the
// package's kernels have it: the one-launch floor as a programmatic dependent of the call before it; W13, then W2
// in a second launch that waits for the first (the bench's "dependent" floor: the first launch
// stream-ordered); the same with the first launch also a programmatic dependent of the call before (as
// the package's gate/up is, waiting at its entry): the dependent floor with every launch advantage the
// package's two kernels have. Then (printed last, "h200-s38" run 1) the co-resident form: two launches of one
// block a SM each (256 or 512 threads, at most half the SM's registers), the second, a programmatic
// dependent, reading its share of W2 at once beside the first and waiting (griddepcontrol.wait) only
// before it reads h (co_w13, co_w2 below).
// Build and run: nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 -I examples
// examples/floorprobe/barrier_floor.cu -o /tmp/bf && /tmp/bf [tokens, default 1,2,4,8] (h200-s37 runs 3 and 5:
// 1,2,4,8,16; h200-s38 run 1: 1,2,3,4,8)
#include "probe_common.cuh"

#include <random>
#include <set>
#include <string>

namespace {

constexpr int kD = 4096, kE = 513, kShared = 512, kRouted = 10, kK = 11, kCopies = 8;

// The block's byte-balanced share of the touched experts' `bytes` each (vectors [n b / G, n (b + 1) / G) of
// their concatenation), four 16-byte loads in flight per thread, folded into acc.
template <int kThreads>
__device__ __forceinline__ void stream_share(const uint8_t* w, long bytes, const int* experts, int nu, uint32_t& acc) {
  const unsigned per = (unsigned)(bytes / 16), n = per * (unsigned)nu;
  const unsigned lo = (unsigned)((unsigned long long)n * blockIdx.x / gridDim.x);
  const unsigned hi = (unsigned)((unsigned long long)n * (blockIdx.x + 1) / gridDim.x);
  auto at = [&](unsigned v) {
    const unsigned e = v / per;
    return reinterpret_cast<const uint4*>(w + (long)experts[e] * bytes) + (v - e * per);
  };
  unsigned v = lo + threadIdx.x;
  for (; v + 3 * kThreads < hi; v += 4 * kThreads) {
    const uint4 r0 = __ldcs(at(v)), r1 = __ldcs(at(v + kThreads)), r2 = __ldcs(at(v + 2 * kThreads)),
                r3 = __ldcs(at(v + 3 * kThreads));
    acc ^= r0.x ^ r1.y ^ r2.z ^ r3.w ^ r0.w ^ r1.x ^ r2.y ^ r3.z;
  }
  for (; v < hi; v += kThreads) acc ^= __ldcs(at(v)).x;
}

// The floor kernel of the PDL forms: grid (chunks, nu) per matrix read (which: 0 W13 and W2, 1 W13, 2 W2);
// lets the next launch start at its entry, waits for the grid before it (a no-op unless launched as a
// programmatic dependent) before its first weight load.
__global__ void __launch_bounds__(256) dep_floor(const uint8_t* w13, long b13, const uint8_t* w2, long b2,
                                                 const int* experts, int nu, int chunks, int which, unsigned* sink) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int per_m = nu * chunks, m = which == 0 ? (int)blockIdx.x / per_m : which - 1, b = (int)blockIdx.x % per_m;
  const int c = b % chunks;
  const long eb = m ? b2 : b13;
  const uint4* base = reinterpret_cast<const uint4*>((m ? w2 : w13) + (long)experts[b / chunks] * eb);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (read_chunk(base, eb / 16, chunks, c) == 0x2545f491u) atomicAdd(sink, 1u);
}

// kernel(args...) on `grid` blocks of `threads`, a programmatic dependent of the launch before where `pdl`.
template <class... Params, class... Args>
void launch_ex(cudaStream_t st, bool pdl, int grid, int threads, void (*kernel)(Params...), Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

void launch_dep_floor(cudaStream_t st, bool pdl, int grid, const uint8_t* w13, long b13, const uint8_t* w2, long b2,
                      const int* experts, int nu, int chunks, int which, unsigned* sink) {
  launch_ex(st, pdl, grid, 256, dep_floor, w13, b13, w2, b2, experts, nu, chunks, which, sink);
}

// The co-resident form: two launches of one block per SM each, each block at most half the SM's registers,
// so that the second launch's blocks run beside the first's from the start.
//   co_w13  (stream-ordered after the call before: a programmatic dependent there would let the next call's
//           W2 reads start in this call's tail) lets the next launch start at once, streams its byte-balanced share of W13, writes its share of
//           h, and counts its block done (`done`, never reset);
//   co_w2   (its programmatic dependent) streams its share of W2 at once, held on chip (folded into
//           registers, as in persist_floor), then waits for the W13 grid (griddepcontrol.wait) and reads
//           all of h. `early` counts its blocks that found fewer W13 blocks done at their entry than after
//           the wait: blocks that did run beside the W13 launch.
template <int kThreads>
__global__ void __launch_bounds__(kThreads, 2) co_w13(const uint8_t* w13, long b13, const int* experts, int nu,
                                                      float* h, int hfloats, unsigned* done, unsigned* sink) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  uint32_t acc = 0;
  stream_share<kThreads>(w13, b13, experts, nu, acc);
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < hfloats; i += gridDim.x * kThreads) h[i] = (float)(acc & 0xffu);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(done, 1u);
  if (acc == 0x2545f491u) atomicAdd(sink, 1u);
}
template <int kThreads>
__global__ void __launch_bounds__(kThreads, 2) co_w2(const uint8_t* w2, long b2, const int* experts, int nu,
                                                     const float* h, int hfloats, unsigned* done, unsigned* early,
                                                     unsigned* sink) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const unsigned at_entry = threadIdx.x == 0 ? *reinterpret_cast<volatile unsigned*>(done) : 0u;
  uint32_t acc = 0;
  stream_share<kThreads>(w2, b2, experts, nu, acc);
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && *reinterpret_cast<volatile unsigned*>(done) != at_entry) atomicAdd(early, 1u);
  const float4* h4 = reinterpret_cast<const float4*>(h);
  for (int i = threadIdx.x; i < hfloats / 4; i += kThreads) acc ^= __float_as_uint(__ldcg(h4 + i).y);
  if (acc == 0x2545f491u) atomicAdd(sink, 1u);
}

// One call of the co-resident form: co_w13 stream-ordered, co_w2 its programmatic dependent, G blocks each.
template <int kThreads>
void launch_coresident(cudaStream_t st, int G, const uint8_t* w13, long b13, const uint8_t* w2, long b2,
                       const int* experts, int nu, float* h, int hfloats, unsigned* done, unsigned* early,
                       unsigned* sink) {
  launch_ex(st, false, G, kThreads, co_w13<kThreads>, w13, b13, experts, nu, h, hfloats, done, sink);
  launch_ex(st, true, G, kThreads, co_w2<kThreads>, w2, b2, experts, nu, (const float*)h, hfloats, done, early, sink);
}

// mode 0: no barrier; 1: W2 before the barrier and h; 2: W2 after them
template <int kThreads>
__global__ void __launch_bounds__(kThreads) persist_floor(const uint8_t* w13, long b13, const uint8_t* w2, long b2,
                                                          const int* experts, int nu, int mode, unsigned* bar,
                                                          unsigned* gen, float* h, int hfloats, unsigned* sink) {
  const int G = gridDim.x, t = threadIdx.x;
  // the generation before this block arrives (it cannot advance until every block has)
  const unsigned my = t == 0 ? *reinterpret_cast<volatile unsigned*>(gen) : 0u;
  uint32_t acc = 0;
  stream_share<kThreads>(w13, b13, experts, nu, acc);
  if (mode != 2) stream_share<kThreads>(w2, b2, experts, nu, acc);
  if (mode != 0) {
    for (int i = blockIdx.x * kThreads + t; i < hfloats; i += G * kThreads) h[i] = (float)(acc & 0xffu);
    __syncthreads();
    if (t == 0) {
      __threadfence();
      if (atomicAdd(bar, 1u) == (unsigned)G - 1) {
        atomicExch(bar, 0u);
        __threadfence();
        atomicAdd(gen, 1u);
      } else {
        while (*reinterpret_cast<volatile unsigned*>(gen) == my) {
        }
      }
      __threadfence();
    }
    __syncthreads();
    const float4* h4 = reinterpret_cast<const float4*>(h);
    for (int i = t; i < hfloats / 4; i += kThreads) acc ^= __float_as_uint(__ldcg(h4 + i).y);
    if (mode == 2) stream_share<kThreads>(w2, b2, experts, nu, acc);
  }
  if (acc == 0x2545f491u) atomicAdd(sink, 1u);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<int> tokens = token_counts(argc, argv, {1, 2, 4, 8});
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int max_per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&max_per_sm, persist_floor<256>, 256, 0));
  const std::vector<int> per_sms = {1, 2, 4, max_per_sm};  // 1: one block of 1024 threads, else blocks of 256
  printf("barrier_floor on %s: %d SMs, persistent grids of one 1024-thread block and 2, 4 and %d 256-thread blocks per SM\n",
         prop.name, prop.multiProcessorCount, max_per_sm);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  unsigned *sink, *bar, *gen;
  CK(cudaMalloc(&sink, 4));
  CK(cudaMalloc(&bar, 4));
  CK(cudaMalloc(&gen, 4));
  CK(cudaMemset(bar, 0, 4));
  CK(cudaMemset(gen, 0, 4));
  unsigned *done, *early;
  CK(cudaMalloc(&done, 4));
  CK(cudaMalloc(&early, 4));
  CK(cudaMemset(done, 0, 4));
  std::string coresident = "| I | T | floor | W13 then W2, the second PDL | co-resident 256 | / floor | co-resident 512 | / floor | W2 blocks early (256 / 512) |\n"
                           "|---|---|---|---|---|---|---|---|---|\n";
  std::string launch_forms = "| I | T | floor | floor, PDL | W13 then W2, the second PDL | both PDL | both PDL / floor |\n"
                             "|---|---|---|---|---|---|---|\n";
  printf("| I | T | distinct | MB | floor | 1.25x floor | blocks per SM | persist | +barrier | W2 after | +barrier / floor | W2 after / floor |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int I : {256, 128}) {
    const long b13 = 2L * I * kD + 4L * (2 * I / 128) * (kD / 128), b2 = (long)kD * I + 4L * (kD / 128) * (I / 128);
    std::vector<uint8_t*> w13(kCopies), w2(kCopies);
    for (int c = 0; c < kCopies; ++c) {
      CK(cudaMalloc(&w13[c], kE * b13));
      CK(cudaMalloc(&w2[c], kE * b2));
      CK(cudaMemset(w13[c], 0x5a + c, kE * b13));
      CK(cudaMemset(w2[c], 0xa5 - c, kE * b2));
    }
    for (int T : tokens) {
      std::mt19937 rng(1000 * I + T);
      std::vector<int*> ids(kCopies);
      std::vector<int> nus(kCopies);
      double nd = 0;
      for (int c = 0; c < kCopies; ++c) {
        std::set<int> s = {kShared};
        for (int t = 0; t < T; ++t) {
          std::vector<int> pool(kShared);
          for (int e = 0; e < kShared; ++e) pool[e] = e;
          std::shuffle(pool.begin(), pool.end(), rng);
          s.insert(pool.begin(), pool.begin() + kRouted);
        }
        std::vector<int> v(s.begin(), s.end());
        nus[c] = (int)v.size();
        nd += v.size() / (double)kCopies;
        CK(cudaMalloc(&ids[c], v.size() * 4));
        CK(cudaMemcpy(ids[c], v.data(), v.size() * 4, cudaMemcpyHostToDevice));
      }
      const int hfloats = T * kK * I;
      float* h;
      CK(cudaMalloc(&h, (size_t)hfloats * 4));
      float floor = 1e30f, form[3] = {1e30f, 1e30f, 1e30f};
      for (int chunks : {8, 16, 32, 64, 128}) {
        floor = std::min(floor, graph_us_per_call(st, kCopies, [&] {
          for (int c = 0; c < kCopies; ++c)
            read_floor<<<nus[c] * chunks * 2, 256, 0, st>>>(w13[c], b13, w2[c], b2, ids[c], nus[c], chunks, sink);
        }));
        // 0: one launch, PDL; 1: W13 stream-ordered, W2 PDL; 2: both PDL
        for (int f = 0; f < 3; ++f) {
          form[f] = std::min(form[f], graph_us_per_call(st, kCopies, [&] {
            for (int c = 0; c < kCopies; ++c) {
              const int g = nus[c] * chunks;
              if (f == 0) {
                launch_dep_floor(st, true, 2 * g, w13[c], b13, w2[c], b2, ids[c], nus[c], chunks, 0, sink);
              } else {
                launch_dep_floor(st, f == 2, g, w13[c], b13, w2[c], b2, ids[c], nus[c], chunks, 1, sink);
                launch_dep_floor(st, true, g, w13[c], b13, w2[c], b2, ids[c], nus[c], chunks, 2, sink);
              }
            }
          }));
        }
      }
      char line[256];
      snprintf(line, sizeof line, "| %d | %d | %.1f | %.1f | %.1f | %.1f | %.2fx |\n", I, T, floor, form[0], form[1],
               form[2], form[2] / floor);
      launch_forms += line;
      // the co-resident form at 256 and 512 threads per block; early over every W2 block of every replay
      float co[2];
      double early_frac[2];
      for (int k = 0; k < 2; ++k) {
        const int G = prop.multiProcessorCount;
        CK(cudaMemset(early, 0, 4));
        co[k] = graph_us_per_call(st, kCopies, [&] {
          for (int c = 0; c < kCopies; ++c)
            (k ? launch_coresident<512> : launch_coresident<256>)(st, G, w13[c], b13, w2[c], b2, ids[c], nus[c], h,
                                                                   hfloats, done, early, sink);
        });
        unsigned e = 0;
        CK(cudaMemcpy(&e, early, 4, cudaMemcpyDeviceToHost));
        early_frac[k] = e / ((double)kGraphReplays * kCopies * G);
      }
      snprintf(line, sizeof line, "| %d | %d | %.1f | %.1f | %.1f | %.2fx | %.1f | %.2fx | %.0f%% / %.0f%% |\n", I, T,
               floor, form[1], co[0], co[0] / floor, co[1], co[1] / floor, 100 * early_frac[0], 100 * early_frac[1]);
      coresident += line;
      for (int per_sm : per_sms) {
        const int G = prop.multiProcessorCount * per_sm;
        float us[3];
        for (int mode = 0; mode < 3; ++mode) {
          us[mode] = graph_us_per_call(st, kCopies, [&] {
            for (int c = 0; c < kCopies; ++c) {
              if (per_sm == 1)
                persist_floor<1024><<<G, 1024, 0, st>>>(w13[c], b13, w2[c], b2, ids[c], nus[c], mode, bar, gen, h,
                                                         hfloats, sink);
              else
                persist_floor<256><<<G, 256, 0, st>>>(w13[c], b13, w2[c], b2, ids[c], nus[c], mode, bar, gen, h,
                                                       hfloats, sink);
            }
          });
        }
        CK(cudaStreamSynchronize(st));
        printf("| %d | %d | %.1f | %.1f | %.1f | %.1f | %d | %.1f | %.1f | %.1f | %.2fx | %.2fx |\n", I, T, nd,
               nd * (b13 + b2) / 1e6, floor, 1.25f * floor, per_sm, us[0], us[1], us[2], us[1] / floor, us[2] / floor);
        fflush(stdout);
      }
      for (int c = 0; c < kCopies; ++c) CK(cudaFree(ids[c]));
      CK(cudaFree(h));
    }
    for (int c = 0; c < kCopies; ++c) {
      CK(cudaFree(w13[c]));
      CK(cudaFree(w2[c]));
    }
  }
  printf("\nThe floor's launch forms (µs; PDL: a programmatic dependent launch, waiting for the grid before it):\n%s",
         launch_forms.c_str());
  printf("\nThe co-resident form (µs; one block per SM in each launch, W2 read before the wait; early: the share of W2\n"
         "blocks that started before the W13 launch had finished):\n%s", coresident.c_str());
  return 0;
}
