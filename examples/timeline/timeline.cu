// timeline.cu: where the time of one MoE call goes, block by block (a diagnostic, not a benchmark).
// Builds hip/smallm_moe.hip with -DSMALLM_TIMELINE (hip/smallm_timeline.h: thread 0 of every block
// stamps clock64() at its phases), runs the package's own launcher (smallm_moe_launch) on random
// Qwen3.5-shaped weights with fresh random routing per iteration, and prints per phase the time
// from the first block's entry (min / median / max over blocks, medians over iterations).
// Its per-call time is no stand-in for `sglang-smallm bench`: twice a change it timed 2-4 % faster
// was level or slower in the bench (examples/results "h200-s32" runs 1 and 5). Decide on the bench.
// Usage: timeline FMT(0 fp8, 1 mxfp4) T I [iters]; SMALLM_* switches as for the package.
// Build: nvcc -std=c++17 -arch=sm_90a -O3 -DSMALLM_TIMELINE -DSMALLM_BUILD_ARCH=\"sm_90a\" -Ihip examples/timeline/timeline.cu -o timeline
// (the build arch lets the launcher take the sm_90a-only TMA paths, SMALLM_GATEUP_TMA)
#include "smallm_moe.hip"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(1); } } while (0)

__global__ void fill_bytes(uint8_t* p, size_t n, unsigned seed, unsigned mask, unsigned add) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = (uint8_t)((h & mask) + add);
  }
}
__global__ void fill_f32(float* p, size_t n, float v) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = v;
}

static const char* mark_name(int m) {
  static const char* names[] = {"entry", "routing built", "x staged", "gate/up job 0 done", "gate/up job 1 done",
                                "gate/up job 2 done", "gate/up job 3 done", "gate/up job 4 done", "gate/up job 5+ done",
                                "down W2 issued", "h ready (wait)", "h staged", "down jobs done", "exit",
                                "job 0: W2 in (thread 0)", "job 0 computed (warp 0)"};
  return m < 16 ? names[m] : "?";
}

int main(int argc, char** argv) {
  using namespace smallm;
  if (argc < 4) { printf("usage: timeline FMT T I [iters]\n"); return 2; }
  const int fmt = atoi(argv[1]), T = atoi(argv[2]), I = atoi(argv[3]), iters = argc > 4 ? atoi(argv[4]) : 30;
  const int D = 4096, E = 513, K = 11;
  const size_t div = fmt == kMxfp4 ? 2 : 1;
  const size_t w13n = (size_t)E * 2 * I * D / div, w2n = (size_t)E * D * I / div;
  const size_t s13n = fmt == kMxfp4 ? (size_t)E * 2 * I * D / 32 : (size_t)E * (2 * I / 128) * (D / 128);
  const size_t s2n = fmt == kMxfp4 ? (size_t)E * D * I / 32 : (size_t)E * (D / 128) * (I / 128);
  uint8_t *w13, *w2, *s13, *s2;
  uint16_t *x, *out;
  float *h, *y, *tw;
  int* ids;
  unsigned* sync;
  CK(cudaMalloc(&w13, w13n)); CK(cudaMalloc(&w2, w2n));
  CK(cudaMalloc(&s13, s13n * 4)); CK(cudaMalloc(&s2, s2n * 4));
  CK(cudaMalloc(&x, (size_t)T * D * 2)); CK(cudaMalloc(&out, (size_t)T * D * 2));
  CK(cudaMalloc(&h, h_words(D, I) * 4)); CK(cudaMalloc(&y, (size_t)kMaxPairs * D * 4));
  CK(cudaMalloc(&tw, (size_t)T * K * 4)); CK(cudaMalloc(&ids, (size_t)T * K * 4));
  CK(cudaMalloc(&sync, (size_t)sync_words(T, D) * 4)); CK(cudaMemset(sync, 0, (size_t)sync_words(T, D) * 4));
  fill_bytes<<<1024, 256>>>(w13, w13n, 1, fmt == kMxfp4 ? 0xff : 0x77, 0);  // fp8: no NaN encodings
  fill_bytes<<<1024, 256>>>(w2, w2n, 2, fmt == kMxfp4 ? 0xff : 0x77, 0);
  if (fmt == kMxfp4) {
    fill_bytes<<<1024, 256>>>(s13, s13n, 3, 0x7, 120);  // e8m0 2^-7 .. 2^0
    fill_bytes<<<1024, 256>>>(s2, s2n, 4, 0x7, 120);
  } else {
    fill_f32<<<1024, 256>>>((float*)s13, s13n, 1e-2f);
    fill_f32<<<1024, 256>>>((float*)s2, s2n, 1e-2f);
  }
  fill_bytes<<<64, 256>>>((uint8_t*)x, (size_t)T * D * 2, 5, 0x3f, 0x1c);  // bf16 bytes: modest finite values
  fill_f32<<<1, 256>>>(tw, (size_t)T * K, 0.1f);
  CK(cudaDeviceSynchronize());
  MoeArgs a{};
  a.x = x; a.w13 = w13; a.w2 = w2; a.s13 = s13; a.s2 = s2; a.topk_w = tw; a.topk_ids = ids; a.out = out;
  a.h = h; a.y = y; a.sync = sync; a.T = T; a.K = K; a.E = E; a.D = D; a.I = I; a.Iw = I; a.out_scale = 1.0f;
  std::mt19937 rng(7);
  std::vector<int> hid((size_t)T * K);
  static unsigned long long clk[2][kTlBlocks][kTlMarks], glb[2][kTlBlocks][2], zero_clk[2][kTlBlocks][kTlMarks] = {},
      zero_glb[2][kTlBlocks][2] = {};
  std::vector<double> at[2][kTlMarks];  // per (kernel, mark): median over blocks per iteration (ns); then min, max
  std::vector<double> lo[2][kTlMarks], hi[2][kTlMarks];
  std::vector<double> count[2][kTlMarks];
  std::vector<double> event_us;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  double cyc = 0, ns = 0;
  for (int it = -3; it < iters; ++it) {
    for (int t = 0; t < T; ++t) {  // 10 distinct routed experts of 512 + the shared expert 512
      std::vector<int> pool(512);
      for (int i = 0; i < 512; ++i) pool[i] = i;
      for (int k = 0; k < K - 1; ++k) { std::swap(pool[k], pool[k + rng() % (512 - k)]); hid[t * K + k] = pool[k]; }
      hid[t * K + K - 1] = 512;
    }
    CK(cudaMemcpy(ids, hid.data(), hid.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpyToSymbol(g_tl_clock, zero_clk, sizeof(zero_clk)));
    CK(cudaMemcpyToSymbol(g_tl_global, zero_glb, sizeof(zero_glb)));
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(e0, st));
    const int rc = smallm_moe_launch(a, fmt, kRowMajor, st);
    CK(cudaEventRecord(e1, st));
    if (rc) { printf("launch failed %d\n", rc); return 1; }
    CK(cudaDeviceSynchronize());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaMemcpyFromSymbol(clk, g_tl_clock, sizeof(clk)));
    CK(cudaMemcpyFromSymbol(glb, g_tl_global, sizeof(glb)));
    if (it < 0) continue;
    event_us.push_back(ms * 1e3);
    unsigned long long origin = ~0ull;
    for (int b = 0; b < kTlBlocks; ++b)
      if (glb[0][b][0]) origin = std::min(origin, glb[0][b][0]);
    for (int k = 0; k < 2; ++k)
      for (int b = 0; b < kTlBlocks; ++b)
        if (glb[k][b][0] && glb[k][b][1] > glb[k][b][0]) {
          cyc += (double)(clk[k][b][kTlExit] - clk[k][b][kTlEntry]);
          ns += (double)(glb[k][b][1] - glb[k][b][0]);
        }
    const double f = cyc / ns;  // cycles per ns, calibrated on every block so far
    for (int k = 0; k < 2; ++k)
      for (int m = 0; m < kTlMarks; ++m) {
        std::vector<double> v;
        for (int b = 0; b < kTlBlocks; ++b)
          if (glb[k][b][0] && clk[k][b][m])
            v.push_back((double)(glb[k][b][0] - origin) + (double)(long long)(clk[k][b][m] - clk[k][b][kTlEntry]) / f);
        if (v.empty()) continue;
        std::sort(v.begin(), v.end());
        at[k][m].push_back(v[v.size() / 2]);
        lo[k][m].push_back(v.front());
        hi[k][m].push_back(v.back());
        count[k][m].push_back((double)v.size());
      }
  }
  auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v.empty() ? 0.0 : v[v.size() / 2]; };
  printf("timeline fmt=%s T=%d I=%d iters=%d  clock %.3f GHz (calibrated)  event time per call %.1f us (median, incl. launch)\n",
         fmt == kMxfp4 ? "mxfp4" : "fp8", T, I, iters, cyc / ns, med(event_us));
  printf("%-7s %-22s %7s %8s %8s %8s   (us from the first block's entry; blocks: median count)\n", "kernel", "phase",
         "blocks", "first", "median", "last");
  for (int k = 0; k < 2; ++k)
    for (int m = 0; m < kTlMarks; ++m)
      if (!at[k][m].empty())
        printf("%-7s %-22s %7.0f %8.2f %8.2f %8.2f\n", k == 0 ? "first" : "down", mark_name(m), med(count[k][m]),
               med(lo[k][m]) * 1e-3, med(at[k][m]) * 1e-3, med(hi[k][m]) * 1e-3);
  return 0;
}
