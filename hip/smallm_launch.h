// smallm_launch.h: host-side launch of the package's kernels, one function for the three ways they are
// launched: stream-ordered, as a programmatic dependent of the launch before (sm_90: the kernel may start
// while the previous grid drains and waits for it with griddepcontrol.wait), and cooperatively (every
// block resident at once). The runtime's name prefix (GPU(name)) and stream type live here as well.
// Host code only: the ISA checks compile the kernels with SMALLM_DEVICE_ONLY, where this is empty.
#pragma once

#include "smallm_compat.h"

#if !defined(SMALLM_DEVICE_ONLY)

#if defined(SMALLM_HIP)
#define GPU(name) hip##name
typedef hipStream_t gpuStream_t;
#else
#define GPU(name) cuda##name
typedef cudaStream_t gpuStream_t;
#endif

namespace smallm {

enum class LaunchOrder {
  kStream,     // after the previous launch on the stream
  kDependent,  // CUDA: a programmatic dependent of the previous launch; HIP: stream-ordered, as every launch there
  kCooperative,  // CUDA: every block resident at once; HIP: refused (no caller there)
};

// Launches kernel(args...) on `grid` blocks of `threads` with `smem` bytes of dynamic shared memory.
// Returns the runtime's error code of the launch (0 on success); on HIP a cooperative launch returns
// hipErrorNotSupported without launching.
template <class... Params, class... Args>
int launch_kernel(void (*kernel)(Params...), int grid, int threads, int smem, gpuStream_t stream, LaunchOrder order,
                  Args&&... args) {
#if defined(SMALLM_EMU)
  if (order == LaunchOrder::kCooperative) return (int)hipErrorNotSupported;
  return smallm_emu::launch(kernel, grid, threads, smem, static_cast<Args&&>(args)...);
#elif defined(SMALLM_HIP)
  if (order == LaunchOrder::kCooperative) return (int)hipErrorNotSupported;
  kernel<<<grid, threads, smem, stream>>>(static_cast<Args&&>(args)...);
  return (int)hipGetLastError();
#else
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  if (order == LaunchOrder::kDependent) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
  } else if (order == LaunchOrder::kCooperative) {
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = order == LaunchOrder::kStream ? 0 : 1;
  return (int)cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...);
#endif
}

}  // namespace smallm

#endif  // !SMALLM_DEVICE_ONLY
