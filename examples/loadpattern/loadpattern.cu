// loadpattern.cu: how fast the gate/up kernel's weight loads can stream, by access pattern (a
// diagnostic). Every pattern reads the same bytes in the same jobs as smallm_gateup_mma_kernel: a job
// is 4 gate + 4 up rows of W13[e] over all of D (FP8: 8 x 4 KB), block b takes jobs b, b + G, ...
// with the next job's loads in flight while it "computes" this one (XOR), 2 blocks of 256 threads
// per SM, 8 16-byte loads per thread and job. Only the lane -> address mapping differs:
//   mma   lane (g, q) reads vector 4 (w + 8 j) + q of row g: one warp load = 8 rows x 64 B (the kernel)
//   line  lane l reads vector 8 (w + 8 (j / 2)) + l % 8 of row l / 8 + 4 (j % 2): 4 rows x 128 B
//   flat  thread t reads vector t + 256 (j / 2) of the job's gate (j even) or up (j odd) 16 KB: 512 B
// the cache hint: cs (ld.global.cs, the kernel's) or nc (ld.global.nc); and the depth: jobs in flight
// beyond the one consumed (1: the kernel's cur/nxt; 2: a ring of three register sets); and the
// blocks per SM (the grid: 2 per SM as the kernel, or 1 or 4).
// Usage: loadpattern [iters]; prints per (I, tokens, pattern, hint) us per call and TB/s.
// Build: nvcc -std=c++17 -arch=sm_90a -O3 examples/loadpattern/loadpattern.cu -o loadpattern
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(1); } } while (0)

constexpr int kD = 4096, kE = 513, kCopies = 8, kJ = 8;

template <int Hint>
__device__ __forceinline__ uint4 ld16(const uint8_t* p) {
  if constexpr (Hint == 0) return __ldcs(reinterpret_cast<const uint4*>(p));
  else return __ldg(reinterpret_cast<const uint4*>(p));
}

struct Loads { uint4 v[kJ]; };

template <int Pattern, int Hint, int Depth, int PerSm>
__global__ void __launch_bounds__(256, PerSm) stream_jobs(const uint8_t* w13, const int* ids, int nd, int I, unsigned* sink) {
  const int t = threadIdx.x, lane = t & 31, w = t >> 5, g = lane >> 2, q = lane & 3;
  const int tiles = I / 4, njobs = nd * tiles, G = gridDim.x;
  auto issue = [&](int job, Loads& L) {
    const int u = job / tiles, tile = job - u * tiles;
    const uint8_t* wb = w13 + (size_t)ids[u] * 2 * I * kD;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      int row, vec;
      if constexpr (Pattern == 0) {
        row = g; vec = 4 * (w + 8 * j) + q;
      } else if constexpr (Pattern == 1) {
        row = lane / 8 + 4 * (j & 1); vec = 8 * (w + 8 * (j >> 1)) + lane % 8;
      } else {
        row = 4 * (j & 1) + (t + 256 * (j >> 1)) / 256; vec = (t + 256 * (j >> 1)) % 256;
      }
      const int r = (row < 4 ? 0 : I) + 4 * tile + (row & 3);
      L.v[j] = ld16<Hint>(wb + (size_t)r * kD + 16 * vec);
    }
  };
  unsigned acc = 0;
  if constexpr (Depth == 1) {  // the kernel's run_jobs: the next job in flight, then cur = nxt
    int job = blockIdx.x;
    Loads cur, nxt;
    if (job < njobs) issue(job, cur);
    while (job < njobs) {
      const int jn = job + G;
      if (jn < njobs) issue(jn, nxt);
#pragma unroll
      for (int j = 0; j < kJ; ++j) acc ^= cur.v[j].x ^ cur.v[j].y ^ cur.v[j].z ^ cur.v[j].w;
      __syncthreads();  // the kernel's jobs end with a block reduction
      cur = nxt;
      job = jn;
    }
  } else {  // Depth jobs in flight beyond the one consumed: a ring of Depth + 1 register sets
    Loads ring[Depth + 1];
#pragma unroll
    for (int k = 0; k <= Depth; ++k)
      if ((int)blockIdx.x + G * k < njobs) issue(blockIdx.x + G * k, ring[k]);
    for (int base = blockIdx.x; base < njobs; base += G * (Depth + 1)) {
#pragma unroll
      for (int k = 0; k <= Depth; ++k) {
        const int job = base + G * k;
        if (job < njobs) {
#pragma unroll
          for (int j = 0; j < kJ; ++j) acc ^= ring[k].v[j].x ^ ring[k].v[j].y ^ ring[k].v[j].z ^ ring[k].v[j].w;
          __syncthreads();
          const int jn = job + G * (Depth + 1);
          if (jn < njobs) issue(jn, ring[k]);
        }
      }
    }
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1u);
}

template <int P, int H, int Dp, int PerSm = 2>
float run(const uint8_t* w, const std::vector<int*>& ids, int nd, int I, unsigned* sink, int iters, int sms) {
  const int G = PerSm * sms;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  for (int i = 0; i < kCopies; ++i)
    stream_jobs<P, H, Dp, PerSm><<<G, 256>>>(w + (size_t)i * kE * 2 * I * kD, ids[i], nd, I, sink);
  CK(cudaDeviceSynchronize());
  std::vector<float> ts;
  for (int it = 0; it < iters; ++it) {
    const int c = it % kCopies;
    CK(cudaEventRecord(a));
    stream_jobs<P, H, Dp, PerSm><<<G, 256>>>(w + (size_t)c * kE * 2 * I * kD, ids[c], nd, I, sink);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms * 1e3f);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 200;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned* sink;
  CK(cudaMalloc(&sink, 4));
  std::mt19937 rng(3);
  printf("%4s %6s %5s %6s %4s %5s %5s %9s %7s\n", "I", "tokens", "nd", "patt", "hint", "depth", "blk/SM", "us/call", "TB/s");
  for (int I : {256, 128}) {
    const size_t per = (size_t)kE * 2 * I * kD;
    uint8_t* w;
    CK(cudaMalloc(&w, per * kCopies));
    CK(cudaMemset(w, 1, per * kCopies));
    for (int T : {1, 2, 4, 8}) {
      std::vector<int*> ids(kCopies);
      int nd = 0;
      for (int c = 0; c < kCopies; ++c) {
        std::set<int> s{512};
        while ((int)s.size() < 1 + 10 * T && (int)s.size() < kE) s.insert((int)(rng() % 512));
        std::vector<int> h(s.begin(), s.end());
        nd = (int)h.size();
        CK(cudaMalloc(&ids[c], nd * 4));
        CK(cudaMemcpy(ids[c], h.data(), nd * 4, cudaMemcpyHostToDevice));
      }
      const double mb = (double)nd * 2 * I * kD / 1e6;
      const char* pn[] = {"mma", "line", "flat"};
      const char* hn[] = {"cs", "nc"};
      auto row = [&](int p, int h, int depth, float us, int persm = 2) {
        printf("%4d %6d %5d %6s %4s %5d %5d %9.2f %7.2f\n", I, T, nd, pn[p], hn[h], depth, persm, us, mb / us);
      };
      if (T == 1) printf("%4d  launch and event overhead (no jobs): %.2f us\n", I, run<0, 0, 1>(w, ids, 0, I, sink, iters, sms));
      row(0, 0, 1, run<0, 0, 1>(w, ids, nd, I, sink, iters, sms));
      row(0, 1, 1, run<0, 1, 1>(w, ids, nd, I, sink, iters, sms));
      row(1, 0, 1, run<1, 0, 1>(w, ids, nd, I, sink, iters, sms));
      row(2, 0, 1, run<2, 0, 1>(w, ids, nd, I, sink, iters, sms));
      row(0, 0, 2, run<0, 0, 2>(w, ids, nd, I, sink, iters, sms));
      row(1, 0, 2, run<1, 0, 2>(w, ids, nd, I, sink, iters, sms));
      row(2, 0, 1, run<2, 0, 1, 4>(w, ids, nd, I, sink, iters, sms), 4);
      row(2, 0, 1, run<2, 0, 1, 1>(w, ids, nd, I, sink, iters, sms), 1);
      for (int* p : ids) CK(cudaFree(p));
    }
    CK(cudaFree(w));
  }
  return 0;
}
