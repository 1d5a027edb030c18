// xstage.cu: how long every block of a launch takes to get the same x (T tokens x D bf16) from L2
// into its shared memory, by the copy forms an sm_90 kernel can use. A diagnostic for the
// tensor-core gate/up's prologue: every block stages all of x, so at 8 tokens (TP4) 264 blocks read
// the same 64 KB (17 MB from L2), and the timeline shows the staging growing with the bytes of all
// blocks together: 0.85 / 1.41 / 2.61 / 5.18 us after the routing at 1 / 2 / 4 / 8 tokens
// (examples/results "h200-ab11").
//
// Forms (each block copies `bytes`; thread 0 stamps %globaltimer at entry and once the data is in
// shared memory and the block has passed a barrier):
//   0 async    16-byte cp.async per thread, all blocks from the same source (the kernels' form)
//   1 distinct the same, each block from its own copy of the bytes (no two blocks share a line)
//   2 bulk     one cp.async.bulk per 32 KB by thread 0, completion on a transaction barrier
//   3 mc2      clusters of 2: CTA r copies slice r by cp.async.bulk ... .multicast::cluster to both
//   4 mc4      the same with clusters of 4
// Printed per form: the median over blocks of (done - entry), and the span from the first block's
// entry to the last block's done, each the median over the launches.
// Usage: xstage [iters]; build: nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -O3 examples/xstage/xstage.cu -o xstage
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(1); } } while (0)

namespace cg = cooperative_groups;
constexpr int kThreads = 256;

__device__ __forceinline__ unsigned long long gtime() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned saddr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(saddr(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void bar_arm(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(saddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* bar) {
  asm volatile(
      "{\n.reg .pred done;\nXS_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
      "@!done bra XS_WAIT;\n}\n" ::"r"(saddr(bar))
      : "memory");
}
__device__ __forceinline__ void bulk(void* dst, const void* src, unsigned n, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(saddr(dst)), "l"(src), "r"(n), "r"(saddr(bar)) : "memory");
}
__device__ __forceinline__ void bulk_mc(void* dst, const void* src, unsigned n, uint64_t* bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;"
      ::"r"(saddr(dst)), "l"(src), "r"(n), "r"(saddr(bar)), "h"(mask) : "memory");
}

template <int Form>
__global__ void __launch_bounds__(kThreads) stage(const uint8_t* x, unsigned bytes, unsigned long long* stamps, unsigned* sink) {
  extern __shared__ __attribute__((aligned(128))) uint8_t xs[];
  __shared__ __attribute__((aligned(8))) uint64_t bar;
  const unsigned long long t0 = gtime();
  if constexpr (Form <= 1) {
    const uint8_t* src = x + (Form == 1 ? (size_t)blockIdx.x * bytes : 0);
    for (unsigned i = 16 * threadIdx.x; i < bytes; i += 16 * kThreads)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr(xs + i)), "l"(src + i) : "memory");
    asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
    __syncthreads();
  } else if constexpr (Form == 2) {
    if (threadIdx.x == 0) bar_init(&bar);
    __syncthreads();
    if (threadIdx.x == 0) {
      bar_arm(&bar, bytes);
      for (unsigned o = 0; o < bytes; o += 32768) bulk(xs + o, x + o, (bytes - o < 32768u ? bytes - o : 32768u), &bar);
    }
    bar_wait(&bar);
    __syncthreads();
  } else {
    constexpr unsigned n = Form == 3 ? 2 : 4;
    cg::cluster_group cl = cg::this_cluster();
    const unsigned r = cl.block_rank();
    if (threadIdx.x == 0) bar_init(&bar);
    cl.sync();  // every CTA's barrier is initialised before any copy can signal it
    if (threadIdx.x == 0) {
      bar_arm(&bar, bytes);  // this CTA receives all n slices
      const unsigned slice = bytes / n;
      for (unsigned o = 0; o < slice; o += 32768)
        bulk_mc(xs + r * slice + o, x + r * slice + o, (slice - o < 32768u ? slice - o : 32768u), &bar, (uint16_t)((1u << n) - 1));
    }
    bar_wait(&bar);
    __syncthreads();
  }
  const unsigned long long t1 = gtime();
  if (threadIdx.x == 0) {
    stamps[2 * blockIdx.x] = t0;
    stamps[2 * blockIdx.x + 1] = t1;
  }
  // keep the data live: one word per block
  if (threadIdx.x == 0 && reinterpret_cast<const unsigned*>(xs)[blockIdx.x % (bytes / 4)] == 0x9e3779b9u) atomicAdd(sink, 1u);
  if constexpr (Form >= 3) cg::this_cluster().sync();  // no CTA leaves while a peer may still write into it
}

struct Result { double med_block, span; };

template <int Form>
Result run(const uint8_t* x, unsigned bytes, int blocks, int iters, unsigned long long* d_st, unsigned* sink) {
  auto k = stage<Form>;
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = bytes;
  cudaLaunchAttribute at[1];
  if (Form >= 3) {
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = Form == 3 ? 2 : 4;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
  }
  std::vector<double> meds, spans;
  std::vector<unsigned long long> st(2 * blocks);
  for (int it = 0; it < iters + 2; ++it) {
    CK(cudaLaunchKernelEx(&cfg, k, x, bytes, d_st, sink));
    CK(cudaDeviceSynchronize());
    if (it < 2) continue;  // warm: the source in L2, the code loaded
    CK(cudaMemcpy(st.data(), d_st, st.size() * 8, cudaMemcpyDeviceToHost));
    unsigned long long first = ~0ull, last = 0;
    std::vector<double> d(blocks);
    for (int b = 0; b < blocks; ++b) {
      first = std::min(first, st[2 * b]);
      last = std::max(last, st[2 * b + 1]);
      d[b] = (double)(st[2 * b + 1] - st[2 * b]);
    }
    std::nth_element(d.begin(), d.begin() + blocks / 2, d.end());
    meds.push_back(d[blocks / 2] / 1e3);
    spans.push_back((double)(last - first) / 1e3);
  }
  std::sort(meds.begin(), meds.end());
  std::sort(spans.begin(), spans.end());
  return {meds[meds.size() / 2], spans[spans.size() / 2]};
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 30;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int D = 4096;
  const int maxBlocks = 2 * sms + 8;
  uint8_t* x;
  const size_t maxBytes = (size_t)16 * D * 2;
  CK(cudaMalloc(&x, maxBytes * maxBlocks));  // form 1 reads blocks x bytes
  CK(cudaMemset(x, 1, maxBytes * maxBlocks));
  unsigned long long* d_st;
  unsigned* sink;
  CK(cudaMalloc(&d_st, 2 * 8 * maxBlocks));
  CK(cudaMalloc(&sink, 4));
  printf("x staging into shared memory, D=%d bf16, %d SMs; us: median block (entry -> data in) / span (first entry -> last done)\n", D, sms);
  printf("%-4s %-7s %-7s %16s %16s %16s %16s %16s\n", "T", "KB", "blocks", "async", "distinct", "bulk", "mc2", "mc4");
  struct Case { int T, blocksPerSm; };
  const Case cases[] = {{1, 2}, {2, 2}, {4, 2}, {8, 2}, {12, 1}, {16, 1}};
  for (const Case& c : cases) {
    const unsigned bytes = (unsigned)c.T * D * 2;
    int blocks = c.blocksPerSm * sms;
    blocks -= blocks % 4;  // clusters of up to 4
    Result r[5] = {run<0>(x, bytes, blocks, iters, d_st, sink), run<1>(x, bytes, blocks, iters, d_st, sink),
                   run<2>(x, bytes, blocks, iters, d_st, sink), run<3>(x, bytes, blocks, iters, d_st, sink),
                   run<4>(x, bytes, blocks, iters, d_st, sink)};
    printf("%-4d %-7u %-7d", c.T, bytes / 1024, blocks);
    for (const Result& q : r) printf("    %5.2f / %5.2f", q.med_block, q.span);
    printf("\n");
  }
  return 0;
}
