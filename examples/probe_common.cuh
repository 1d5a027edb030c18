// probe_common.cuh: what the standalone probes (grouped/grouped_probe.cu, wgmma/wgmma_gateup_probe.cu)
// share: CK, the CUDA error check that stops the probe, and the bench's timing discipline.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                    \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

// One CUDA graph of a body that makes `calls` calls (the weight copies in turn, so that no copy's
// weights stay in L2), 3 warm-up replays, then the median of 5 rounds of 20 replays: us per call.

template <class Body>
float graph_us_per_call(cudaStream_t st, int calls, Body body) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  body();
  CK(cudaStreamEndCapture(st, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(exec, st));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> rounds;
  for (int round = 0; round < 5; ++round) {
    CK(cudaEventRecord(e0, st));
    for (int i = 0; i < 20; ++i) CK(cudaGraphLaunch(exec, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    rounds.push_back(ms * 1000.0f / (20 * calls));
  }
  std::sort(rounds.begin(), rounds.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return rounds[rounds.size() / 2];
}
