// smallm_moe.hip: instantiations of the fused small-M MoE kernel and its host launcher.
// One source: hipcc (gfx950), nvcc (sm_90a, through a generated .cu that includes this file),
// and clang -nogpuinc --offload-device-only (the gfx950/gfx942 ISA check, SMALLM_DEVICE_ONLY).
#include "smallm_moe.h"

namespace smallm {
template __global__ void smallm_moe_kernel<kFp8Block128, kRowMajor>(MoeArgs);
template __global__ void smallm_moe_kernel<kFp8Block128, kShuffle16x16>(MoeArgs);
template __global__ void smallm_moe_kernel<kMxfp4, kRowMajor>(MoeArgs);
template __global__ void smallm_moe_kernel<kMxfp4, kShuffle16x16>(MoeArgs);
}  // namespace smallm

#if !defined(SMALLM_DEVICE_ONLY)

#if defined(SMALLM_HIP)
#define GPU(name) hip##name
typedef hipStream_t gpuStream_t;
#define GPU_DEV_ATTR_SMS hipDeviceAttributeMultiprocessorCount
#else
#define GPU(name) cuda##name
typedef cudaStream_t gpuStream_t;
#define GPU_DEV_ATTR_SMS cudaDevAttrMultiProcessorCount
#endif

namespace {

constexpr int kMaxDevices = 64;

template <int Fmt, int Layout>
int launch(const smallm::MoeArgs& a0, gpuStream_t stream) {
  // Resident-block capacity per device, computed once. Tickets make the launch correct at any
  // residency; capacity only sizes the grid so that no block waits for a free slot.
  static int capacity[kMaxDevices] = {0};
  int dev = 0;
  if (GPU(GetDevice)(&dev) != 0 || dev >= kMaxDevices) return 1;
  if (capacity[dev] == 0) {
    int per_sm = 0, sms = 0;
    if (GPU(OccupancyMaxActiveBlocksPerMultiprocessor)(&per_sm, smallm::smallm_moe_kernel<Fmt, Layout>,
                                                       smallm::kThreads, 0) != 0)
      return 2;
    if (GPU(DeviceGetAttribute)(&sms, GPU_DEV_ATTR_SMS, dev) != 0) return 3;
    capacity[dev] = (per_sm > 0 ? per_sm : 1) * sms;
  }
  smallm::MoeArgs a = a0;
  const long pairs = (long)a.T * a.K;
  const long distinct_max = pairs < a.E ? pairs : a.E;
  const long items_max = distinct_max * ((long)(a.I / 16) * ((a.D + 1023) / 1024) + (a.D + smallm::kMinRows2 - 1) / smallm::kMinRows2);
  a.nblocks = (int)(items_max < capacity[dev] ? items_max : capacity[dev]);
  if (a.nblocks < 1) a.nblocks = 1;
  smallm::smallm_moe_kernel<Fmt, Layout><<<a.nblocks, smallm::kThreads, 0, stream>>>(a);
  return (int)GPU(GetLastError)();
}

}  // namespace

int smallm_moe_launch(const smallm::MoeArgs& args, int fmt, int layout, void* stream) {
  gpuStream_t s = reinterpret_cast<gpuStream_t>(stream);
  if (fmt == smallm::kFp8Block128 && layout == smallm::kRowMajor) return launch<smallm::kFp8Block128, smallm::kRowMajor>(args, s);
  if (fmt == smallm::kFp8Block128 && layout == smallm::kShuffle16x16) return launch<smallm::kFp8Block128, smallm::kShuffle16x16>(args, s);
  if (fmt == smallm::kMxfp4 && layout == smallm::kRowMajor) return launch<smallm::kMxfp4, smallm::kRowMajor>(args, s);
  if (fmt == smallm::kMxfp4 && layout == smallm::kShuffle16x16) return launch<smallm::kMxfp4, smallm::kShuffle16x16>(args, s);
  return -1;
}

#ifndef SMALLM_BUILD_ARCH
#define SMALLM_BUILD_ARCH "unknown"
#endif
const char* smallm_build_arch() { return SMALLM_BUILD_ARCH; }

#endif  // !SMALLM_DEVICE_ONLY
