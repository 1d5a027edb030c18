// convbench.cu: how many e4m3 -> f16 conversions an sm_90 SM retires per clock, by the hardware
// conversion (cvt.rn.f16x2.e4m3x2, SASS F2FP, the FP8 kernels' decode) and by integer operations
// (byte permute, shift, masks: e4m3 bits s eeee mmm placed as the f16 s 0eeee mmm0000000, i.e. the
// value times 2^-8, exact for every code but the two NaNs: checked against torch's float8_e4m3fn on
// all 256 codes), with a plain LOP3 loop for calibration. A
// diagnostic for the tensor-core down at 1 token, whose jobs convert every W2 byte after h is staged
// (examples/results "h200-ab9": 1.75 us from h staged to the jobs done, W2 in L2 or not).
// Every thread runs kChains independent chains (each step's output is the next step's input), so
// the rate is the pipe's, not one chain's latency. One block of kWarps warps per SM.
// Usage: convbench [iters]; prints f16x2 results per clock per SM for each form.
// Build: nvcc -std=c++17 -arch=sm_90a -O3 examples/convbench/convbench.cu -o convbench
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(1); } } while (0)

constexpr int kChains = 8, kUnroll = 8, kWarps = 32;

__device__ __forceinline__ uint32_t cvt_hw(uint32_t w) {  // two e4m3 (low 16 bits) -> f16x2
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
  return (uint32_t)h.x | ((uint32_t)h.y << 16);
}

__device__ __forceinline__ uint32_t cvt_int(uint32_t w) {  // the same two values times 2^-8
  const uint32_t u = __byte_perm(w, 0u, 0x1404);             // byte 0 -> bits 8..15, byte 1 -> bits 24..31
  return (u & 0x80008000u) | ((u >> 1) & 0x3f803f80u);
}

__device__ __forceinline__ uint32_t lop(uint32_t w) { return (w ^ 0x9e3779b9u) & 0x7f7f7f7fu; }

// Form 0: hardware conversion; 1: integer decode; 2: one LOP3 per step.
template <int Form>
__global__ void __launch_bounds__(kWarps * 32, 1) rate(int iters, uint32_t seed, uint32_t* sink, long long* cycles) {
  uint32_t v[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) v[c] = seed * (threadIdx.x + 1) + 0x01010101u * c;
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int c = 0; c < kChains; ++c) {
        // keep each chain's input a valid, finite e4m3 pair: the output's f16 bytes feed the next step
        const uint32_t x = v[c] & 0x77777777u;
        v[c] = Form == 0 ? cvt_hw(x) : Form == 1 ? cvt_int(x) : lop(x);
      }
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  uint32_t acc = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc ^= v[c];
  if (acc == 0x12345678u) atomicAdd(sink, 1u);  // keeps the chains alive
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int Form>
double run(int iters, int sms, uint32_t* sink, long long* cycles) {
  rate<Form><<<sms, kWarps * 32>>>(iters / 10 + 1, 1u, sink, cycles);  // warm-up
  CK(cudaDeviceSynchronize());
  rate<Form><<<sms, kWarps * 32>>>(iters, 2654435761u, sink, cycles);
  CK(cudaDeviceSynchronize());
  long long* h = new long long[sms];
  CK(cudaMemcpy(h, cycles, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
  long long mx = 0;
  for (int b = 0; b < sms; ++b) mx = h[b] > mx ? h[b] : mx;
  delete[] h;
  const double results = (double)iters * kUnroll * kChains * kWarps * 32;  // f16x2 words per SM
  return results / (double)mx;
}

int main(int argc, char** argv) {
  const int iters = argc > 1 ? atoi(argv[1]) : 2000;
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  uint32_t* sink;
  long long* cycles;
  CK(cudaMalloc(&sink, sizeof(uint32_t)));
  CK(cudaMalloc(&cycles, sizeof(long long) * sms));
  printf("convbench: %d SMs, %d warps per SM, %d chains per thread, %d iterations of %d steps\n", sms, kWarps, kChains,
         iters, kUnroll);
  printf("%-44s %s\n", "form (per step, one f16x2 word)", "words per clock per SM");
  printf("%-44s %8.1f\n", "cvt.rn.f16x2.e4m3x2 (F2FP) + mask", run<0>(iters, sms, sink, cycles));
  printf("%-44s %8.1f\n", "integer decode (PRMT, SHF, LOP3) + mask", run<1>(iters, sms, sink, cycles));
  printf("%-44s %8.1f\n", "LOP3 + mask (calibration)", run<2>(iters, sms, sink, cycles));
  CK(cudaFree(sink));
  CK(cudaFree(cycles));
  return 0;
}
