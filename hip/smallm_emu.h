// smallm_emu.h: the gfx950 build of the kernels run on a CPU, for checking them where no AMD GPU is.
//
// Compiled only with -DSMALLM_EMU -D__gfx950__ by a host clang (sglang_smallm_plugin/emulated.py), never
// by the install. smallm_compat.h then takes its HIP (wave64) path, so every kernel line the gfx950 build
// compiles is the line that runs here, and the few things a CPU lacks come from this header:
//
//   * the SIMT model: a block is one OS thread running its threads as fibers (a stack switch of six
//     registers on x86-64, ucontext elsewhere; first to last, or last to first with SMALLM_EMU_ORDER=reverse),
//     each with its
//     own stack (its registers); a wave is 64 consecutive threads. Lanes run in order until they wait
//     (block barrier, a cross-lane operation, s_sleep), so code that needed a wave to run in lock step
//     without saying so would read stale data here. Blocks run on resident_blocks() OS threads (2 per
//     compute unit), dispatched in index order as a GPU refills its compute units; `__shared__` is
//     thread_local, so a block finds what the block before it on that thread left, and the dynamic
//     shared memory filled with NaN bytes.
//   * the AMDGPU builtins the kernels call: cross-lane (ds_bpermute, ballot, readlane, mbcnt), ids,
//     barriers, fences, sleep, atomics (the __hip_atomic_* builtins on the host's __atomic_*), and the
//     gfx950 conversions and dot product, from the ISA's description: v_cvt_scalef32_pk_{bf16,f32}_{fp8,fp4}
//     decode OCP e4m3 / e2m1 and multiply by the scale (bf16 results rounded to nearest even);
//     v_dot2_f32_bf16 takes both products exactly and rounds the sum with the accumulator once. Those
//     numerics are this file's reading of the ISA, not measured on an MI355X: what the emulation checks is
//     the kernels' wave64 indexing, layouts, synchronisation and arithmetic order, not the silicon.
//   * the few HIP runtime calls of the launchers (device, occupancy, attributes, launch), for an emulated
//     device of SMALLM_EMU_CUS compute units (default 4), 2 blocks per CU, 160 KiB of LDS per block.
//
// A launch that deadlocks (lanes of one block waiting at different barriers) or runs past
// SMALLM_EMU_TIMEOUT_S seconds (default 600) returns an error code and records why (emu_last_error()).
#pragma once

#if !defined(SMALLM_EMU)
#error "smallm_emu.h is for the CPU emulation build only (-DSMALLM_EMU)"
#endif

#include <sched.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#define SMALLM_HIP 1
#define __global__
#define __device__
#define __host__
#define __shared__ thread_local
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
// The kernels' AMDGPU launch-bound attributes mean nothing on a CPU: `__attribute__((a(..), b(..)))` -> `((, ))`.
#define amdgpu_flat_work_group_size(...)
#define amdgpu_waves_per_eu(...)
#define __launch_bounds__(...)
#define __HIP_MEMORY_SCOPE_WORKGROUP 2
#define __HIP_MEMORY_SCOPE_AGENT 3

#ifndef SMALLM_EMU_FAULT
#define SMALLM_EMU_FAULT 0  // tests only: a deliberate fault the checks must catch (see bpermute below)
#endif

namespace smallm_emu {

constexpr int kWave = 64;
constexpr int kDynamicSmemBytes = 160 * 1024;  // gfx950: 160 KiB of LDS per CU
constexpr int kBlocksPerCu = 2;
constexpr size_t kStackBytes = 128 * 1024;  // a lane's stack, below it a guard page (an overflow faults)
constexpr size_t kGuardBytes = 4096;

// ---------------------------------------------------------------- fibers
#if defined(__x86_64__)
// A fiber's context is its saved stack pointer; smallm_emu_switch saves the callee-saved registers on the
// current stack, stores its pointer in *from, and resumes the stack `to` (the System V ABI leaves every
// other register to the caller). Weak: each translation unit that includes this header defines it.
extern "C" void smallm_emu_switch(void** from, void* to);
asm(R"(
  .text
  .weak smallm_emu_switch
  .type smallm_emu_switch, @function
smallm_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size smallm_emu_switch, .-smallm_emu_switch
)");
struct Context {
  void* sp = nullptr;
};
inline void switch_context(Context& from, Context& to) { smallm_emu_switch(&from.sp, to.sp); }
// A new fiber's stack: six zero registers, then `entry` as the return address, 16-byte aligned as a call
// would leave it.
inline void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  uintptr_t top = ((uintptr_t)(stack + bytes)) & ~(uintptr_t)15;
  void** ret = reinterpret_cast<void**>(top - 16);
  *ret = reinterpret_cast<void*>(entry);
  void** sp = ret - 6;
  for (int i = 0; i < 6; ++i) sp[i] = nullptr;
  c.sp = sp;
}
#else
struct Context {
  ucontext_t uc;
};
inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
inline void make_context(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

inline std::string& last_error() {
  static std::string e;
  return e;
}
inline std::atomic<int>& failed() {  // set once a block of the running launch fails: the others give up
  static std::atomic<int> f{0};
  return f;
}
inline void fail(const std::string& why) {
  static std::atomic_flag lock = ATOMIC_FLAG_INIT;
  while (lock.test_and_set()) {
  }
  if (!failed().load()) last_error() = why;
  failed().store(1);
  lock.clear();
}

enum State { kReady, kAtBlockBarrier, kAtWaveBarrier, kDone };

struct Block {
  int id = 0, nthreads = 0;
  std::function<void()>* body = nullptr;
  Context sched;
  std::vector<Context> ctx;
  std::vector<char*> stacks;
  std::vector<int> state;
  std::vector<unsigned> waited_gen;  // the barrier generation a waiting lane waits to see pass
  int cur = 0, live = 0, arrived = 0;
  unsigned gen = 0;
  std::vector<int> wave_live, wave_arrived;
  std::vector<unsigned> wave_gen;
  std::vector<uint64_t> slots;  // one exchange slot per lane (cross-lane operations)
  bool abandoned = false;
};

inline Block*& current() {
  static thread_local Block* b = nullptr;
  return b;
}
inline std::chrono::steady_clock::time_point& deadline() {
  static std::chrono::steady_clock::time_point d;
  return d;
}

// SMALLM_EMU_ORDER=reverse: a block's threads are resumed last to first (waves and lanes), so that work
// between two barriers runs in the other order; outputs must not change (a missing barrier would show).
inline bool reverse_order() {
  static const bool r = [] {
    const char* v = getenv("SMALLM_EMU_ORDER");
    return v && strcmp(v, "reverse") == 0;
  }();
  return r;
}

inline void yield_to_scheduler() {
  Block* b = current();
  switch_context(b->ctx[b->cur], b->sched);
}

inline int tid() { return current()->cur; }
inline int lane() { return current()->cur % kWave; }
inline int wave() { return current()->cur / kWave; }

// Releases a barrier whose remaining lanes have all arrived (after an arrival or a lane's exit).
inline void release_if_complete(Block* b) {
  if (b->arrived > 0 && b->arrived >= b->live) {
    b->arrived = 0;
    ++b->gen;
  }
  for (size_t w = 0; w < b->wave_live.size(); ++w)
    if (b->wave_arrived[w] > 0 && b->wave_arrived[w] >= b->wave_live[w]) {
      b->wave_arrived[w] = 0;
      ++b->wave_gen[w];
    }
}

inline void block_barrier() {
  Block* b = current();
  if (SMALLM_EMU_FAULT == 4) return;
  const unsigned g = b->gen;
  ++b->arrived;
  release_if_complete(b);
  if (b->gen != g) return;
  b->state[b->cur] = kAtBlockBarrier;
  b->waited_gen[b->cur] = g;
  yield_to_scheduler();
}

inline void wave_barrier() {
  Block* b = current();
  const int w = wave();
  const unsigned g = b->wave_gen[w];
  ++b->wave_arrived[w];
  release_if_complete(b);
  if (b->wave_gen[w] != g) return;
  b->state[b->cur] = kAtWaveBarrier;
  b->waited_gen[b->cur] = g;
  yield_to_scheduler();
}

// Every lane of the wave puts v in its slot; returns the slots once all have (a second barrier before
// the slots are written again follows in exchange_done).
inline const uint64_t* exchange(uint64_t v) {
  Block* b = current();
  b->slots[b->cur] = v;
  wave_barrier();
  return &b->slots[wave() * kWave];
}
inline void exchange_done() { wave_barrier(); }

// SMALLM_EMU_FAULT (tests only: a fault the checks must catch): 1 = ds_bpermute reads the next lane's
// value, 2 = the fp4 conversions take a byte's nibbles the other way round, 3 = a wave is 32 lanes wide
// in the cross-lane operations (as if the kernels assumed CUDA's warp), 4 = block barriers do not wait.
constexpr int kExchangeWidth = SMALLM_EMU_FAULT == 3 ? 32 : kWave;
inline int group_base() { return lane() / kExchangeWidth * kExchangeWidth; }  // first lane this one exchanges with

inline int bpermute(int addr, int v) {
  const uint64_t* s = exchange((uint32_t)v);
  const int src = ((addr >> 2) + (SMALLM_EMU_FAULT == 1 ? 1 : 0)) & (kExchangeWidth - 1);
  const int r = (int)(uint32_t)s[group_base() + src];
  exchange_done();
  return r;
}
inline uint64_t ballot(bool p) {
  const uint64_t* s = exchange(p ? 1u : 0u);
  uint64_t m = 0;
  Block* b = current();
  const int base = group_base();
  for (int l = base; l < base + kExchangeWidth; ++l) {
    const int t = wave() * kWave + l;
    if (t < b->nthreads && b->state[t] != kDone && s[l]) m |= uint64_t(1) << (l - base);
  }
  exchange_done();
  return m;
}
inline int readlane(int v, int l) {
  const uint64_t* s = exchange((uint32_t)v);
  const int r = (int)(uint32_t)s[group_base() + (l & (kExchangeWidth - 1))];
  exchange_done();
  return r;
}
inline unsigned mbcnt_lo(unsigned mask, unsigned acc) {
  const int l = lane();
  const unsigned below = l >= 32 ? ~0u : (l == 0 ? 0u : (~0u >> (32 - l)));
  return acc + (unsigned)__builtin_popcount(mask & below);
}
inline unsigned mbcnt_hi(unsigned mask, unsigned acc) {
  const int l = lane() - 32;
  const unsigned below = l <= 0 ? 0u : (~0u >> (32 - l));
  return acc + (unsigned)__builtin_popcount(mask & below);
}

// s_sleep: the lane steps aside; the block's OS thread lets the others run when only sleepers are left.
inline void sleep_lane() {
  Block* b = current();
  if (failed().load(std::memory_order_relaxed)) {
    b->abandoned = true;
  } else if (std::chrono::steady_clock::now() > deadline()) {
    fail("emulated launch ran past SMALLM_EMU_TIMEOUT_S (a lane still spinning in s_sleep)");
    b->abandoned = true;
  }
  yield_to_scheduler();
}

// A fiber's first frame: runs the kernel, marks the lane done, and hands back for good.
inline void trampoline() {
  Block* b = current();
  (*b->body)();
  b->state[b->cur] = kDone;
  --b->live;
  --b->wave_live[b->cur / kWave];
  release_if_complete(b);
  switch_context(b->ctx[b->cur], b->sched);
  abort();  // never resumed
}

inline bool runnable(const Block* b, int t) {
  switch (b->state[t]) {
    case kReady: return true;
    case kAtBlockBarrier: return b->gen != b->waited_gen[t];
    case kAtWaveBarrier: return b->wave_gen[t / kWave] != b->waited_gen[t];
    default: return false;
  }
}

inline void poison_dynamic_smem();  // below, after the dynamic shared memory it fills

// Runs block `id` to completion (or until the launch fails) on this OS thread.
inline void run_block(int id, int nthreads, std::function<void()>* body) {
  poison_dynamic_smem();  // a block finds its LDS as a GPU leaves it: not zeroed (here NaN bytes), not its own
  Block b;
  b.id = id;
  b.nthreads = nthreads;
  b.body = body;
  const int nw = (nthreads + kWave - 1) / kWave;
  b.ctx.resize(nthreads);
  b.stacks.resize(nthreads);
  b.state.assign(nthreads, kReady);
  b.waited_gen.assign(nthreads, 0);
  b.live = nthreads;
  b.wave_live.assign(nw, 0);
  for (int t = 0; t < nthreads; ++t) ++b.wave_live[t / kWave];
  b.wave_arrived.assign(nw, 0);
  b.wave_gen.assign(nw, 0);
  b.slots.assign((size_t)nw * kWave, 0);
  current() = &b;
  for (int t = 0; t < nthreads; ++t) {
    void* m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      fail("emulated block " + std::to_string(id) + ": no memory for its lanes' stacks");
      for (int u = 0; u < t; ++u) munmap(b.stacks[u] - kGuardBytes, kStackBytes + kGuardBytes);
      current() = nullptr;
      return;
    }
    mprotect(m, kGuardBytes, PROT_NONE);
    b.stacks[t] = static_cast<char*>(m) + kGuardBytes;
    make_context(b.ctx[t], b.stacks[t], kStackBytes, trampoline);
  }
  while (b.live > 0 && !b.abandoned) {
    bool ran = false;
    for (int i = 0; i < nthreads && !b.abandoned; ++i) {
      const int t = reverse_order() ? nthreads - 1 - i : i;
      if (!runnable(&b, t)) continue;
      b.state[t] = kReady;
      b.cur = t;
      ran = true;
      switch_context(b.sched, b.ctx[t]);
    }
    if (b.abandoned) break;
    if (!ran && b.live > 0) {
      std::string why = "emulated block " + std::to_string(id) + " deadlocked:";
      for (int t = 0; t < nthreads; ++t)
        if (b.state[t] != kDone && (t % kWave == 0 || b.state[t] != b.state[t - 1]))
          why += " thread " + std::to_string(t) +
                 (b.state[t] == kAtBlockBarrier ? " at a block barrier;" : " at a wave barrier;");
      fail(why);
      break;
    }
    if (failed().load(std::memory_order_relaxed)) break;
    sched_yield();  // let the other blocks' OS threads run (the machine may have fewer cores than blocks)
  }
  for (int t = 0; t < nthreads; ++t)  // a failed block's fibers are dropped unfinished
    munmap(b.stacks[t] - kGuardBytes, kStackBytes + kGuardBytes);
  current() = nullptr;
}

inline int cus() {
  const char* v = getenv("SMALLM_EMU_CUS");
  const int n = v ? atoi(v) : 4;
  return n > 0 ? n : 4;
}

// How many blocks are resident at once: SMALLM_EMU_CUS compute units of kBlocksPerCu (what the occupancy query
// answers, and what the block kernel sizes its grid to).
inline int resident_blocks() { return cus() * kBlocksPerCu; }

// A kernel launch: blocks dispatched in order of their index (last to first with SMALLM_EMU_ORDER=reverse) onto
// resident_blocks() OS threads, each running one block to its end before taking the next, as a GPU's
// dispatcher refills a compute unit; a kernel whose blocks wait on blocks not yet dispatched hangs here as on
// a GPU (reported at SMALLM_EMU_TIMEOUT_S). Returns when all have finished: 0 on success, 1 when a block
// failed (emu_last_error() says why), 2 for a launch no GPU would take.
template <class... Params, class... Args>
int launch(void (*kernel)(Params...), int grid, int threads, int smem, Args... args) {
  if (grid < 1 || threads < 1 || threads > 1024 || smem > kDynamicSmemBytes) {
    last_error() = "launch refused: grid " + std::to_string(grid) + ", " + std::to_string(threads) + " threads, " +
                   std::to_string(smem) + " bytes of dynamic shared memory";
    return 2;
  }
  failed().store(0);
  last_error().clear();
  const char* to = getenv("SMALLM_EMU_TIMEOUT_S");
  deadline() = std::chrono::steady_clock::now() + std::chrono::seconds(to ? atoi(to) : 600);
  std::function<void()> body = [=] { kernel(args...); };
  std::atomic<int> next{0};
  const bool reverse = reverse_order();
  std::vector<std::thread> slots;
  const int n = std::min(grid, resident_blocks());
  slots.reserve(n);
  for (int w = 0; w < n; ++w)
    slots.emplace_back([&body, &next, grid, threads, reverse] {
      for (int i = next.fetch_add(1); i < grid && !failed().load(); i = next.fetch_add(1))
        run_block(reverse ? grid - 1 - i : i, threads, &body);
    });
  for (auto& t : slots) t.join();
  return failed().load() ? 1 : 0;
}

// ---------------------------------------------------------------- gfx950 number formats
inline float e4m3(uint32_t b) {
  const uint32_t s = (b >> 7) & 1u, e = (b >> 3) & 15u, m = b & 7u;
  float v;
  if (e == 0) v = (float)m * 0.001953125f;
  else if (e == 15 && m == 7) v = __builtin_nanf("");
  else v = __builtin_bit_cast(float, ((e + 120u) << 23) | (m << 20));
  return s ? -v : v;
}
inline float e2m1(uint32_t n) {
  const uint32_t e = (n >> 1) & 3u, m = n & 1u;
  const float v = e ? __builtin_bit_cast(float, ((e + 126u) << 23) | (m << 22)) : 0.5f * (float)m;
  return (n & 8u) ? -v : v;
}
inline uint16_t bf16_rne(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
inline float bf16_at(uint32_t pair, int i) { return __builtin_bit_cast(float, i ? pair & 0xffff0000u : pair << 16); }

typedef __bf16 bf16x2 __attribute__((ext_vector_type(2)));
typedef float f32x2 __attribute__((ext_vector_type(2)));

inline bf16x2 pack_bf16(float lo, float hi) {
  return __builtin_bit_cast(bf16x2, (uint32_t)bf16_rne(lo) | ((uint32_t)bf16_rne(hi) << 16));
}
// v_cvt_scalef32_pk_bf16_fp8: bytes 2 sel and 2 sel + 1 of src, times scale.
inline bf16x2 cvt_pk_bf16_fp8(uint32_t src, float scale, bool sel) {
  const uint32_t h = sel ? src >> 16 : src;
  return pack_bf16(e4m3(h & 0xffu) * scale, e4m3((h >> 8) & 0xffu) * scale);
}
inline f32x2 cvt_pk_f32_fp8(uint32_t src, float scale, bool sel) {
  const uint32_t h = sel ? src >> 16 : src;
  return f32x2{e4m3(h & 0xffu) * scale, e4m3((h >> 8) & 0xffu) * scale};
}
// v_cvt_scalef32_pk_bf16_fp4: the two nibbles of byte sel (low nibble first), times scale.
inline uint32_t fp4_byte(uint32_t src, int sel) {
  const uint32_t byte = (src >> (8 * sel)) & 0xffu;
  return SMALLM_EMU_FAULT == 2 ? ((byte & 15u) << 4) | (byte >> 4) : byte;
}
inline bf16x2 cvt_pk_bf16_fp4(uint32_t src, float scale, int sel) {
  const uint32_t byte = fp4_byte(src, sel);
  return pack_bf16(e2m1(byte & 15u) * scale, e2m1(byte >> 4) * scale);
}
inline f32x2 cvt_pk_f32_fp4(uint32_t src, float scale, int sel) {
  const uint32_t byte = fp4_byte(src, sel);
  return f32x2{e2m1(byte & 15u) * scale, e2m1(byte >> 4) * scale};
}
// v_dot2_f32_bf16: a.x b.x + a.y b.y + c, the products exact, one rounding.
inline float fdot2_bf16(bf16x2 a, bf16x2 b, float c, bool) {
  const uint32_t ua = __builtin_bit_cast(uint32_t, a), ub = __builtin_bit_cast(uint32_t, b);
  return (float)((double)bf16_at(ua, 0) * bf16_at(ub, 0) + (double)bf16_at(ua, 1) * bf16_at(ub, 1) + (double)c);
}

// Weight-read accounting (the byte model, checked): every load_weights / load_weight_word adds the bytes it
// reads to the granule counter of the tracked region that holds them, or to untracked_bytes() where none does.
// Regions are set between launches (sglang_smallm_emu::emu_track_reads), never during one.
struct ReadTrack {
  const uint8_t* base;
  size_t bytes;
  int32_t* counts;  // one per granule of the region
  size_t granule;
};
constexpr int kMaxTracks = 4;
inline ReadTrack (&tracks())[kMaxTracks] {
  static ReadTrack t[kMaxTracks];
  return t;
}
inline int& n_tracks() {
  static int n = 0;
  return n;
}
inline std::atomic<long long>& untracked_bytes() {
  static std::atomic<long long> b{0};
  return b;
}
inline void note_weight_read(const void* p, size_t n) {
  if (n_tracks() == 0) return;
  const uint8_t* q = static_cast<const uint8_t*>(p);
  for (int i = 0; i < n_tracks(); ++i) {
    const ReadTrack& t = tracks()[i];
    if (q >= t.base && q + n <= t.base + t.bytes) {
      const size_t g0 = (size_t)(q - t.base) / t.granule, g1 = (size_t)(q + n - 1 - t.base) / t.granule;
      for (size_t g = g0; g <= g1; ++g) {  // a load across granules: each its own bytes
        const size_t lo = std::max(g * t.granule, (size_t)(q - t.base)), hi = std::min((g + 1) * t.granule, (size_t)(q + n - t.base));
        __atomic_fetch_add(&t.counts[g], (int32_t)(hi - lo), __ATOMIC_RELAXED);
      }
      return;
    }
  }
  untracked_bytes().fetch_add((long long)n, std::memory_order_relaxed);
}

inline unsigned atomic_inc32(unsigned* p, unsigned max) {
  unsigned old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, old >= max ? 0u : old + 1u, true, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
  }
  return old;
}

}  // namespace smallm_emu

// ---------------------------------------------------------------- the AMDGPU builtins the kernels call
#define __builtin_amdgcn_workitem_id_x() ((unsigned)::smallm_emu::tid())
#define __builtin_amdgcn_workgroup_id_x() ((unsigned)::smallm_emu::current()->id)
#define __builtin_amdgcn_s_barrier() ::smallm_emu::block_barrier()
#define __builtin_amdgcn_fence(order, scope) __atomic_thread_fence(order)
#define __builtin_amdgcn_s_sleep(n) ::smallm_emu::sleep_lane()
#define __builtin_amdgcn_mbcnt_lo(mask, acc) ::smallm_emu::mbcnt_lo((mask), (acc))
#define __builtin_amdgcn_mbcnt_hi(mask, acc) ::smallm_emu::mbcnt_hi((mask), (acc))
#define __builtin_amdgcn_ds_bpermute(addr, v) ::smallm_emu::bpermute((addr), (v))
#define __builtin_amdgcn_ballot_w64(p) ::smallm_emu::ballot(p)
#define __builtin_amdgcn_readlane(v, l) ::smallm_emu::readlane((v), (l))
#define __builtin_amdgcn_atomic_inc32(p, max, order, scope) ::smallm_emu::atomic_inc32((p), (max))
#define __builtin_amdgcn_cvt_scalef32_pk_bf16_fp8(src, scale, sel) ::smallm_emu::cvt_pk_bf16_fp8((src), (scale), (sel))
#define __builtin_amdgcn_cvt_scalef32_pk_f32_fp8(src, scale, sel) ::smallm_emu::cvt_pk_f32_fp8((src), (scale), (sel))
#define __builtin_amdgcn_cvt_scalef32_pk_bf16_fp4(src, scale, sel) ::smallm_emu::cvt_pk_bf16_fp4((src), (scale), (sel))
#define __builtin_amdgcn_cvt_scalef32_pk_f32_fp4(src, scale, sel) ::smallm_emu::cvt_pk_f32_fp4((src), (scale), (sel))
#define __builtin_amdgcn_fdot2_f32_bf16(a, b, c, clamp) ::smallm_emu::fdot2_bf16((a), (b), (c), (clamp))
#define __hip_atomic_fetch_add(p, v, order, scope) __atomic_fetch_add((p), (v), (order))
#define __hip_atomic_fetch_min(p, v, order, scope) __atomic_fetch_min((p), (v), (order))
#define __hip_atomic_load(p, order, scope) __atomic_load_n((p), (order))
#define __hip_atomic_store(p, v, order, scope) __atomic_store_n((p), (v), (order))

// ---------------------------------------------------------------- the HIP runtime calls of the launchers
typedef void* hipStream_t;
typedef int hipError_t;
enum { hipSuccess = 0, hipErrorNotSupported = 801 };
enum hipDeviceAttribute_t { hipDeviceAttributeMultiprocessorCount = 1 };
enum hipFuncAttribute { hipFuncAttributeMaxDynamicSharedMemorySize = 1 };
inline hipError_t hipGetDevice(int* d) { *d = 0; return hipSuccess; }
inline hipError_t hipDeviceGetAttribute(int* v, hipDeviceAttribute_t, int) {
  *v = smallm_emu::cus();
  return hipSuccess;
}
template <class K>
inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* n, K, int, int) {
  *n = smallm_emu::kBlocksPerCu;
  return hipSuccess;
}
inline hipError_t hipFuncSetAttribute(const void*, hipFuncAttribute, int bytes) {
  return bytes <= smallm_emu::kDynamicSmemBytes ? hipSuccess : hipErrorNotSupported;
}
inline hipError_t hipGetLastError() { return hipSuccess; }

// Dynamic shared memory (`extern __shared__ T name[]` in a kernel): one thread_local array per name.
namespace smallm {
alignas(16) inline thread_local float dsm[smallm_emu::kDynamicSmemBytes / 4];
}
inline void smallm_emu::poison_dynamic_smem() { memset(smallm::dsm, 0xff, sizeof(smallm::dsm)); }
