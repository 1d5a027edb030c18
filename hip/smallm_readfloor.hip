// smallm_readfloor.hip: the practical floor of a small-M MoE call, measured by a kernel that only
// reads the weight bytes of the experts a routing touches (no arithmetic), so that `sglang-smallm bench`
// can put the floor beside the kernel in the same run, for any weight format. One launch reads each
// expert's whole bytes; the two-launch floors read its W13 bytes, then in a second launch its W2 bytes,
// the second either stream-ordered or a programmatic dependent of the first that reads nothing until the
// first grid has finished (the dependency the MoE's down kernel has on its gate/up kernel).
#include "smallm_launch.h"

namespace smallm {

// grid (chunks, n_ids): workgroup (c, i) streams chunk c of bytes [offset, offset + length) of expert
// ids[i] (experts `expert_bytes` apart). The next floor kernel may launch at once; where this one is a
// programmatic dependent (sm_90, the launcher's `dependent`), it waits for the grid before it first.
__global__ void __launch_bounds__(256) smallm_read_floor_kernel(const uint8_t* base, const int32_t* ids,
                                                                 long expert_bytes, long offset, long length,
                                                                 int chunks, unsigned* sink) {
  grid_dependents_launch();
  const int t = thread_id();
  const int c = block_id() % chunks, i = block_id() / chunks;
  const uint8_t* p = base + (long)ids[i] * expert_bytes + offset;
  grid_dependency_wait();  // a no-op unless launched as a programmatic dependent
  const long vecs = length / 16, per = (vecs + chunks - 1) / chunks;
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
// dependent: on CUDA a programmatic dependent launch (the kernel then waits for the grid before it); on
// HIP stream-ordered, as every launch there.
int smallm_read_floor_launch(const uint8_t* base, const int32_t* ids, int n_ids, long expert_bytes, long offset,
                             long length, int chunks, bool dependent, unsigned* sink, void* stream) {
  using namespace smallm;
  if (n_ids <= 0 || chunks <= 0 || length <= 0) return 0;
  return launch_kernel(smallm_read_floor_kernel, n_ids * chunks, 256, 0, reinterpret_cast<gpuStream_t>(stream),
                       dependent ? LaunchOrder::kDependent : LaunchOrder::kStream, base, ids, expert_bytes, offset,
                       length, chunks, sink);
}
#endif
