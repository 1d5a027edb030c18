// smallm_compat.h: the few runtime names and micro-operations that differ between
// AMD gfx950 (HIP, wave64) and NVIDIA sm_90a (CUDA, warp32), with a portable version of every
// micro-operation for any other target. Everything above this header is shared.
//
// Four ways this file is compiled (the fourth, SMALLM_EMU, runs the gfx950 build on a CPU: smallm_emu.h):
//   * CUDA (nvcc, sm_90a and others): uses the CUDA runtime names.
//   * HIP with ROCm headers (hipcc / torch ROCm build): uses clang AMDGPU builtins directly.
//   * HIP without any headers (`-nogpuinc`, the gfx950 ISA check on a CPU machine): the same
//     builtins; this header declares the attribute macros itself.
// On HIP every device-side operation goes through clang builtins in both modes, so the ISA
// checked on CPU is the ISA the installed package runs.
#pragma once

#include <stdint.h>

#if defined(SMALLM_EMU)
#include "smallm_emu.h"  // the gfx950 build run on a CPU (tests only); defines SMALLM_HIP
#elif defined(__HIP__)
#define SMALLM_HIP 1
#if __has_include(<hip/hip_runtime.h>) && !defined(SMALLM_DEVICE_ONLY)
#include <hip/hip_runtime.h>
#else
#ifndef __global__
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#ifndef __launch_bounds__
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
#endif
#endif
#elif defined(__CUDACC__)
#define SMALLM_CUDA 1
#include <cuda_runtime.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SMALLM_SM80_ASYNC 1  // cp.async
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#include <cuda_fp8.h>
#define SMALLM_SM89_FP8 1
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SMALLM_SM90_PDL 1  // griddepcontrol
#endif
#endif

#define SMALLM_DEV __device__ __forceinline__

namespace smallm {

typedef __SIZE_TYPE__ size_t;

// On HIP the kernels use these plain structs whether or not hip_runtime.h is included (it declares its own
// float4/float2, classes with operators, which these shadow inside namespace smallm): with HIP's, clang
// compiled the two-pass down kernels' h staging differently (smallm_down_kernel, variant 5's second kernel,
// opt-in on gfx950: 172 fewer instructions, 18 fewer 16-byte loads), so the ISA that `sglang-smallm isa`
// checks without headers was not the ISA that the install (hipcc, headers included) builds.
// tests/test_kernel_compile.py compares the two.
#if defined(SMALLM_HIP)
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
#endif

struct alignas(16) Vec16 {
  uint32_t w[4];
};

#if defined(SMALLM_HIP)
constexpr int kWarp = 64;
#else
constexpr int kWarp = 32;
#endif
// AMD GPUs count a wave's outstanding global loads on one counter that drains in order (vmcnt): a wait
// for any load waits for every load issued before it, and a load under a guard leaves the count after
// it unknown, so the compiler waits for all (docs/gfx950-isa-notes.md). Kernels that keep the next
// item's loads in flight order their work and guard their loads for it where this is true.
#if defined(SMALLM_HIP)
constexpr bool kLoadsDrainInOrder = true;
#else
constexpr bool kLoadsDrainInOrder = false;
#endif

// ---------------------------------------------------------------- thread ids, barriers
SMALLM_DEV int thread_id() {
#if defined(SMALLM_HIP)
  return (int)__builtin_amdgcn_workitem_id_x();
#else
  return (int)threadIdx.x;
#endif
}

SMALLM_DEV int block_id() {
#if defined(SMALLM_HIP)
  return (int)__builtin_amdgcn_workgroup_id_x();
#else
  return (int)blockIdx.x;
#endif
}

// Programmatic dependent launch (sm_90): wait until the grids this one depends on have finished
// and their writes are visible (a no-op when launched without the attribute, and on other
// targets); then let the next grid in the stream start its launch early.
SMALLM_DEV void grid_dependency_wait() {
#if defined(SMALLM_SM90_PDL)
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

SMALLM_DEV void grid_dependents_launch() {
#if defined(SMALLM_SM90_PDL)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

SMALLM_DEV void block_sync() {
#if defined(SMALLM_HIP)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
#else
  __syncthreads();
#endif
}

SMALLM_DEV void publish_block_writes() {
#if defined(SMALLM_HIP)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
#endif
  block_sync();
}

SMALLM_DEV float shfl_xor(float v, int mask) {
#if defined(SMALLM_HIP)
  int lane = (int)__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
  int r = __builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, __builtin_bit_cast(int, v));
  return __builtin_bit_cast(float, r);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

// ---------------------------------------------------------------- global-memory ordering
// Release: make this block's prior global writes visible device-wide, then add.
SMALLM_DEV unsigned atomic_add_release(unsigned* p, unsigned v) {
#if defined(SMALLM_HIP)
  return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
#else
  __threadfence();
  unsigned old = atomicAdd(p, v);
  __threadfence();
  return old;
#endif
}

// Fire-and-forget release increment (no return value, no round trip): the block's prior global
// writes, ordered before it by a block barrier, become visible before the increment.
SMALLM_DEV void signal_add(unsigned* p, unsigned v) {
#if defined(SMALLM_HIP)
  (void)__hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
#else
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}

SMALLM_DEV unsigned atomic_add_relaxed(unsigned* p, unsigned v) {
#if defined(SMALLM_HIP)
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  return atomicAdd(p, v);
#endif
}

// A block's ticket: the old value of *p, which becomes *p + 1. On HIP an atomic increment (it wraps at
// 2^32 - 1, which no ticket count reaches): clang's atomic optimizer rewrites one thread's atomic add
// into a wave-wide add whose result it reads at once (gfx950 assembly: `s_waitcnt vmcnt(0)` right after
// it, docs/gfx950-isa-notes.md), but leaves the increment alone, so its result is waited for where used.
SMALLM_DEV unsigned ticket_take(unsigned* p) {
#if defined(SMALLM_HIP)
  return __builtin_amdgcn_atomic_inc32(p, 0xffffffffu, __ATOMIC_RELAXED, "agent");
#else
  return atomicAdd(p, 1u);
#endif
}

SMALLM_DEV unsigned load_acquire(const unsigned* p) {
#if defined(SMALLM_HIP)
  return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT);
#else
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#endif
}

SMALLM_DEV void store_relaxed(unsigned* p, unsigned v) {
#if defined(SMALLM_HIP)
  __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  atomicExch(p, v);
#endif
}

// Shared-memory (block-scope) integer atomics.
SMALLM_DEV int smem_atomic_min(int* p, int v) {
#if defined(SMALLM_HIP)
  return __hip_atomic_fetch_min(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
#else
  return atomicMin(p, v);
#endif
}

SMALLM_DEV int smem_atomic_add(int* p, int v) {
#if defined(SMALLM_HIP)
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
#else
  return atomicAdd(p, v);
#endif
}

// All threads' global writes so far -> visible device-wide to whoever observes the next signal.
// CUDA: bar.sync orders them before thread 0's gpu-scope release (PTX fences are cumulative).
// HIP: every wave releases at agent scope first (conservative across XCDs), then the barrier.
SMALLM_DEV void block_sync();
SMALLM_DEV void publish_block_writes();

SMALLM_DEV void fence_acquire() {
#if defined(SMALLM_HIP)
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
#else
  __threadfence();
#endif
}

SMALLM_DEV void pause() {
#if defined(SMALLM_HIP)
  __builtin_amdgcn_s_sleep(1);
#else
  __nanosleep(64);
#endif
}

// ---------------------------------------------------------------- loads
// Streaming 16-byte weight load (read once per call).
SMALLM_DEV Vec16 load_weights(const uint8_t* p) {
#if defined(SMALLM_HIP)
  typedef unsigned v4u __attribute__((ext_vector_type(4)));
#if defined(SMALLM_EMU)
  smallm_emu::note_weight_read(p, 16);
#endif
  v4u r = __builtin_nontemporal_load(reinterpret_cast<const v4u*>(p));
  Vec16 v;
  v.w[0] = r.x; v.w[1] = r.y; v.w[2] = r.z; v.w[3] = r.w;
  return v;
#else
  uint4 r = __ldcs(reinterpret_cast<const uint4*>(p));
  Vec16 v;
  v.w[0] = r.x; v.w[1] = r.y; v.w[2] = r.z; v.w[3] = r.w;
  return v;
#endif
}

// Streaming 4-byte weight load (read once per call).
SMALLM_DEV uint32_t load_weight_word(const uint8_t* p) {
#if defined(SMALLM_HIP)
#if defined(SMALLM_EMU)
  smallm_emu::note_weight_read(p, 4);
#endif
  return __builtin_nontemporal_load(reinterpret_cast<const uint32_t*>(p));
#else
  return __ldcs(reinterpret_cast<const unsigned*>(p));
#endif
}

// Read-only, reused data (activations).
SMALLM_DEV Vec16 load_cached(const void* p) {
#if defined(SMALLM_HIP)
  return *reinterpret_cast<const Vec16*>(p);
#else
  uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
  Vec16 v;
  v.w[0] = r.x; v.w[1] = r.y; v.w[2] = r.z; v.w[3] = r.w;
  return v;
#endif
}

// 16-byte global -> shared copy that may complete later (cp.async on sm_80+). Copies are grouped
// by copy_async_commit(); copy_async_wait() waits for all of this thread's groups,
// copy_async_wait_older() for all but the newest one; a block barrier after the wait publishes
// the data to the block. Elsewhere the copy is synchronous and the rest are no-ops.
SMALLM_DEV void copy16_async(void* smem, const void* gmem) {
#if defined(SMALLM_SM80_ASYNC)
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
#else
  *reinterpret_cast<Vec16*>(smem) = load_cached(gmem);
#endif
}

SMALLM_DEV void copy_async_commit() {
#if defined(SMALLM_SM80_ASYNC)
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

SMALLM_DEV void copy_async_wait() {
#if defined(SMALLM_SM80_ASYNC)
  asm volatile("cp.async.wait_group 0;" ::: "memory");
#endif
}

SMALLM_DEV void copy_async_wait_older() {
#if defined(SMALLM_SM80_ASYNC)
  asm volatile("cp.async.wait_group 1;" ::: "memory");
#endif
}

// Data written by other blocks of the same launch, read after an acquire (skips L1 on CUDA).
SMALLM_DEV float load_coherent(const float* p) {
#if defined(SMALLM_HIP)
  return *p;
#else
  return __ldcg(p);
#endif
}

SMALLM_DEV float4 load_coherent4(const float* p) {
#if defined(SMALLM_HIP)
  return *reinterpret_cast<const float4*>(p);
#else
  return __ldcg(reinterpret_cast<const float4*>(p));
#endif
}

// Register barrier: the compiler must assume v changed here, so work derived from v cannot be
// hoisted out of the enclosing loop (keeps decoded weights from piling up in registers).
SMALLM_DEV void opaque(Vec16& v) {
#if defined(SMALLM_HIP) && !defined(SMALLM_EMU)
  asm volatile("" : "+v"(v.w[0]), "+v"(v.w[1]), "+v"(v.w[2]), "+v"(v.w[3]));
#else
  asm volatile("" : "+r"(v.w[0]), "+r"(v.w[1]), "+r"(v.w[2]), "+r"(v.w[3]));
#endif
}

// ---------------------------------------------------------------- arithmetic
SMALLM_DEV float ffma(float a, float b, float c) {
#if defined(SMALLM_HIP)
  return __builtin_fmaf(a, b, c);
#else
  return fmaf(a, b, c);
#endif
}

SMALLM_DEV float fexp(float v) {
#if defined(SMALLM_HIP)
  return __builtin_expf(v);
#else
  return expf(v);
#endif
}

// ---------------------------------------------------------------- number formats
SMALLM_DEV float bf16_lo(uint32_t w) { return __builtin_bit_cast(float, w << 16); }
SMALLM_DEV float bf16_hi(uint32_t w) { return __builtin_bit_cast(float, w & 0xffff0000u); }

SMALLM_DEV uint16_t f32_to_bf16(float f) {  // round to nearest even, NaN kept quiet
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

// e8m0 scale byte -> float 2^(b-127).
SMALLM_DEV float e8m0_to_f32(uint32_t b) {
  uint32_t v = b << 23;
  v = b == 0u ? 0x00400000u : v;    // 2^-127
  v = b == 255u ? 0x7fc00000u : v;  // NaN
  return __builtin_bit_cast(float, v);
}

// 2^(b - 127) for byte i of four e8m0 bytes, with byte 0 -> 0 (not 2^-127) and 255 -> inf (not NaN):
// two instructions.
SMALLM_DEV float e8m0_byte_to_f32_flush(uint32_t bytes, int i) {
  return __builtin_bit_cast(float, ((bytes >> (8 * i)) << 23) & 0x7f800000u);
}

// 2^(b - 128) for an e8m0 byte b (half the scale it encodes); 255 -> NaN.
SMALLM_DEV float e8m0_half_to_f32(uint32_t b) {
  if (b == 255) return __builtin_bit_cast(float, 0x7fc00000u);
  return __builtin_bit_cast(float, b >= 2 ? (b - 1) << 23 : 0x00200000u << b);
}

// Round to nearest integer, ties to even.
SMALLM_DEV float frint_even(float v) {
#if defined(SMALLM_HIP)
  return __builtin_rintf(v);
#else
  return rintf(v);
#endif
}

// OCP e4m3fn encode of a finite float, round to nearest even, saturating at +-448 (0x7f is NaN).
// Portable on purpose: the same bit-exact code path runs on every target.
SMALLM_DEV uint32_t f32_to_e4m3_rne(float v) {
  const uint32_t u = __builtin_bit_cast(uint32_t, v);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t ua = u & 0x7fffffffu;
  const float a = __builtin_bit_cast(float, ua);
  if (a < 0.015625f) {  // below 2^-6: subnormal steps of 2^-9 (8 rounds up to the smallest normal)
    return sign | (uint32_t)frint_even(a * 512.0f);
  }
  const uint32_t r = ua + 0x7ffffu + ((ua >> 20) & 1u);  // round the mantissa to 3 bits
  const int e = (int)(r >> 23) - 127;
  const uint32_t m = (r >> 20) & 7u;
  if (e > 8 || (e == 8 && m == 7u)) return sign | 0x7eu;  // 448
  return sign | ((uint32_t)(e + 7) << 3) | m;
}

// Portable OCP e4m3fn decode of one byte.
SMALLM_DEV float e4m3_to_f32_portable(uint32_t b) {
  uint32_t s = (b >> 7) & 1u, e = (b >> 3) & 15u, m = b & 7u;
  float v;
  if (e == 0) {
    v = (float)m * 0.001953125f;  // m * 2^-9
  } else if (e == 15 && m == 7) {
    v = __builtin_bit_cast(float, 0x7fc00000u);
  } else {
    v = __builtin_bit_cast(float, ((e + 120u) << 23) | (m << 20));
  }
  return s ? -v : v;
}

// Portable e2m1 decode of one nibble.
// Arithmetic, not a table: a local array indexed at run time lands in (slow) local memory.
SMALLM_DEV float e2m1_to_f32_portable(uint32_t n) {
  const uint32_t e = (n >> 1) & 3u, m = n & 1u;
  const float v = e ? __builtin_bit_cast(float, ((e + 126u) << 23) | (m << 22)) : 0.5f * (float)m;
  return (n & 8u) ? -v : v;
}

// ------------------------------------------------------------------ micro-operations
// dot of 16 e4m3 weights (one 16-byte vector) with 16 bf16 activations (two vectors).
SMALLM_DEV float dot16_fp8_bf16(const Vec16& w, const Vec16& xa, const Vec16& xb) {
#if defined(__gfx950__)
  typedef __bf16 bf2 __attribute__((ext_vector_type(2)));
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t xw0 = i < 2 ? xa.w[2 * i] : xb.w[2 * i - 4];
    const uint32_t xw1 = i < 2 ? xa.w[2 * i + 1] : xb.w[2 * i - 3];
    bf2 w01 = __builtin_amdgcn_cvt_scalef32_pk_bf16_fp8(w.w[i], 1.0f, false);
    bf2 w23 = __builtin_amdgcn_cvt_scalef32_pk_bf16_fp8(w.w[i], 1.0f, true);
    acc = __builtin_amdgcn_fdot2_f32_bf16(w01, __builtin_bit_cast(bf2, xw0), acc, false);
    acc = __builtin_amdgcn_fdot2_f32_bf16(w23, __builtin_bit_cast(bf2, xw1), acc, false);
  }
  return acc;
#elif defined(SMALLM_SM89_FP8)
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t xw0 = i < 2 ? xa.w[2 * i] : xb.w[2 * i - 4];
    const uint32_t xw1 = i < 2 ? xa.w[2 * i + 1] : xb.w[2 * i - 3];
    __half2_raw h01 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w.w[i] & 0xffffu), __NV_E4M3);
    __half2_raw h23 = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w.w[i] >> 16), __NV_E4M3);
    float2 f01 = __half22float2(*reinterpret_cast<__half2*>(&h01));
    float2 f23 = __half22float2(*reinterpret_cast<__half2*>(&h23));
    acc = ffma(f01.x, bf16_lo(xw0), acc);
    acc = ffma(f01.y, bf16_hi(xw0), acc);
    acc = ffma(f23.x, bf16_lo(xw1), acc);
    acc = ffma(f23.y, bf16_hi(xw1), acc);
  }
  return acc;
#else
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t xw = i < 8 ? xa.w[i / 2] : xb.w[(i - 8) / 2];
    const float xv = (i & 1) ? bf16_hi(xw) : bf16_lo(xw);
    acc = ffma(e4m3_to_f32_portable((w.w[i / 4] >> (8 * (i % 4))) & 0xffu), xv, acc);
  }
  return acc;
#endif
}

// dot of 32 e2m1 weights (one 16-byte vector, low nibble first) with 32 bf16 activations.
SMALLM_DEV float dot32_fp4_bf16(const Vec16& w, const Vec16* x4) {
#if defined(__gfx950__)
  typedef __bf16 bf2 __attribute__((ext_vector_type(2)));
  float acc = 0.0f;
  // byte b of word i holds elements 8i+2b (low nibble) and 8i+2b+1
#define SMALLM_FP4_STEP(b)                                                           \
  acc = __builtin_amdgcn_fdot2_f32_bf16(__builtin_amdgcn_cvt_scalef32_pk_bf16_fp4(w.w[i], 1.0f, b), \
                                        __builtin_bit_cast(bf2, x4[i].w[b]), acc, false);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    SMALLM_FP4_STEP(0) SMALLM_FP4_STEP(1) SMALLM_FP4_STEP(2) SMALLM_FP4_STEP(3)
  }
#undef SMALLM_FP4_STEP
  return acc;
#else
  float acc = 0.0f;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t byte = (w.w[i / 4] >> (8 * (i % 4))) & 0xffu;
    const uint32_t xw = x4[i / 4].w[i % 4];
    acc = ffma(e2m1_to_f32_portable(byte & 15u), bf16_lo(xw), acc);
    acc = ffma(e2m1_to_f32_portable(byte >> 4), bf16_hi(xw), acc);
  }
  return acc;
#endif
}

// ---------------------------------------------------------------- tensor-core micro-operations (sm_89+)
#if defined(SMALLM_SM89_FP8)
#define SMALLM_MMA_F16 1
// Two e4m3 values (a 16-bit pair) -> f16x2, exactly (one conversion instruction).
SMALLM_DEV uint32_t e4m3x2_to_f16x2(uint32_t pair16) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(pair16 & 0xffffu), __NV_E4M3);
  return (uint32_t)h.x | ((uint32_t)h.y << 16);
}
// The high pair of a word (bytes 2, 3) -> f16x2: the conversion reads the word's upper half itself
// (sm_90a SASS `F2FP.F16.E4M3.UNPACK_B Rd, Rw.H1`), where e4m3x2_to_f16x2(w >> 16) takes a shift first.
SMALLM_DEV uint32_t e4m3x2_hi_to_f16x2(uint32_t w) {
  uint32_t d;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}" : "=r"(d) : "r"(w));
  return d;
}

// 16 bytes to shared memory in one store (p 16-byte aligned). nvcc split some plain stores of a Vec16
// into four 4-byte ones (the tensor-core down's MXFP4 h stage with the lo half as e5m2). Nothing may
// read p before a barrier that follows (the store is not ordered against other memory accesses).
SMALLM_DEV void store_shared16(void* p, const Vec16& v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"((unsigned)__cvta_generic_to_shared(p)), "r"(v.w[0]),
               "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3]));
}

// f32 -> f16, round to nearest even.
SMALLM_DEV uint16_t f32_to_f16(float v) {
  uint16_t r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
  return r;
}

// f16 -> f32, exact.
SMALLM_DEV float f16_to_f32(uint16_t h) {
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
  return r;
}

// Two f32 -> two e5m2 bytes, a in the low byte (round to nearest even, saturating). e5m2 is the high
// byte of an f16: e5m2x4_to_f16x2 widens it exactly.
SMALLM_DEV uint32_t f32x2_to_e5m2x2(float a, float b) {
  uint16_t r;
  asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  return r;
}

// Four e5m2 bytes (value i in byte i) -> f16x2 words (values 0, 1) and (2, 3), exactly.
SMALLM_DEV void e5m2x4_to_f16x2(uint32_t b, uint32_t& w01, uint32_t& w23) {
  w01 = __byte_perm(b, 0u, 0x1404);
  w23 = __byte_perm(b, 0u, 0x3424);
}

// Eight e2m1 values (a 32-bit word, value i in bits 4i..4i+3) -> four f16x2 words, exactly, each
// value v as the f16 v * 2^-14 (the e2m1 sign, exponent and mantissa bits land in the f16 sign bit
// and bits 9..11). Word j holds values j (low half) and j + 4 (high half): the k order the
// tensor-core MXFP4 kernels use, with the other operand staged in the same order (values 0,4,1,5,..).
// Each value's f16 high byte (s000eem0) first, the even values' in ev and the odd ones' in od (byte m:
// value 2m, 2m + 1), then one byte permute per word: 11 operations for the four words where a shift
// and mask per value half took 15 (sm_90a SASS).
SMALLM_DEV void e2m1x8_to_f16x2(uint32_t w, uint32_t (&p)[4]) {
  const uint32_t ev = ((w << 1) & 0x0e0e0e0eu) | ((w << 4) & 0x80808080u);
  const uint32_t od = ((w >> 3) & 0x0e0e0e0eu) | (w & 0x80808080u);
  p[0] = __byte_perm(ev, 0u, 0x2404);  // values 0, 4: bytes 0 and 2 of ev as the high bytes
  p[1] = __byte_perm(od, 0u, 0x2404);  // 1, 5
  p[2] = __byte_perm(ev, 0u, 0x3414);  // 2, 6
  p[3] = __byte_perm(od, 0u, 0x3414);  // 3, 7
}

// f16x2 multiply, round to nearest even (exact for the power-of-two scales the MXFP4 kernels use).
SMALLM_DEV uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

// 2^f as f16 in both halves for f <= 15; 0 below the smallest normal f16 (f < -14).
SMALLM_DEV uint32_t f16x2_pow2(int f) {
  const uint32_t h = f < -14 ? 0u : (uint32_t)(f + 15) << 10;
  return h | (h << 16);
}

// c += A(16x16, row) * B(16x8, col), f16 inputs, fp32 accumulation (mma.sync m16n8k16).
SMALLM_DEV void mma_f16_16x8x16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
#endif

// Compile-time loop: fn(IntC<I>{}) for I in [B, E). Lets builtins that need constant selectors
// sit inside loops.
template <int I>
struct IntC {
  static constexpr int value = I;
};
template <int B, int E>
struct StaticFor {
  template <class Fn>
  SMALLM_DEV static void run(Fn& fn) {
    fn(IntC<B>{});
    StaticFor<B + 1, E>::run(fn);
  }
};
template <int E>
struct StaticFor<E, E> {
  template <class Fn>
  SMALLM_DEV static void run(Fn&) {}
};

// Decode values 2P and 2P+1 of a 16-byte e4m3 vector.
template <int P>
SMALLM_DEV void decode_pair_fp8(const Vec16& w, float& lo, float& hi) {
#if defined(__gfx950__)
  typedef float f2 __attribute__((ext_vector_type(2)));
  f2 v = __builtin_amdgcn_cvt_scalef32_pk_f32_fp8(w.w[P / 2], 1.0f, (P % 2) == 1);
  lo = v.x;
  hi = v.y;
#elif defined(SMALLM_SM89_FP8)
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)((w.w[P / 2] >> (16 * (P % 2))) & 0xffffu), __NV_E4M3);
  float2 f = __half22float2(*reinterpret_cast<__half2*>(&h));
  lo = f.x;
  hi = f.y;
#else
  lo = e4m3_to_f32_portable((w.w[P / 2] >> (16 * (P % 2))) & 0xffu);
  hi = e4m3_to_f32_portable((w.w[P / 2] >> (16 * (P % 2) + 8)) & 0xffu);
#endif
}

// Decode values 2P (low nibble of byte P) and 2P+1 of a 16-byte e2m1 vector.
template <int P>
SMALLM_DEV void decode_pair_fp4(const Vec16& w, float& lo, float& hi) {
#if defined(__gfx950__)
  typedef float f2 __attribute__((ext_vector_type(2)));
  f2 v = __builtin_amdgcn_cvt_scalef32_pk_f32_fp4(w.w[P / 4], 1.0f, P % 4);
  lo = v.x;
  hi = v.y;
#else
  const uint32_t byte = (w.w[P / 4] >> (8 * (P % 4))) & 0xffu;
  lo = e2m1_to_f32_portable(byte & 15u);
  hi = e2m1_to_f32_portable(byte >> 4);
#endif
}

// ---------------------------------------------------------------- the down's dot (block kernel, phase 2)
#if defined(__gfx950__)
typedef float f32x2_t __attribute__((ext_vector_type(2)));
// Two fp32 FMAs in one instruction (v_pk_fma_f32). The CPU emulation (a host clang that may lack the
// elementwise builtin) does the two lanes one by one: the same IEEE fma each.
SMALLM_DEV f32x2_t pk_fma(f32x2_t a, f32x2_t b, f32x2_t c) {
#if defined(SMALLM_EMU)
  return f32x2_t{ffma(a.x, b.x, c.x), ffma(a.y, b.y, c.y)};
#else
  return __builtin_elementwise_fma(a, b, c);
#endif
}
#endif

// Values 2P and 2P+1 of a vector, as dot_vecs_f32 takes them.
struct DecodeFp8Pair {
  template <class P>
  SMALLM_DEV void operator()(const Vec16& w, P, float& lo, float& hi) const { decode_pair_fp8<P::value>(w, lo, hi); }
};
struct DecodeFp4Pair {
  template <class P>
  SMALLM_DEV void operator()(const Vec16& w, P, float& lo, float& hi) const { decode_pair_fp4<P::value>(w, lo, hi); }
};

// Dots of W 16-byte weight vectors (N values each: 16 e4m3 or 32 e2m1; W rows of W2 at the same k) with H
// vectors of h (N fp32 values each, 8-byte aligned; H pairs of one expert): d[r][i] = w[r] . h[i], each value
// pair of a weight vector decoded once for all H, each value pair of h read once for all W. gfx950: each
// decoded pair goes on one packed FMA per h, the even and the odd values summed apart and added at the end
// (half the FMA instructions of one chain). Elsewhere one fp32 FMA chain per (r, i), the pair's high value
// first. d[r][i] depends on neither W nor H (the same operations in the same order for each w and h).
template <int N, int W, int H, class DecodePair>
SMALLM_DEV void dot_vecs_f32(const Vec16* const (&w)[W], const float* const (&h)[H], DecodePair decode,
                             float (&d)[W][H]) {
#if defined(__gfx950__)
  f32x2_t acc[W][H];
#pragma unroll
  for (int r = 0; r < W; ++r)
#pragma unroll
    for (int i = 0; i < H; ++i) acc[r][i] = f32x2_t{0.0f, 0.0f};
  auto step = [&](auto P) {
    constexpr int p = decltype(P)::value;
    f32x2_t wv[W];
#pragma unroll
    for (int r = 0; r < W; ++r) {
      float lo, hi;
      decode(*w[r], P, lo, hi);  // one conversion instruction gives both
      wv[r] = f32x2_t{lo, hi};
    }
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const f32x2_t hv = *reinterpret_cast<const f32x2_t*>(h[i] + 2 * p);
#pragma unroll
      for (int r = 0; r < W; ++r) acc[r][i] = pk_fma(wv[r], hv, acc[r][i]);
    }
  };
  StaticFor<0, N / 2>::run(step);
#pragma unroll
  for (int r = 0; r < W; ++r)
#pragma unroll
    for (int i = 0; i < H; ++i) d[r][i] = acc[r][i].x + acc[r][i].y;
#else
#pragma unroll
  for (int r = 0; r < W; ++r)
#pragma unroll
    for (int i = 0; i < H; ++i) d[r][i] = 0.0f;
  auto step = [&](auto P) {
    constexpr int p = decltype(P)::value;
    float lo[W], hi[W];
#pragma unroll
    for (int r = 0; r < W; ++r) decode(*w[r], P, lo[r], hi[r]);
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const float2 h2 = *reinterpret_cast<const float2*>(h[i] + 2 * p);
#pragma unroll
      for (int r = 0; r < W; ++r) d[r][i] = ffma(lo[r], h2.x, ffma(hi[r], h2.y, d[r][i]));
    }
  };
  StaticFor<0, N / 2>::run(step);
#endif
}

}  // namespace smallm
