// probe_common.cuh: what the standalone probes (grouped/grouped_probe.cu, wgmma/wgmma_gateup_probe.cu,
// wgmma/mxfp4_tma_probe.cu) share: CK, the CUDA error check that stops the probe, the bench's timing
// discipline, the wgmma probes' byte hash and read floor.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                    \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

// The token counts a probe runs: argv[1] as a comma-separated list where given, else `fallback`.
inline std::vector<int> token_counts(int argc, char** argv, std::vector<int> fallback) {
  if (argc <= 1) return fallback;
  std::vector<int> toks;
  for (char* s = strtok(argv[1], ","); s; s = strtok(nullptr, ",")) toks.push_back(atoi(s));
  return toks;
}

// One CUDA graph of a body that makes `calls` calls (the weight copies in turn, so that no copy's
// weights stay in L2), 3 warm-up replays, then the median of 5 rounds of 20 replays: us per call.
constexpr int kWarmupReplays = 3, kRounds = 5, kRoundReplays = 20;
constexpr int kGraphReplays = kWarmupReplays + kRounds * kRoundReplays;  // replays of the body per call

template <class Body>
float graph_us_per_call(cudaStream_t st, int calls, Body body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  body();
  CK(cudaStreamEndCapture(st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < kWarmupReplays; ++i) CK(cudaGraphLaunch(exec, st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> rounds;
  for (int round = 0; round < kRounds; ++round) {
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < kRoundReplays; ++i) CK(cudaGraphLaunch(exec, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    rounds.push_back(ms * 1000.0f / (kRoundReplays * calls));
  }
  std::sort(rounds.begin(), rounds.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return rounds[rounds.size() / 2];
}

// Deterministic pseudo-random bits of element i for seed (the wgmma probes' weight and scale fills).
__device__ __forceinline__ uint32_t probe_hash(size_t i, uint32_t seed) {
  uint32_t v = (uint32_t)i * 0x9e3779b1u + seed * 0x85ebca6bu;
  v ^= v >> 16;
  v *= 0x7feb352du;
  v ^= v >> 15;
  return v;
}

// Chunk c of `chunks` of the n 16-byte vectors at base, read by the 256 threads of a block with 4 loads in
// flight per thread, not kept in L1, folded into the returned word.
__device__ __forceinline__ uint32_t read_chunk(const uint4* base, long n, int chunks, int c) {
  const long per = (n + chunks - 1) / chunks, end = min((long)(c + 1) * per, n);
  uint32_t acc = 0;
  long v = (long)c * per + threadIdx.x;
  for (; v + 3 * 256 < end; v += 4 * 256) {
    const uint4 r0 = __ldcs(base + v), r1 = __ldcs(base + v + 256), r2 = __ldcs(base + v + 512), r3 = __ldcs(base + v + 768);
    acc ^= r0.x ^ r1.y ^ r2.z ^ r3.w ^ r0.w ^ r1.x ^ r2.y ^ r3.z;
  }
  for (; v < end; v += 256) acc ^= __ldcs(base + v).x;
  return acc;
}

// The read floor: each listed expert's bytes13 bytes of w13 and, where bytes2 > 0, its bytes2 bytes of w2
// read once (nu experts, chunks blocks per expert and matrix: grid nu chunks, twice that with w2), 4 loads
// of 16 bytes in flight per thread, not kept in L1.
__global__ void read_floor(const uint8_t* w13, long bytes13, const uint8_t* w2, long bytes2, const int* experts, int nu,
                           int chunks, unsigned* sink) {
  const int b = blockIdx.x % (nu * chunks), m = blockIdx.x / (nu * chunks), c = b % chunks;
  const long eb = m ? bytes2 : bytes13;
  const uint4* base = reinterpret_cast<const uint4*>((m ? w2 : w13) + (long)experts[b / chunks] * eb);
  if (read_chunk(base, eb / 16, chunks, c) == 0x2545f491u) atomicAdd(sink, 1u);
}
