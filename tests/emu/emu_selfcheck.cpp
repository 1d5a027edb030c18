// The CPU emulation of the gfx950 build (hip/smallm_emu.h) checked on its own: its cross-lane operations,
// barriers, deadlock report, launch refusal and the gfx950 conversions it stands in for. Built and run by
// tests/test_gfx950_emulated.py (a host clang++, no torch); prints one line per check, "ok" or the reason,
// then the conversion tables as "fp8 <byte> <value>" / "fp4 <nibble> <value>" lines for the test to compare
// with torch's own decoders, and an "order" line (the thread order probe).
#include "smallm_compat.h"
#include "smallm_launch.h"

#include <stdio.h>
#include <stdlib.h>

#include <atomic>
#include <vector>

namespace {

int* g_out = nullptr;  // per-thread results of the kernels below

// Each lane's value is 1000 * block + lane + 1; every wave exchanges them in the ways the kernels do.
__global__ void cross_lane_kernel(int mode) {
  const int t = smallm::thread_id(), b = smallm::block_id(), lane = t % 64;
  const int v = 1000 * b + t + 1;
  int r = 0;
  if (mode == 0) r = __builtin_amdgcn_ds_bpermute(((lane + 5) % 64) << 2, v);         // value of lane + 5
  if (mode == 1) r = __builtin_amdgcn_readlane(v, 63);                                 // value of lane 63
  if (mode == 2) r = (int)(__builtin_amdgcn_ballot_w64(lane % 3 == 0) >> 32);          // lanes 33, 36, .. 63
  if (mode == 3) r = (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));  // lane id
  if (mode == 4) r = (int)__builtin_bit_cast(uint32_t, smallm::shfl_xor((float)v, 32));  // value of lane ^ 32
  g_out[b * 256 + t] = r;
}

// Thread t writes, the block waits, thread t reads thread (t + 1)'s write: right only with the barrier.
__global__ void barrier_kernel() {
  static __shared__ int s[256];
  const int t = smallm::thread_id();
  s[t] = t * 7;
  smallm::block_sync();
  g_out[t] = s[(t + 1) % 256];
}

// No barrier between a write and a read of another thread's write: what it reads shows the order in which the
// emulation runs a block's threads (SMALLM_EMU_ORDER), printed as "order <threads that saw their neighbour's write>".
__global__ void order_probe_kernel() {
  static __shared__ int s[256];
  const int t = smallm::thread_id();
  s[t] = 1;
  g_out[t] = s[(t + 1) % 256];
}

// Half the threads wait at a block barrier that the other half never reaches.
__global__ void deadlock_kernel() {
  if (smallm::thread_id() < 128) smallm::block_sync();
}

// Half of each wave asks for a cross-lane value that the other half, waiting at a block barrier, never gives.
__global__ void divergent_kernel() {
  const int lane = smallm::thread_id() % 64;
  if (lane < 32) g_out[smallm::thread_id()] = __builtin_amdgcn_ds_bpermute(0, lane);
  smallm::block_sync();
}

// Block 1 waits for block 0's release (the kernels' counters between blocks).
__global__ void blocks_kernel(unsigned* flag) {
  if (smallm::block_id() == 0) {
    if (smallm::thread_id() == 0) {
      g_out[0] = 42;
      smallm::signal_add(flag, 1u);
    }
  } else if (smallm::thread_id() == 0) {
    while (smallm::load_acquire(flag) == 0) smallm::pause();
    g_out[1] = g_out[0] + 1;
  }
}

// Each block counts itself in while it runs (thread 0), lingers, and records the most blocks seen running at once.
std::atomic<int> g_running{0}, g_most{0}, g_ran{0};
__global__ void residency_kernel() {
  if (smallm::thread_id() == 0) {
    const int now = ++g_running;
    for (int m = g_most.load(); now > m && !g_most.compare_exchange_weak(m, now);) {
    }
    for (int i = 0; i < 20; ++i) smallm::pause();
    ++g_ran;
    --g_running;
  }
}

// Every block waits for the grid's last block, which is never dispatched when the grid exceeds the resident
// blocks (the resident ones never end): a hang on a GPU, reported here at SMALLM_EMU_TIMEOUT_S.
__global__ void waits_on_last_kernel(unsigned* flag, int grid) {
  if (smallm::thread_id() != 0) return;
  if (smallm::block_id() == grid - 1) smallm::signal_add(flag, 1u);
  else
    while (smallm::load_acquire(flag) == 0) smallm::pause();
}

int failures = 0;
void expect(bool ok, const char* what) {
  printf("%s %s\n", ok ? "ok" : "FAIL", what);
  failures += ok ? 0 : 1;
}

}  // namespace

// Each thread reads its word of dynamic shared memory before anything writes it: what the block finds.
namespace smallm {  // where the kernels declare their dynamic shared memory
__global__ void fresh_smem_kernel() {
  extern __shared__ float dsm[];
  g_out[smallm::block_id() * 256 + smallm::thread_id()] = (int)__builtin_bit_cast(uint32_t, dsm[smallm::thread_id()]);
  dsm[smallm::thread_id()] = 1.0f;  // what a next block on the same compute unit must not find
}
}  // namespace smallm

int main() {
  using smallm::LaunchOrder;
  std::vector<int> out(4 * 256, -1);
  g_out = out.data();
  for (int mode = 0; mode < 5; ++mode) {
    std::fill(out.begin(), out.end(), -1);
    const int rc = smallm::launch_kernel(cross_lane_kernel, 3, 256, 0, nullptr, LaunchOrder::kStream, mode);
    bool ok = rc == 0;
    for (int b = 0; b < 3; ++b)
      for (int t = 0; t < 256; ++t) {
        const int lane = t % 64, w0 = t - lane, v = 1000 * b + t + 1;
        int want = 0;
        if (mode == 0) want = 1000 * b + w0 + (lane + 5) % 64 + 1;
        if (mode == 1) want = 1000 * b + w0 + 63 + 1;
        if (mode == 2) want = (int)(0x9249249249249249ull >> 32);  // bits of lanes 0, 3, 6, .. below 64
        if (mode == 3) want = lane;
        if (mode == 4) want = (int)__builtin_bit_cast(uint32_t, (float)(1000 * b + w0 + (lane ^ 32) + 1));
        (void)v;
        ok = ok && out[b * 256 + t] == want;
      }
    static const char* names[] = {"ds_bpermute reads the addressed lane of its own wave",
                                  "readlane returns lane 63 of each wave", "ballot_w64 sets one bit per lane",
                                  "mbcnt_lo/hi count the lanes below (the lane id)",
                                  "shfl_xor(32) exchanges the wave's two halves"};
    expect(ok, names[mode]);
  }
  {
    std::fill(out.begin(), out.end(), -1);
    bool ok = smallm::launch_kernel(barrier_kernel, 1, 256, 0, nullptr, LaunchOrder::kStream) == 0;
    for (int t = 0; t < 256; ++t) ok = ok && out[t] == ((t + 1) % 256) * 7;
    expect(ok, "a block barrier orders shared-memory writes before reads");
  }
  {
    const int rc = smallm::launch_kernel(deadlock_kernel, 2, 256, 0, nullptr, LaunchOrder::kStream);
    // a block barrier with exited lanes completes (AMD counts the waves still running), so this must not hang
    expect(rc == 0, "a block barrier completes when the other lanes have exited");
  }
  {
    const int rc = smallm::launch_kernel(divergent_kernel, 1, 256, 0, nullptr, LaunchOrder::kStream);
    expect(rc == 1 && smallm_emu::last_error().find("deadlocked") != std::string::npos,
           "lanes waiting at different barriers are reported as a deadlock");
  }
  {
    std::fill(out.begin(), out.end(), -1);
    unsigned flag = 0;
    const int rc = smallm::launch_kernel(blocks_kernel, 2, 64, 0, nullptr, LaunchOrder::kStream, &flag);
    expect(rc == 0 && out[1] == 43, "a block waits on another resident block's release");
  }
  {
    const int rc = smallm::launch_kernel(residency_kernel, 40, 64, 0, nullptr, LaunchOrder::kStream);
    expect(rc == 0 && g_ran.load() == 40 && g_most.load() >= 2 && g_most.load() <= smallm_emu::resident_blocks(),
           "a grid larger than the resident blocks runs them a few at a time, every block once");
  }
  {
    std::fill(out.begin(), out.end(), 0);
    const int rc = smallm::launch_kernel(smallm::fresh_smem_kernel, 4, 256, 4096, nullptr, LaunchOrder::kStream);
    bool ok = rc == 0;
    for (int i = 0; i < 4 * 256; ++i) ok = ok && out[i] == -1;
    expect(ok, "a block finds its dynamic shared memory filled with NaN bytes, not zeros or a block's before it");
  }
  if (getenv("SMALLM_SELFCHECK_UNDISPATCHED")) {  // run by the test in a process with a short timeout
    unsigned flag = 0;
    const int grid = 4 * smallm_emu::resident_blocks();
    const int rc = smallm::launch_kernel(waits_on_last_kernel, grid, 64, 0, nullptr, LaunchOrder::kStream, &flag, grid);
    expect(rc == 1 && smallm_emu::last_error().find("SMALLM_EMU_TIMEOUT_S") != std::string::npos,
           "a block waiting on a block not yet dispatched hangs, reported at the timeout");
  }
  expect(smallm::launch_kernel(barrier_kernel, 1, 256, 200 * 1024, nullptr, LaunchOrder::kStream) == 2,
         "a launch past the LDS of a block is refused");
  expect(smallm::launch_kernel(barrier_kernel, 1, 256, 0, nullptr, LaunchOrder::kCooperative) ==
             (int)hipErrorNotSupported,
         "a cooperative launch is refused, as on HIP");
  {
    std::fill(out.begin(), out.end(), 0);
    smallm::launch_kernel(order_probe_kernel, 1, 256, 0, nullptr, LaunchOrder::kStream);
    int seen = 0;
    for (int t = 0; t < 256; ++t) seen += out[t];
    printf("order %d\n", seen);
  }
  for (int b = 0; b < 256; ++b) {
    const auto p = smallm_emu::cvt_pk_f32_fp8((uint32_t)b << 16, 1.0f, true);
    const auto q = smallm_emu::cvt_pk_bf16_fp8((uint32_t)b << 8, 2.0f, false);
    const float qv = smallm_emu::bf16_at(__builtin_bit_cast(uint32_t, q), 1);
    printf("fp8 %d %.9g %.9g\n", b, (double)p.x, (double)qv);
  }
  for (int n = 0; n < 16; ++n) {
    const auto p = smallm_emu::cvt_pk_f32_fp4((uint32_t)n << 24, 1.0f, 3);  // byte 3, low nibble
    const auto q = smallm_emu::cvt_pk_bf16_fp4((uint32_t)n << 4, 0.5f, 0);  // byte 0, high nibble
    printf("fp4 %d %.9g %.9g\n", n, (double)p.x, (double)smallm_emu::bf16_at(__builtin_bit_cast(uint32_t, q), 1));
  }
  return failures ? 1 : 0;
}
