// smallm_sort.hip: instantiations of the small MoE sort and its host launcher.
// Compiled like smallm_moe.hip: hipcc (gfx950), nvcc (sm_90a, through a generated .cu), and
// clang -nogpuinc --offload-device-only for the ISA checks (SMALLM_DEVICE_ONLY).
#include "smallm_launch.h"
#include "smallm_sort.h"

#if !defined(SMALLM_DEVICE_ONLY)
#include <algorithm>
#endif

namespace smallm {
template __global__ void smallm_sort_kernel<kSortAiter, kSortCompact>(SortArgs);
template __global__ void smallm_sort_kernel<kSortAiter, kSortDistributed>(SortArgs);
template __global__ void smallm_sort_kernel<kSortTriton, kSortCompact>(SortArgs);
template __global__ void smallm_sort_kernel<kSortTriton, kSortDistributed>(SortArgs);
}  // namespace smallm

#if !defined(SMALLM_DEVICE_ONLY)

namespace {

int ceil_div(long a, long b) { return (int)((a + b - 1) / b); }

// A programmatic dependent launch on CUDA: the launch overlaps the previous kernel's tail; the kernel waits
// for it (griddepcontrol.wait) before touching memory.
template <int Fmt, int Path>
int launch_sort(const smallm::SortArgs& a, gpuStream_t stream) {
  using namespace smallm;
  return launch_kernel(smallm_sort_kernel<Fmt, Path>, a.sort_blocks + a.quant_blocks + a.zero_blocks, kSortThreads,
                       0, stream, LaunchOrder::kDependent, a);
}

}  // namespace

int smallm_sort_launch(smallm::SortArgs& a, int fmt, int path, void* stream) {
  using namespace smallm;
  const long P = (long)a.T * a.K;
  if (path == kSortCompact && P > kCompactMaxPairs) return -2;
  if (path == kSortDistributed && (P > kDistMaxPairs || sort_buckets(fmt, a.E) > kDistMaxBuckets)) return -3;
  if (a.block <= 0 || a.K <= 0 || a.K > 255) return -4;
  // Grid sizes depend on T, K, E, D only (never on routing), so the launch is graph-capturable.
  a.sort_blocks = path == kSortCompact ? 1 : ceil_div(sort_buckets(fmt, a.E), kBucketsPerOwner);
  // MXFP8 workgroups: the quantisation units (token, 32-group), or a quarter of the worst-case
  // padding-scale vectors, whichever asks for more (every planning workgroup zeroes padding rows).
  const long units = (long)a.T * a.scale_cols;
  const long worst_rows = P + std::min<long>(P, sort_buckets(fmt, a.E)) * (a.block - 1);
  const long pad_vecs = (worst_rows + 31) / 32 * a.scale_cols * 2;
  a.quant_blocks = a.x == nullptr ? 0
                                  : (int)std::min<long>(kMaxQuantBlocks,
                                                        std::max(1, ceil_div(std::max(units, pad_vecs / 4), kSortThreads)));
  a.zero_blocks = a.zero == nullptr || a.zero_vecs == 0
                      ? 0
                      : (int)std::min<long>(kMaxZeroBlocks, std::max(1, ceil_div(a.zero_vecs, 4L * kSortThreads)));
  gpuStream_t s = reinterpret_cast<gpuStream_t>(stream);
  if (fmt == kSortAiter && path == kSortCompact) return launch_sort<kSortAiter, kSortCompact>(a, s);
  if (fmt == kSortAiter && path == kSortDistributed) return launch_sort<kSortAiter, kSortDistributed>(a, s);
  if (fmt == kSortTriton && path == kSortCompact) return launch_sort<kSortTriton, kSortCompact>(a, s);
  if (fmt == kSortTriton && path == kSortDistributed) return launch_sort<kSortTriton, kSortDistributed>(a, s);
  return -1;
}

#endif  // !SMALLM_DEVICE_ONLY
