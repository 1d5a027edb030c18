// smallm_readfloor.hip: the practical floor of a small-M MoE call, measured by a kernel that only
// reads the weight bytes of the experts a routing touches (one launch, no arithmetic), so that
// `sglang-smallm bench` can put the floor beside the kernel in the same run, for any weight format.
#include "smallm_compat.h"

namespace smallm {

// grid (chunks, n_ids): workgroup (c, i) streams chunk c of expert ids[i]'s `expert_bytes` bytes.
__global__ void __launch_bounds__(256) smallm_read_floor_kernel(const uint8_t* base, const int32_t* ids,
                                                                 long expert_bytes, int chunks, unsigned* sink) {
  const int t = thread_id();
  const int c = block_id() % chunks, i = block_id() / chunks;
  const uint8_t* p = base + (long)ids[i] * expert_bytes;
  const long vecs = expert_bytes / 16, per = (vecs + chunks - 1) / chunks;
  const long lo = c * per, hi = lo + per < vecs ? lo + per : vecs;
  uint32_t acc = 0;
  long v = lo + t;
  for (; v + 3 * 256 < hi; v += 4 * 256) {  // four independent 16-byte loads in flight per thread
    const Vec16 a = load_weights(p + 16 * v), b = load_weights(p + 16 * (v + 256));
    const Vec16 d = load_weights(p + 16 * (v + 512)), e = load_weights(p + 16 * (v + 768));
    acc ^= a.w[0] ^ a.w[1] ^ a.w[2] ^ a.w[3] ^ b.w[0] ^ b.w[1] ^ b.w[2] ^ b.w[3];
    acc ^= d.w[0] ^ d.w[1] ^ d.w[2] ^ d.w[3] ^ e.w[0] ^ e.w[1] ^ e.w[2] ^ e.w[3];
  }
  for (; v < hi; v += 256) {
    const Vec16 a = load_weights(p + 16 * v);
    acc ^= a.w[0] ^ a.w[1] ^ a.w[2] ^ a.w[3];
  }
  if (acc == 0x9e3779b9u) atomic_add_relaxed(sink, 1u);  // keeps the loads alive
}

}  // namespace smallm

#if !defined(SMALLM_DEVICE_ONLY)
#if defined(SMALLM_HIP)
typedef hipStream_t floorStream_t;
#else
typedef cudaStream_t floorStream_t;
#endif

int smallm_read_floor_launch(const uint8_t* base, const int32_t* ids, int n_ids, long expert_bytes, int chunks,
                             unsigned* sink, void* stream) {
  if (n_ids <= 0 || chunks <= 0) return 0;
  smallm::smallm_read_floor_kernel<<<n_ids * chunks, 256, 0, reinterpret_cast<floorStream_t>(stream)>>>(
      base, ids, expert_bytes, chunks, sink);
#if defined(SMALLM_HIP)
  return (int)hipGetLastError();
#else
  return (int)cudaGetLastError();
#endif
}
#endif
