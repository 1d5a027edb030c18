// smallm_moe.hip: instantiations of the fused small-M MoE kernel and its host launcher.
// One source: hipcc (gfx950), nvcc (sm_90a, through a generated .cu that includes this file),
// and clang -nogpuinc --offload-device-only (the gfx950/gfx942 ISA check, SMALLM_DEVICE_ONLY).
#include "smallm_gateup_tma.h"
#include "smallm_launch.h"
#include "smallm_moe_twopass.h"

namespace smallm {
template __global__ void smallm_moe_kernel<kFp8Block128, kRowMajor, 0>(MoeArgs);
template __global__ void smallm_moe_kernel<kFp8Block128, kShuffle16x16, 0>(MoeArgs);
template __global__ void smallm_moe_kernel<kMxfp4, kRowMajor, 0>(MoeArgs);
template __global__ void smallm_moe_kernel<kMxfp4, kShuffle16x16, 0>(MoeArgs);
#define SMALLM_TWOPASS(F, L)                                                   \
  template __global__ void smallm_gateup_kernel<F, L, 8, 4>(MoeArgs);        \
  template __global__ void smallm_gateup_kernel<F, L, 8, 8>(MoeArgs);        \
  template __global__ void smallm_gateup_kernel<F, L, 4, 8>(MoeArgs);        \
  template __global__ void smallm_down_kernel<F, L>(MoeArgs);
SMALLM_TWOPASS(kFp8Block128, kRowMajor)
SMALLM_TWOPASS(kFp8Block128, kShuffle16x16)
SMALLM_TWOPASS(kMxfp4, kRowMajor)
SMALLM_TWOPASS(kMxfp4, kShuffle16x16)
#undef SMALLM_TWOPASS
#if !defined(SMALLM_HIP)
#define SMALLM_MMA_DOWN(F, L, C, S)                                                \
  template __global__ void smallm_down_mma_kernel<F, L, 1, false, C, S>(MoeArgs); \
  template __global__ void smallm_down_mma_kernel<F, L, 2, false, C, S>(MoeArgs); \
  template __global__ void smallm_down_mma_kernel<F, L, 1, true, C, S>(MoeArgs);  \
  template __global__ void smallm_down_mma_kernel<F, L, 2, true, C, S>(MoeArgs);
#define SMALLM_MMA(F, L)                                                  \
  template __global__ void smallm_gateup_mma_kernel<F, L, 4, 1>(MoeArgs); \
  template __global__ void smallm_gateup_mma_kernel<F, L, 8, 1>(MoeArgs); \
  template __global__ void smallm_gateup_mma_kernel<F, L, 4, 2>(MoeArgs); \
  template __global__ void smallm_gateup_mma_kernel<F, L, 8, 2>(MoeArgs); \
  SMALLM_MMA_DOWN(F, L, 2, false)                                         \
  SMALLM_MMA_DOWN(F, L, kDownMmaChunks, false)
SMALLM_MMA(kFp8Block128, kRowMajor)
SMALLM_MMA(kFp8Block128, kShuffle16x16)
SMALLM_MMA(kMxfp4, kRowMajor)
SMALLM_MMA(kMxfp4, kShuffle16x16)
SMALLM_MMA_DOWN(kFp8Block128, kRowMajor, kDownMmaChunks, true)  // FP8 jobs split along I (down_mma_split)
SMALLM_MMA_DOWN(kFp8Block128, kShuffle16x16, kDownMmaChunks, true)
#undef SMALLM_MMA
#undef SMALLM_MMA_DOWN
#define SMALLM_TMA(NT)                                                                               \
  template __global__ void smallm_gateup_tma_kernel<NT, false>(const __grid_constant__ CUtensorMap, MoeArgs); \
  template __global__ void smallm_gateup_tma_kernel<NT, true>(const __grid_constant__ CUtensorMap, MoeArgs);
SMALLM_TMA(1)
SMALLM_TMA(2)
SMALLM_TMA(3)
SMALLM_TMA(4)
SMALLM_TMA(5)
#undef SMALLM_TMA
#define SMALLM_TMA_FUSED(NT2) \
  template __global__ void smallm_moe_tma_kernel<NT2>(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap, MoeArgs);
SMALLM_TMA_FUSED(1)
SMALLM_TMA_FUSED(2)
SMALLM_TMA_FUSED(3)
SMALLM_TMA_FUSED(4)
SMALLM_TMA_FUSED(5)
#undef SMALLM_TMA_FUSED
template __global__ void smallm_moe_kernel<kFp8Block128, kRowMajor, 1>(MoeArgs);
template __global__ void smallm_moe_kernel<kFp8Block128, kShuffle16x16, 1>(MoeArgs);
template __global__ void smallm_moe_kernel<kMxfp4, kRowMajor, 1>(MoeArgs);
template __global__ void smallm_moe_kernel<kMxfp4, kShuffle16x16, 1>(MoeArgs);
#endif
}  // namespace smallm

#if !defined(SMALLM_DEVICE_ONLY)

#include <stdlib.h>
#include <string.h>

#if defined(SMALLM_HIP)
#define GPU_DEV_ATTR_SMS hipDeviceAttributeMultiprocessorCount
#else
#define GPU_DEV_ATTR_SMS cudaDevAttrMultiProcessorCount
#endif

namespace {

constexpr int kMaxDevices = 64;
constexpr int kTwoPassVariant = 5;  // smallm_moe_twopass.h

// The current device and its SM count (read once per device). 0 on success.
int current_device_sms(int& dev, int& sms) {
  static int sms_of[kMaxDevices] = {0};
  if (GPU(GetDevice)(&dev) != 0 || dev >= kMaxDevices) return 1;
  if (sms_of[dev] == 0) {
    int n = 0;
    if (GPU(DeviceGetAttribute)(&n, GPU_DEV_ATTR_SMS, dev) != 0) return 3;
    sms_of[dev] = n;
  }
  sms = sms_of[dev];
  return 0;
}

// Resident-block capacity of `kernel` on the current device with `smem` bytes of dynamic shared
// memory per block, kept per device in the caller's `table` (one table per kernel; recomputed when
// smem changes). Tickets make every launch correct at any residency; capacity only sizes the grid
// so that no block waits for a free slot. 0 on success.
struct Capacity {
  int smem = -1, blocks = 0;
};
int resident_capacity(void (*kernel)(smallm::MoeArgs), Capacity (&table)[kMaxDevices], int& capacity, int smem = 0,
                      int threads = smallm::kThreads) {
  int dev = 0, sms = 0;
  if (const int err = current_device_sms(dev, sms)) return err;
  if (table[dev].smem != smem) {
    int per_sm = 0;
    if (GPU(OccupancyMaxActiveBlocksPerMultiprocessor)(&per_sm, kernel, threads, smem) != 0) return 2;
    table[dev] = {smem, (per_sm > 0 ? per_sm : 1) * sms};
  }
  capacity = table[dev].blocks;
  return 0;
}

// Grid of a kernel whose blocks loop over work items: as many blocks as are resident, fewer when
// there is less work, at least one.
int grid_blocks(long work, int capacity) {
  const long g = work < capacity ? work : capacity;
  return g < 1 ? 1 : (int)g;
}

// Lets `kernel` take `bytes` of dynamic shared memory on the current device; the attribute is
// raised only when a launch needs more than before (`raised`: one table per kernel). 0 on success.
template <class Kernel>
int allow_dynamic_smem(Kernel kernel, int (&raised)[kMaxDevices], int bytes) {
  int dev = 0;
  if (GPU(GetDevice)(&dev) != 0 || dev >= kMaxDevices) return 1;
  if (bytes > raised[dev]) {
    if (GPU(FuncSetAttribute)(reinterpret_cast<const void*>(kernel), GPU(FuncAttributeMaxDynamicSharedMemorySize),
                              bytes) != 0)
      return 4;
    raised[dev] = bytes;
  }
  return 0;
}

// An A/B switch read from the environment: on unless set to a value starting with 0.
bool env_switch_on(const char* name) {
  const char* v = getenv(name);
  return !(v && v[0] == '0');
}
// A number read from the environment (atoi of its value), `fallback` where unset.
int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v ? atoi(v) : fallback;
}

template <int Fmt, int Layout, int Variant>
int launch(const smallm::MoeArgs& a0, gpuStream_t stream) {
  static Capacity table[kMaxDevices];
  int capacity = 0;
  if (const int err = resident_capacity(smallm::smallm_moe_kernel<Fmt, Layout, Variant>, table, capacity)) return err;
  smallm::MoeArgs a = a0;
  const long pairs = (long)a.T * a.K;
  const long distinct_max = pairs < a.E ? pairs : a.E;
  const long items_max = distinct_max * ((long)(a.I / 16) * smallm::max_ksplit(a.D) + (a.D + smallm::kMinRows2 - 1) / smallm::kMinRows2);
  a.nblocks = grid_blocks(items_max, capacity);
  return smallm::launch_kernel(smallm::smallm_moe_kernel<Fmt, Layout, Variant>, a.nblocks, smallm::kThreads, 0, stream,
                               smallm::LaunchOrder::kStream, a);
}


// Two streaming kernels (smallm_moe_twopass.h), each with as many blocks as are resident (fewer
// when there is less work). The down kernel's dynamic shared memory (y of its rows, staged h) is
// raised per device as needed; on CUDA it is a programmatic dependent launch unless SMALLM_PDL=0.
// pdl: the launch carries the attribute (launch_dependent: unless SMALLM_PDL=0).
template <class Kernel>
int launch_maybe_dependent(Kernel kernel, const smallm::MoeArgs& a, int smem, gpuStream_t stream, int threads,
                           bool pdl) {
  using smallm::LaunchOrder;
  return smallm::launch_kernel(kernel, a.nblocks, threads, smem, stream,
                               pdl ? LaunchOrder::kDependent : LaunchOrder::kStream, a);
}
template <class Kernel>
int launch_dependent(Kernel kernel, const smallm::MoeArgs& a, int smem, gpuStream_t stream,
                     int threads = smallm::kThreads) {
  static const bool pdl = env_switch_on("SMALLM_PDL");
  return launch_maybe_dependent(kernel, a, smem, stream, threads, pdl);
}

// Blocks of a down kernel: resident blocks capped by the row-blocks, more while y of a block's
// row-blocks does not fit max_ys bytes.
int down_grid(int N, int rb, int nrb, int capacity, int max_ys = smallm::kMaxYsBytes) {
  using namespace smallm;
  int G = grid_blocks(nrb, capacity);
  while (down_ys_floats(N, rb, down_local_blocks(nrb, G)) * 4 > max_ys && G < nrb) ++G;
  return G;
}

template <int Fmt, int Layout>
int launch_down(const smallm::MoeArgs& a0, gpuStream_t stream) {
  using namespace smallm;
  auto kernel = smallm_down_kernel<Fmt, Layout>;
  static Capacity table[kMaxDevices];
  static int raised[kMaxDevices] = {0};
  int capacity = 0;
  if (const int err = resident_capacity(kernel, table, capacity)) return err;
  MoeArgs a = a0;
  const int N = a.T * a.K, rb = down_rows<Fmt>(a.I), nrb = a.D / rb;
  a.nblocks = down_grid(N, rb, nrb, capacity);
  const int smem = down_smem_bytes(N, a.I, rb, down_local_blocks(nrb, a.nblocks));
  if (const int err = allow_dynamic_smem(kernel, raised, smem)) return err;
  return launch_dependent(kernel, a, smem, stream);
}

#if !defined(SMALLM_HIP)
// SMALLM_GATEUP_PER_SM / SMALLM_DOWN_PER_SM = n (A/B runs, CUDA tensor-core kernels): at most n blocks a SM
// in that kernel's grid, so that one-team blocks of the gate/up and of its programmatic dependent down
// can be resident side by side and the down's W2 loads before its grid wait overlap the gate/up
// (examples/floorprobe/barrier_floor.cu, the co-resident form; slower in every cell measured with the
// package's kernels, examples/results "h200-s38" run 2). Unset or 0: as many as are resident. The down's
// grid still grows past the cap where y of a block's row-blocks would not fit (down_grid).
int cap_per_sm(int capacity, int per_sm) {
  int dev = 0, sms = 0;
  if (per_sm <= 0 || current_device_sms(dev, sms) != 0) return capacity;
  return capacity < per_sm * sms ? capacity : per_sm * sms;
}

constexpr int kBlockReservedSmemBytes = 1024;  // per resident block, beside its own (sm_80+)
// The tensor-core down's dynamic shared memory at the smallest grid its launcher may pick: one block
// per SM (the most row-blocks, so the most y, per block), with h's lo half in lo_bytes.
template <int Fmt>
int down_mma_smem_at(int N, int I, int D, int sms, int lo_bytes) {
  using namespace smallm;
  const int nrb = D / kDownMmaRows;
  return down_mma_smem_bytes<Fmt>(N, I, down_local_blocks(nrb, down_grid(N, kDownMmaRows, nrb, sms, kMaxYsMmaBytes)), lo_bytes);
}
// The bytes of h's lo half for the tensor-core down: 2 (f16) where that stage fits kDownMmaSmemBytes
// and, for FP8, a block with it stays within the 196 KB shared-memory carveout (beside it at least
// 60 KB of L1, which holds the W2 loads in flight); else 1 (e5m2) where that fits; 0: the down runs on
// CUDA cores. Qwen3.5 TP4 (examples/results "h200-ab5" run 4, us, f16 -> e5m2 lo): FP8 14 tokens
// 138.2 -> 133.1, 16: 153.0 -> 147.3, 12: 114.2 -> 115.8 (within the carveout either way); MXFP4,
// whose down is bound by its weights' decode, 14: 137.8 -> 146.5, so it keeps f16 while that fits.
// (Then the block held Routing, and 14 tokens passed the carveout with f16; with MmaRouting it does
// not, and takes f16 up to 14 tokens.)
// SMALLM_DOWN_LO8=0 takes f16 wherever it fits, =1 e5m2 wherever it fits (A/B runs).
constexpr int kDownLo16CarveoutBytes = 196 * 1024;
template <int Fmt>
int down_mma_lo_bytes(const smallm::MoeArgs& a) {
  using namespace smallm;
  static const char* forced = getenv("SMALLM_DOWN_LO8");
  int dev = 0, sms = 0;
  if (!down_mma_takes<Fmt>(a.I) || current_device_sms(dev, sms) != 0) return 0;
  const int f16 = down_mma_smem_at<Fmt>(a.T * a.K, a.I, a.D, sms, 2), e5m2 = down_mma_smem_at<Fmt>(a.T * a.K, a.I, a.D, sms, 1);
  const bool f16_fits = f16 <= kDownMmaSmemBytes, e5m2_fits = e5m2 <= kDownMmaSmemBytes;
  if (forced && forced[0] == '0') return f16_fits ? 2 : 0;
  if (forced && forced[0] == '1') return e5m2_fits ? 1 : 0;
  if (f16_fits && (Fmt == kMxfp4 || f16 + (int)sizeof(MmaRouting) + kBlockReservedSmemBytes <= kDownLo16CarveoutBytes))
    return 2;
  return e5m2_fits ? 1 : 0;
}

// Down on tensor cores (smallm_down_mma_kernel): h staged as halves in dynamic shared memory (kLo8: the
// lo half as e5m2); blocks of kTeams teams of 256 threads; each job's loads hold kCh chunks of I
// (kSplit: a job's parts of kCh chunks each, down_mma_split).
template <int Fmt, int Layout, int kTeams, bool kLo8, int kCh, bool kSplit>
int launch_down_mma(const smallm::MoeArgs& a0, gpuStream_t stream) {
  using namespace smallm;
  auto kernel = smallm_down_mma_kernel<Fmt, Layout, kTeams, kLo8, kCh, kSplit>;
  // The kernel reads kCh chunks of I (kSplit: its h stage up to kDownSplitChunks, in parts of kCh): given
  // an I of more it would skip the rest; its routing holds kMmaMaxPairs pairs (dispatch bugs).
  if (down_mma_chunks<Fmt>(a0.I) > (kSplit ? kDownSplitChunks : kCh) || kSplit != down_mma_split<Fmt>(a0.I)) return 6;
  if (a0.T * a0.K > kMmaMaxPairs) return 7;
  static Capacity table[kMaxDevices], table_smem[kMaxDevices];
  static int raised[kMaxDevices] = {0};
  static const int per_sm = env_int("SMALLM_DOWN_PER_SM", 0);
  int capacity = 0;
  if (const int err = resident_capacity(kernel, table, capacity, 0, kThreads * kTeams)) return err;
  capacity = cap_per_sm(capacity, per_sm);
  MoeArgs a = a0;
  const int N = a.T * a.K, nrb = a.D / kDownMmaRows;
  // Staged h can be large (down_mma_lo_bytes: up to kDownMmaSmemBytes in all): size the grid by the
  // blocks that fit with it; a smaller grid gives each block more row-blocks (more y), so settle in
  // a few steps.
  a.nblocks = down_grid(N, kDownMmaRows, nrb, capacity, kMaxYsMmaBytes);
  int smem = 0;
  for (int step = 0; step < 4; ++step) {
    smem = down_mma_smem_bytes<Fmt>(N, a.I, down_local_blocks(nrb, a.nblocks), kLo8 ? 1 : 2);
    if (const int err = allow_dynamic_smem(kernel, raised, smem)) return err;
    if (const int err = resident_capacity(kernel, table_smem, capacity, smem, kThreads * kTeams)) return err;
    capacity = cap_per_sm(capacity, per_sm);
    if (capacity >= a.nblocks) break;
    a.nblocks = down_grid(N, kDownMmaRows, nrb, capacity, kMaxYsMmaBytes);
  }
  return launch_dependent(kernel, a, smem, stream, kThreads * kTeams);
}

// From kDownTeamsMinPairs pairs on, one block of two teams (16 warps sharing the routing, the h
// stage and y: twice the W2 in flight per block), else one team. Qwen3.5 FP8 on the H200, forced one
// vs two teams (examples/results "h200-ab4" run 3, us): TP4 2 tokens (22 pairs) 26.7 vs 27.2,
// 4 (44) 46.5 vs 45.5, 8 (88) 86.5 vs 80.6, 12 (132) 123.3 vs 113.3; TP8 2 tokens 17.3 vs 17.9,
// 4: 29.1 vs 28.9, 16: 99.6 vs 83.7; MXFP4 alike. 33 pairs (3 tokens) was not measured then: the rule
// split at the routing's one-warp limit. SMALLM_DOWN_TEAMS=1 or 2 forces either (A/B runs).
// For I up to 256 (Qwen3.5 TP4/TP8) two teams from 22 pairs: on cd73180's kernels they won at 2 tokens
// (examples/results "h200-s38" run 3, three interleaved rounds each, us one vs two teams): FP8 TP4
// 24.4-24.6 vs 24.0-24.1, TP8 15.9-16.0 vs 15.6-15.7, MXFP4 TP8 16.1 vs 15.7, MXFP4 TP4 23.3-23.5 vs
// 23.5-23.6; at 1 token (11 pairs) one team did (FP8 15.9-16.0 vs 16.3, 11.7-11.8 vs 12.0; MXFP4 14.4
// vs 14.6-14.7, 10.8 vs 10.9-11.0). Other D at I = 256 ("h200-s39" run 3) did not argue for a change:
// D = 6144, top-11 MXFP4 one team 0.7 us faster at 11 pairs, level at 22, two 0.4-1.2 faster from 33
// (FP8 runs there on CUDA cores: D = 6144 is over the tensor-core kernels' steps); D = 2048 top-5 FP8
// one team 1.1 faster at 5 pairs, level at 10-15, 0.2 slower at 20.
// Wider I (MXFP4 at I = 384; FP8 then ran that down on CUDA cores), "h200-s39" runs 2-3, three rounds: one
// team at 1 token in every shape (0.1-1.1 us faster at 5-8 pairs); from 2 tokens two teams at every
// D measured (2048, 5120, 6144, 7168: 0.3-10 us faster at 10-48 pairs, level at D = 7168 20 pairs)
// except D = 4096: there top-8 (Qwen3-235B-like) was 0-0.6 us faster with one team at 24 and 32 pairs
// ("h200-s38" run 5: 0.3-0.5), level at 16, and top-5 with one team level to 0.5 slower. At D = 4096 a
// one-team grid gives each block exactly one row-block (D / 16 = 256 in (SMs, 2 SMs]), so two-team
// blocks, two row-blocks each, give a warp no fewer jobs; outside that range the one-team grid has
// no more blocks than SMs (D / 16 <= SMs) or blocks with uneven row-block counts, and two teams gained.
// Wide I therefore takes two teams from 2 tokens (and at least kDownTeamsWideMinPairs pairs, the fewest
// measured to gain) except in that range, which keeps kDownTeamsMinPairs.
// FP8 jobs split along I (split: I = 384 in parts of 256 and 128) have no such exception: at D = 4096 two teams
// were faster from 2 tokens ("h200-s40" run 4, three interleaved rounds, us one vs two teams):
// Qwen3-235B-like 2 tokens (16 pairs) 27.7-27.8 vs 27.3-27.5, 3 (24) 37.9-38.1 vs 37.2-37.3, 4 (32)
// 48.0-48.1 vs 46.7-46.8; Qwen3.5's D/E/K at I = 384, 2 tokens (22) 36.3-36.4 vs 35.5-35.7; one team at
// 1 token (17.4 vs 18.0-18.1; 23.6 vs 24.1-24.2).
// Where a one-team grid has no more blocks than SMs (D / 16 <= SMs: D <= 2048 on the H200), a one-team
// block is the SM's only one (8 warps), and two teams gain at I >= 256 from kDownTeamsWideMinPairs pairs:
// E = 513 top-10 at D = 2048 (examples/results "h200-s44" run 1, two rounds, us one vs two teams): I = 256
// 1 token (10 pairs) 11.5-11.6 vs 11.1, 2 tokens 17.4-17.5 vs 16.7; I = 512 1 token 21.3 vs 18.8
// ("h200-s43" run 3). Forced both ways ("h200-s44" run 2): FP8 I = 256 1 token 11.6 vs 11.3, 2: 17.5 vs
// 16.8; FP8 I = 512 1: 20.1 vs 17.2, 2: 30.7 vs 28.7; MXFP4 I = 256 1: 11.9 vs 10.4, 2: 18.2 vs 15.9;
// MXFP4 I = 512 1: 17.7 vs 15.1, 2: level. At I = 128 they did not gain (1 token 8.9 vs 9.1, 2 tokens 12.2
// vs 12.0), nor top-5 at I = 256 with 5 pairs (one team 1.1 faster, "h200-s39" run 3): those keep the
// rules above.
constexpr int kDownTeamsMinPairs = 33;
constexpr int kDownTeamsFewBlocksMinInter = 256;
constexpr int kDownTeamsNarrowMaxInter = 256;
constexpr int kDownTeamsNarrowMinPairs = 22;
constexpr int kDownTeamsWideMinPairs = 10;
int down_teams_min_pairs(int I, int D, int K, int sms, bool split) {
  const int nrb = D / smallm::kDownMmaRows;
  if (nrb <= sms && I >= kDownTeamsFewBlocksMinInter) return kDownTeamsWideMinPairs;  // one block a SM
  if (I <= kDownTeamsNarrowMaxInter) return kDownTeamsNarrowMinPairs;
  if (!split && nrb > sms && nrb <= 2 * sms) return kDownTeamsMinPairs;  // one-team blocks: one row-block each
  return 2 * K > kDownTeamsWideMinPairs ? 2 * K : kDownTeamsWideMinPairs;
}
template <int Fmt, int Layout, int kCh, bool kSplit>
int launch_down_mma_teams_ch(const smallm::MoeArgs& a, bool lo8, gpuStream_t stream) {
  static const char* forced = getenv("SMALLM_DOWN_TEAMS");
  int dev = 0, sms = 0;
  if (const int err = current_device_sms(dev, sms)) return err;
  int teams = a.T * a.K >= down_teams_min_pairs(a.I, a.D, a.K, sms, kSplit) ? 2 : 1;
  if (forced && (forced[0] == '1' || forced[0] == '2')) teams = forced[0] - '0';
  if (teams == 2)
    return lo8 ? launch_down_mma<Fmt, Layout, 2, true, kCh, kSplit>(a, stream)
               : launch_down_mma<Fmt, Layout, 2, false, kCh, kSplit>(a, stream);
  return lo8 ? launch_down_mma<Fmt, Layout, 1, true, kCh, kSplit>(a, stream)
             : launch_down_mma<Fmt, Layout, 1, false, kCh, kSplit>(a, stream);
}
// Where I takes at most two chunks (MXFP4 to I = 256, FP8 to 128), the kernel whose jobs hold two
// chunks, three jobs' W2 in flight per warp instead of two (smallm::down_mma_ring_chunks).
// SMALLM_DOWN_RING=2 forces the two-job ring (A/B runs). FP8 over four chunks (I > 256) takes the split
// kernel, whose jobs' parts hold four chunks (SMALLM_DOWN_RING does not apply).
template <int Fmt, int Layout>
int launch_down_mma_teams(const smallm::MoeArgs& a, bool lo8, gpuStream_t stream) {
  static const char* forced = getenv("SMALLM_DOWN_RING");
  if constexpr (Fmt == smallm::kFp8Block128) {
    if (smallm::down_mma_split<Fmt>(a.I)) return launch_down_mma_teams_ch<Fmt, Layout, smallm::kDownMmaChunks, true>(a, lo8, stream);
  }
  if (smallm::down_mma_ring_chunks<Fmt>(a.I) == 2 && !(forced && forced[0] == '2'))
    return launch_down_mma_teams_ch<Fmt, Layout, 2, false>(a, lo8, stream);
  return launch_down_mma_teams_ch<Fmt, Layout, smallm::kDownMmaChunks, false>(a, lo8, stream);
}
#endif

template <int Fmt, int Layout, int kRows, int kJ>
int launch_gateup(const smallm::MoeArgs& a0, gpuStream_t stream) {
  using namespace smallm;
  static Capacity table[kMaxDevices];
  int capacity = 0;
  if (const int err = resident_capacity(smallm_gateup_kernel<Fmt, Layout, kRows, kJ>, table, capacity)) return err;
  MoeArgs a = a0;
  const long pairs = (long)a.T * a.K;
  a.nblocks = grid_blocks((pairs < a.E ? pairs : a.E) * (a.I / (kRows / 2)), capacity);
  return launch_kernel(smallm_gateup_kernel<Fmt, Layout, kRows, kJ>, a.nblocks, kThreads, 0, stream, LaunchOrder::kStream, a);
}

#if !defined(SMALLM_HIP)
// Gate/up on tensor cores (smallm_gateup_mma_kernel): x staged as f16 in dynamic shared memory;
// blocks of kTeams teams of 256 threads.
template <int Fmt, int Layout, int kJ, int kTeams>
int launch_gateup_mma(const smallm::MoeArgs& a0, gpuStream_t stream) {
  using namespace smallm;
  auto kernel = smallm_gateup_mma_kernel<Fmt, Layout, kJ, kTeams>;
  static Capacity table[kMaxDevices];
  static int raised[kMaxDevices] = {0};
  if (a0.T * a0.K > kMmaMaxPairs) return 7;  // a dispatch bug: the tensor-core path takes at most kMmaMaxPairs
  MoeArgs a = a0;
  const int smem = (int)gateup_mma_smem_bytes(a.T, a.D);  // x up to kXStageBytes, fewer blocks per SM when large
  if (const int err = allow_dynamic_smem(kernel, raised, smem)) return err;
  static const int per_sm = env_int("SMALLM_GATEUP_PER_SM", 0);
  int capacity = 0;
  if (const int err = resident_capacity(kernel, table, capacity, smem, kThreads * kTeams)) return err;
  capacity = cap_per_sm(capacity, per_sm);
  const long pairs = (long)a.T * a.K;
  const long jobs = (pairs < a.E ? pairs : a.E) * (a.I / 4);
  a.nblocks = grid_blocks((jobs + kTeams - 1) / kTeams, capacity);
  // A programmatic dependent of whatever precedes it on the stream (the router's top-k in a model, the
  // previous call's down in the bench) unless SMALLM_GATEUP_PDL=0: its blocks may start once that
  // kernel's blocks have all signalled or exited, before its grid completes, and wait
  // (griddepcontrol.wait) before their first global read or write. Qwen3.5 on the H200: 1 token 1-7 %
  // faster, 2 tokens 0-3 %, level from 4 (examples/results "h200-s33" run 1; tests/test_kernel_gpu.py
  // runs calls back to back after a copy and a fill, eagerly and in a graph).
  static const bool pdl = env_switch_on("SMALLM_GATEUP_PDL");
  return launch_maybe_dependent(kernel, a, smem, stream, kThreads * kTeams, pdl);
}

// One team per block while two such blocks fit an SM's 196 KB shared-memory carveout, else one
// block of two teams. Two blocks past 196 KB take the 228 KB carveout and leave 28 KB of L1, where
// the weight loads in flight are staged: the gate/up's job loop took 44 % longer from 8 to 9 tokens
// at TP4 ("h200-ab2" run 6). Two teams hold x once per SM, which keeps the carveout at 100-164 KB up
// to 16 tokens (TP4 10 tokens 125.8 -> 109.8 us; examples/results "h200-ab3"). SMALLM_GATEUP_TEAMS=1
// or 2 forces either (A/B runs).
// FP8 row-major with kJ = 8 (2048 < D <= 4096; measured at 4096) takes two teams from
// kFp8TeamsMinTokens tokens on, though two blocks would fit: since its two-team loop settles each
// job's loads (the gate/up kernel's kSettle), two teams are faster at 2-9 tokens (TP4 8 tokens
// 79.8 -> 71.3 us, TP8 47.8 -> 42.3; 1 token equal at TP4, 0.2 us slower at TP8; examples/results
// "h200-ab13" run 2, SMALLM_GATEUP_TEAMS=2 beside the default). MXFP4 was slower at 1-6 tokens that
// way (TP4 1 token 16.2 -> 18.3 us) and keeps the rule above.
constexpr int kTwoBlockCarveoutBytes = 196 * 1024;
constexpr int kFp8TeamsMinTokens = 2;
struct StaticSmem {
  int bytes = -1;  // a kernel's static shared memory, once read
};
template <int Fmt, int Layout, int kJ>
int launch_gateup_mma_teams(const smallm::MoeArgs& a, gpuStream_t stream) {
  static const char* forced = getenv("SMALLM_GATEUP_TEAMS");
  static StaticSmem one_team[kMaxDevices];
  int teams = 1;
  if (forced && (forced[0] == '1' || forced[0] == '2')) {
    teams = forced[0] - '0';
  } else if (Fmt == smallm::kFp8Block128 && Layout == smallm::kRowMajor && kJ == 8 && a.T >= kFp8TeamsMinTokens) {
    teams = 2;
  } else {
    int dev = 0;
    if (GPU(GetDevice)(&dev) != 0 || dev >= kMaxDevices) return 1;
    if (one_team[dev].bytes < 0) {
      GPU(FuncAttributes) fa;
      const void* k = reinterpret_cast<const void*>(smallm::smallm_gateup_mma_kernel<Fmt, Layout, kJ, 1>);
      if (GPU(FuncGetAttributes)(&fa, k) != 0) return 5;
      one_team[dev].bytes = (int)fa.sharedSizeBytes;
    }
    const int block = one_team[dev].bytes + (int)smallm::gateup_mma_smem_bytes(a.T, a.D) + kBlockReservedSmemBytes;
    teams = 2 * block > kTwoBlockCarveoutBytes ? 2 : 1;
  }
  if (teams == 2) return launch_gateup_mma<Fmt, Layout, kJ, 2>(a, stream);
  return launch_gateup_mma<Fmt, Layout, kJ, 1>(a, stream);
}
#endif

#if !defined(SMALLM_HIP)
// FP8 row-major gate/up by TMA tiles and wgmma (smallm_gateup_tma.h; sm_90a builds on compute capability
// 9.x), then smallm_tma_slice_sum_kernel writes h. SMALLM_GATEUP_TMA=1 takes it wherever it fits
// (gateup_tma_fits) with fp32 promotion per 128-wide K block, =2 per 32-k step; =3 the whole MoE in one
// kernel (smallm_moe_tma_kernel) where moe_tma_fits, else as 2; unset or 0, the mma.sync gate/up runs as
// before.
int gateup_tma_mode() {
  static const int mode = [] {
    const char* v = getenv("SMALLM_GATEUP_TMA");
    return v && v[0] >= '1' && v[0] <= '3' ? v[0] - '0' : 0;
  }();
  return mode;
}
using TmaEncode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                               const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                               CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
TmaEncode tma_encoder() {  // the driver's cuTensorMapEncodeTiled through the runtime (no libcuda link)
  static const TmaEncode fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return static_cast<TmaEncode>(nullptr);
    return reinterpret_cast<TmaEncode>(p);
  }();
  return fn;
}
// Blocks: the most, up to one per SM, whose warpgroups (two per block) are a multiple of the K slices,
// so that each warpgroup's jobs share one slice; 0 where there is none.
int gateup_tma_grid(int D, int sms) {
  const int S = D / smallm::kTmaSlice;
  for (int g = sms; g >= 1; --g)
    if ((smallm::kTmaWarpgroups * g) % S == 0) return g;
  return 0;
}
bool gateup_tma_device(int& sms, int& smem_optin) {  // compute capability 9.x, an sm_90a build
  static int ok_of[kMaxDevices] = {0}, optin_of[kMaxDevices] = {0};  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (current_device_sms(dev, sms) != 0) return false;
  if (ok_of[dev] == 0) {
    int major = 0;
    const bool built = strcmp(smallm_build_arch(), "sm_90a") == 0;
    ok_of[dev] = built && cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                         major == 9 &&
                         cudaDeviceGetAttribute(&optin_of[dev], cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
                         tma_encoder() != nullptr
                     ? 1
                     : 2;
  }
  smem_optin = optin_of[dev];
  return ok_of[dev] == 1;
}
bool gateup_tma_fits(const smallm::MoeArgs& a) {
  using namespace smallm;
  int sms = 0, optin = 0;
  if (!gateup_tma_mode() || !gateup_tma_device(sms, optin)) return false;
  if (a.T > kTmaMaxTokens || a.T * a.K > kTmaMaxPairs || a.E > kMaxExperts) return false;
  if (a.D % kTmaSlice || a.I % 128 || (long)a.E * 2 * a.I > 0x7fffffffL || gateup_tma_grid(a.D, sms) == 0) return false;
  if (a.Iw != a.I) return false;  // the TMA maps address unpadded weights only: padded I takes the plain kernels
  if ((long)a.T * a.K * a.I + tma_partial_words(a.T, a.K, a.D, a.I) > h_words(a.D, a.I)) return false;
  if (tma_gateup_smem_bytes(a.T) > optin) return false;
  return reinterpret_cast<uintptr_t>(a.w13) % 16 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.s13) % 16 == 0;
}
// A row-major weight tensor of `rows` rows of `kbytes` bytes as a 2-D tensor map: boxes of box_bytes
// (default 128) x box_rows, with the 128-byte swizzle (wgmma's K-major A layout) unless !swizzle. 0, or 8
// where the driver refuses it. (examples/wgmma/mxfp4_tma_probe.cu encodes its maps with it too.)
int encode_rows_map(CUtensorMap& map, const uint8_t* base, long kbytes, long rows, int box_rows,
                    int box_bytes = smallm::kTmaBoxBytes, bool swizzle = true) {
  const cuuint64_t dims[2] = {(cuuint64_t)kbytes, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)kbytes};
  const cuuint32_t box[2] = {(cuuint32_t)box_bytes, (cuuint32_t)box_rows}, estr[2] = {1, 1};
  return tma_encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<uint8_t*>(base), dims, strides, box, estr,
                       CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
             ? 0
             : 8;
}
int launch_gateup_tma(const smallm::MoeArgs& a, gpuStream_t stream) {
  using namespace smallm;
  static int raised[2][kTmaMaxTokens / 4 + 1][kMaxDevices] = {};
  const bool steps = gateup_tma_mode() >= 2;
  int dev = 0, sms = 0;
  if (const int err = current_device_sms(dev, sms)) return err;
  const int grid = gateup_tma_grid(a.D, sms), nt = (a.T + 3) / 4, smem = (int)tma_gateup_smem_bytes(a.T);
  CUtensorMap map;  // W13 as (k bytes, rows), boxes of 128 x 32
  if (const int err = encode_rows_map(map, a.w13, a.D, (long)a.E * 2 * a.I, kTmaBoxRows)) return err;
  using Kernel = void (*)(const CUtensorMap, MoeArgs);
  static const Kernel kernels[5][2] = {  // [NT - 1][per 32-k step]
      {smallm_gateup_tma_kernel<1, false>, smallm_gateup_tma_kernel<1, true>},
      {smallm_gateup_tma_kernel<2, false>, smallm_gateup_tma_kernel<2, true>},
      {smallm_gateup_tma_kernel<3, false>, smallm_gateup_tma_kernel<3, true>},
      {smallm_gateup_tma_kernel<4, false>, smallm_gateup_tma_kernel<4, true>},
      {smallm_gateup_tma_kernel<5, false>, smallm_gateup_tma_kernel<5, true>}};
  const Kernel kernel = kernels[nt - 1][steps ? 1 : 0];
  if (const int err = allow_dynamic_smem(kernel, raised[steps][nt], smem)) return err;
  if (const int err = launch_kernel(kernel, grid, kTmaThreads, smem, stream, LaunchOrder::kStream, map, a)) return err;
  // the slice sum as a programmatic dependent of the gate/up (unless SMALLM_PDL=0), whose blocks wait
  // for it (griddepcontrol.wait); the down follows as the slice sum's dependent (launch_dependent)
  MoeArgs b = a;
  b.nblocks = (a.T * a.K * a.I + 255) / 256;
  return launch_dependent(smallm_tma_slice_sum_kernel, b, 0, stream);
}

// SMALLM_GATEUP_TMA=3: the whole FP8 row-major MoE in one kernel (smallm_moe_tma_kernel) where the call
// fits it: at most 10 tokens, I at most 256, the workspace's y and counters large enough, and what
// gateup_tma_fits asks.
bool moe_tma_fits(const smallm::MoeArgs& a) {
  using namespace smallm;
  if (gateup_tma_mode() != 3 || a.T > kTmaFusedMaxTokens || a.I > kTmaFusedMaxInter || !gateup_tma_fits(a)) return false;
  if ((long)a.E * a.D > 0x7fffffffL) return false;
  int dev = 0, sms = 0;
  if (current_device_sms(dev, sms) != 0) return false;
  if (tma_fused_y_words(a.T, a.K, a.D, a.I, tma_down_groups(gateup_tma_grid(a.D, sms), a.D)) > (long)kMaxPairs * a.D)
    return false;
  if (kSyncTok + tma_fused_sync_words(a.T, a.K, a.D, a.I) > sync_words(a.T, a.D)) return false;
  return reinterpret_cast<uintptr_t>(a.w2) % 16 == 0 && reinterpret_cast<uintptr_t>(a.y) % 16 == 0;
}
int launch_moe_tma(const smallm::MoeArgs& a, gpuStream_t stream) {
  using namespace smallm;
  static int raised[kTmaFusedMaxTokens / 2 + 1][kMaxDevices] = {};
  int dev = 0, sms = 0;
  if (const int err = current_device_sms(dev, sms)) return err;
  const int grid = gateup_tma_grid(a.D, sms), nt2 = (a.T + 1) / 2, smem = (int)tma_gateup_smem_bytes(a.T);
  CUtensorMap m13, m2;  // W13 (k bytes, rows) in boxes of 128 x 32, W2 in boxes of 128 x 64
  if (const int err = encode_rows_map(m13, a.w13, a.D, (long)a.E * 2 * a.I, kTmaBoxRows)) return err;
  if (const int err = encode_rows_map(m2, a.w2, a.I, (long)a.E * a.D, kTmaDownRows)) return err;
  using Kernel = void (*)(const CUtensorMap, const CUtensorMap, MoeArgs);
  static const Kernel kernels[5] = {smallm_moe_tma_kernel<1>, smallm_moe_tma_kernel<2>, smallm_moe_tma_kernel<3>,
                                    smallm_moe_tma_kernel<4>, smallm_moe_tma_kernel<5>};
  const Kernel kernel = kernels[nt2 - 1];
  if (const int err = allow_dynamic_smem(kernel, raised[nt2], smem)) return err;
  // cooperative: every block resident at once (the kernel's blocks wait on each other's counters)
  return launch_kernel(kernel, grid, kTmaThreads, smem, stream, LaunchOrder::kCooperative, m13, m2, a);
}
#endif

#if !defined(SMALLM_HIP)
// Tokens per part (near-equal, as mma_split_tokens) where the tensor-core down's stage fits a block in
// every part: `part` itself where it already does (or where no part count would: the down runs on CUDA
// cores either way), else the fewest parts of at most the most tokens that fit
// (kernels.down_fit_part mirrors this). The stage grows with the pairs, so the most that fit is found
// downwards from `part`.
template <int Fmt>
int down_fit_part(const smallm::MoeArgs& a, int part) {
  if (!smallm::down_mma_takes<Fmt>(a.I)) return part;
  smallm::MoeArgs b = a;
  b.T = part < a.T ? part : a.T;
  if (down_mma_lo_bytes<Fmt>(b)) return part;
  while (b.T > 1) {
    --b.T;
    if (down_mma_lo_bytes<Fmt>(b)) {
      const int parts = (a.T + b.T - 1) / b.T;
      return (a.T + parts - 1) / parts;
    }
  }
  return part;
}
#endif

template <int Fmt, int Layout>
int launch_twopass(const smallm::MoeArgs& a, gpuStream_t stream) {
  using namespace smallm;
#if !defined(SMALLM_HIP)
  // FP8 and MXFP4 on tensor cores unless SMALLM_MMA=0 (A/B runs): gate/up when x fits its f16 stage,
  // down when its stage (h, y) fits a block's shared memory (down_mma_lo_bytes).
  static const bool mma = env_switch_on("SMALLM_MMA");
  static const bool mma_down = env_switch_on("SMALLM_MMA_DOWN");  // 0: down on CUDA cores (A/B runs)
  static const bool split = env_switch_on("SMALLM_MMA_SPLIT");    // 0: no split (A/B runs)
  // N > 0: parts of at most N tokens also where the call fits one (A/B runs of the split's threshold;
  // at 10, Qwen3.5 FP8 TP4 20 tokens was 1.7 % faster, 19 and every TP8 or MXFP4 count slower:
  // examples/results "h200-ab15" run 1; again with the gate/up within 164 KB at 19 tokens, "h200-s36"
  // run 1: FP8 TP4 20 tokens 1 % faster, the rest 5-21 % slower)
  static const int split_tokens = env_int("SMALLM_MMA_SPLIT_TOKENS", 0);
  // x over the gate/up's f16 stage (more than 20 tokens at D = 4096), or the pairs over kMmaMaxPairs
  // (more than 20 tokens with 16 slots): the call as consecutive calls of near-equal token counts that
  // fit (mma_split_tokens), each on tensor cores. Each reads its own experts' weights again, but the
  // CUDA-core kernels were 10.7-13.1x the read floor at 32-48 tokens (MXFP4, examples/results
  // "h200-ab7" run 4). A token's output depends on its own row and routing only, so the result is the
  // one call's; the gate/up of a later part waits for the earlier part's down (stream order, or
  // griddepcontrol.wait where it is a programmatic dependent) before it writes h.
  // Also parts whose down stays on tensor cores where the call's (or its part's) staged h and y would
  // not fit a block (down_mma_lo_bytes 0, e.g. D = 2048, I = 256 from 26 tokens at top-10: 26 -> 13 + 13).
  // There, with the down on CUDA cores, 26-32 tokens took 163.1-193.5 us; split, 129.0-152.4 us (21 %
  // faster; still 7-9 % slower than SGLang's layer, above the gate's cap), examples/results "h200-s46"
  // run 1. SMALLM_MMA_SPLIT_DOWN=0 (A/B runs): the down on CUDA cores there instead.
  static const bool split_down = env_switch_on("SMALLM_MMA_SPLIT_DOWN");
  int part = mma && split ? mma_split_tokens<Fmt>(a.T, a.K, a.D, split_tokens) : 0;
  if (split_down && mma_down && part > 0) part = down_fit_part<Fmt>(a, part);
  if (part > 0 && part < a.T) {
    for (int t0 = 0; t0 < a.T; t0 += part) {
      MoeArgs b = a;
      b.T = part < a.T - t0 ? part : a.T - t0;
      b.x = a.x + (size_t)t0 * a.D;
      b.out = a.out + (size_t)t0 * a.D;
      b.topk_w = a.topk_w + (size_t)t0 * a.K;
      b.topk_ids = a.topk_ids + (size_t)t0 * a.K;
      if (const int err = launch_twopass<Fmt, Layout>(b, stream)) return err;
    }
    return 0;
  }
  if (mma && gateup_mma_fits<Fmt>(a.T, a.K, a.D)) {
    const bool j4 = a.D / mma_step_values<Fmt>() <= 4 * kWarps;
    if (Fmt == kFp8Block128 && Layout == kRowMajor && moe_tma_fits(a)) return launch_moe_tma(a, stream);
    int err = 0;
    if (Fmt == kFp8Block128 && Layout == kRowMajor && gateup_tma_fits(a))
      err = launch_gateup_tma(a, stream);
    else
      err = j4 ? launch_gateup_mma_teams<Fmt, Layout, 4>(a, stream) : launch_gateup_mma_teams<Fmt, Layout, 8>(a, stream);
    if (err) return err;
    const int lo_bytes = mma_down ? down_mma_lo_bytes<Fmt>(a) : 0;
    if (lo_bytes) return launch_down_mma_teams<Fmt, Layout>(a, lo_bytes == 1, stream);
    return launch_down<Fmt, Layout>(a, stream);
  }
#endif
  const GateUpShape g = gateup_shape<Fmt>(a.D);
  int err = -1;
  if (g.rows == 8 && g.vectors == 4) err = launch_gateup<Fmt, Layout, 8, 4>(a, stream);
  if (g.rows == 8 && g.vectors == 8) err = launch_gateup<Fmt, Layout, 8, 8>(a, stream);
  if (g.rows == 4 && g.vectors == 8) err = launch_gateup<Fmt, Layout, 4, 8>(a, stream);
  if (err) return err;
  return launch_down<Fmt, Layout>(a, stream);
}

}  // namespace

// Shapes the two-pass kernels take: a W13 row over 64 threads fits 8 vectors each (fp8 D <= 8192).
bool twopass_fits(const smallm::MoeArgs& a, int fmt) {
  using namespace smallm;
  const GateUpShape g = fmt == kMxfp4 ? gateup_shape<kMxfp4>(a.D) : gateup_shape<kFp8Block128>(a.D);
  return g.rows > 0;
}

int launch_twopass_kernels(const smallm::MoeArgs& a, int fmt, int layout, gpuStream_t s) {
  using namespace smallm;
  if (fmt == kFp8Block128 && layout == kRowMajor) return launch_twopass<kFp8Block128, kRowMajor>(a, s);
  if (fmt == kFp8Block128 && layout == kShuffle16x16) return launch_twopass<kFp8Block128, kShuffle16x16>(a, s);
  if (fmt == kMxfp4 && layout == kRowMajor) return launch_twopass<kMxfp4, kRowMajor>(a, s);
  if (fmt == kMxfp4 && layout == kShuffle16x16) return launch_twopass<kMxfp4, kShuffle16x16>(a, s);
  return -1;
}


template <int Variant>
int launch_variant(const smallm::MoeArgs& args, int fmt, int layout, gpuStream_t s) {
  using namespace smallm;
  if (fmt == kFp8Block128 && layout == kRowMajor) return launch<kFp8Block128, kRowMajor, Variant>(args, s);
  if (fmt == kFp8Block128 && layout == kShuffle16x16) return launch<kFp8Block128, kShuffle16x16, Variant>(args, s);
  if (fmt == kMxfp4 && layout == kRowMajor) return launch<kMxfp4, kRowMajor, Variant>(args, s);
  if (fmt == kMxfp4 && layout == kShuffle16x16) return launch<kMxfp4, kShuffle16x16, Variant>(args, s);
  return -1;
}

int smallm_moe_launch(const smallm::MoeArgs& args, int fmt, int layout, void* stream) {
  gpuStream_t s = reinterpret_cast<gpuStream_t>(stream);
  static const int x_prefetch = env_switch_on("SMALLM_X_PREFETCH") ? 1 : 0;  // 0: x-slice prefetch off (A/B runs)
  smallm::MoeArgs a = args;
  a.x_prefetch = x_prefetch;
  a.pair_magic = smallm::PairToken::magic_of(a.K);
  a.tile_magic = smallm::JobExpert::magic_of(a.I / 4);
  // SMALLM_KERNEL_VARIANT forces a variant (A/B runs; read once per process).
  static const int forced = [] {
    const int x = env_int("SMALLM_KERNEL_VARIANT", -1);
#if defined(SMALLM_HIP)
    return x == 0 || x == kTwoPassVariant ? x : -1;
#else
    return x == 0 || x == 1 || x == kTwoPassVariant ? x : -1;
#endif
  }();
#if !defined(SMALLM_HIP)
  // Default on CUDA (H200, examples/results "h200-twopass"): the two streaming kernels (variant 5)
  // for every shape they take. Other shapes run the block kernel: FP8 variant 1 (no cross-item
  // pipelining, 3 blocks/SM), MXFP4 variant 0 ("h200-experiments").
  const int block_default = fmt == smallm::kFp8Block128 ? 1 : 0;
  int variant = forced >= 0 ? forced : kTwoPassVariant;
#else
  // gfx950: the pipelined block kernel until the two-kernel path is measured on AMD hardware.
  const int block_default = 0;
  int variant = forced >= 0 ? forced : 0;
#endif
  if (variant == kTwoPassVariant) {
    if (twopass_fits(a, fmt)) return launch_twopass_kernels(a, fmt, layout, s);
    variant = block_default;
  }
#if !defined(SMALLM_HIP)
  if (variant == 1) return launch_variant<1>(a, fmt, layout, s);
#endif
  return launch_variant<0>(a, fmt, layout, s);
}

#ifndef SMALLM_BUILD_ARCH
#define SMALLM_BUILD_ARCH "unknown"
#endif
const char* smallm_build_arch() { return SMALLM_BUILD_ARCH; }
#if defined(SMALLM_EMU)
const char* smallm_emu_last_error() { return smallm_emu::last_error().c_str(); }
// Weight reads counted per granule of up to kMaxTracks regions until the next reset (smallm_emu.h); returns false
// when the regions are full. reset returns the bytes read outside every region since the last reset, and clears them.
bool smallm_emu_track_reads(const void* base, size_t bytes, int32_t* counts, size_t granule) {
  if (smallm_emu::n_tracks() == smallm_emu::kMaxTracks) return false;
  smallm_emu::tracks()[smallm_emu::n_tracks()++] = {static_cast<const uint8_t*>(base), bytes, counts, granule};
  return true;
}
long long smallm_emu_reset_reads() {
  smallm_emu::n_tracks() = 0;
  return smallm_emu::untracked_bytes().exchange(0);
}
#endif

#endif  // !SMALLM_DEVICE_ONLY
