// smallm_timeline.h: per-block phase timestamps for the timeline harness (examples/timeline/),
// compiled in only with -DSMALLM_TIMELINE on CUDA; every mark is empty otherwise (the package never
// defines it). Thread 0 of block b stores clock64() at mark m of kernel k (0: gate/up,
// 1: down) and %globaltimer at its kernel's entry and exit, so the
// harness can place every block's phases on one time axis.
#pragma once

#if defined(SMALLM_TIMELINE) && !defined(SMALLM_HIP)
namespace smallm {
constexpr int kTlBlocks = 1024, kTlMarks = 16;
enum TimelineMark : int {
  kTlEntry = 0, kTlRouting = 1, kTlReady = 2, kTlJob0 = 3,  // gate/up: jobs 0..5 end at marks 3..8
  kTlDownIssued = 9, kTlHReady = 10, kTlHStaged = 11, kTlDownJobs = 12, kTlExit = 13,
  kTlJob0Data = 14, kTlJob0Mma = 15,  // tensor-core down: thread 0's first job's W2 arrived; warp 0's first job computed
};
__device__ unsigned long long g_tl_clock[2][kTlBlocks][kTlMarks];
__device__ unsigned long long g_tl_global[2][kTlBlocks][2];  // entry, exit
__device__ int g_tl_smid[2][kTlBlocks];

__device__ __forceinline__ unsigned long long tl_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void tl_mark(int k, int m) {
  if (threadIdx.x == 0 && blockIdx.x < kTlBlocks && m < kTlMarks) g_tl_clock[k][blockIdx.x][m] = clock64();
}
__device__ __forceinline__ void tl_entry(int k) {
  if (threadIdx.x == 0 && blockIdx.x < kTlBlocks) {
    unsigned smid;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    g_tl_smid[k][blockIdx.x] = (int)smid;
    g_tl_global[k][blockIdx.x][0] = tl_globaltimer();
    g_tl_clock[k][blockIdx.x][kTlEntry] = clock64();
  }
}
__device__ __forceinline__ void tl_exit(int k) {
  if (threadIdx.x == 0 && blockIdx.x < kTlBlocks) {
    g_tl_clock[k][blockIdx.x][kTlExit] = clock64();
    g_tl_global[k][blockIdx.x][1] = tl_globaltimer();
  }
}
}  // namespace smallm
#define SMALLM_TL_ENTRY(k) ::smallm::tl_entry(k)
#define SMALLM_TL_MARK(k, m) ::smallm::tl_mark((k), (m))
#define SMALLM_TL_EXIT(k) ::smallm::tl_exit(k)
#else
#define SMALLM_TL_ENTRY(k) ((void)0)
#define SMALLM_TL_MARK(k, m) ((void)0)
#define SMALLM_TL_EXIT(k) ((void)0)
#endif
