// smallm_args.h: plain C++ description of one fused small-M MoE call, shared by the kernel
// source (.hip, compiled by hipcc / nvcc / clang) and the torch binding (.cpp, host compiler).
#pragma once

#include <stdint.h>

namespace smallm {

constexpr int kThreads = 256;
constexpr int kMaxPairs = 768;     // tokens * slots per call
constexpr int kMaxSlots = 16;      // slots per token
constexpr int kMaxExperts = 1024;  // experts in the layer (ids are int32)
constexpr int kMaxInter = 1024;    // intermediate size per partition
constexpr int kMinRows2 = 8;       // workspace sizing: at most ceil(D / 8) phase-2 row ranges per token

enum WeightFormat : int { kFp8Block128 = 0, kMxfp4 = 1 };
enum WeightLayout : int { kRowMajor = 0, kShuffle16x16 = 1 };

struct MoeArgs {
  const uint16_t* x;        // [T, D] bf16
  const uint8_t* w13;       // [E, 2Iw, D bytes]   (fp8: D bytes, mxfp4: D/2 bytes per row)
  const uint8_t* w2;        // [E, D, Iw bytes]
  const void* s13;          // fp8: fp32 [E, 2Iw/128, D/128]; mxfp4: e8m0 [E, 2Iw, D/32]
  const void* s2;           // fp8: fp32 [E, D/128, Iw/128];  mxfp4: e8m0 [E, D, Iw/32]
  const float* topk_w;      // [T, K]
  const int32_t* topk_ids;  // [T, K]
  uint16_t* out;            // [T, D] bf16
  float* h;                 // workspace: phase-1 partials, h_words(D, I)
  float* y;                 // workspace [kMaxPairs, D]
  unsigned* sync;           // workspace counters, zero before the first call
  int T, K, E, D, I;        // I: the intermediate size the call computes
  int Iw;                   // the weights' intermediate: w13 holds 2 Iw rows (gate rows 0.., up rows Iw..), w2
                            // Iw values along K, the scales likewise. Iw > I where SGLang padded I for AITER
                            // (Quark MXFP4: zeros after each half), which the kernels then never read
  int nblocks;
  int x_prefetch;           // 1: copy the next phase-1 item's x slices during this one (default)
  unsigned pair_magic;      // PairToken: ceil(2^20 / K), set by smallm_moe_launch (a kernel parameter
                            // the kernels read from constant memory, not a register they hold)
  unsigned tile_magic;      // JobExpert: ceil(2^32 / (I / 4)), set by smallm_moe_launch (the same way)
  float out_scale;
};

// Counter layout inside MoeArgs::sync (unsigned words).
constexpr int kSyncTicket = 0;
constexpr int kSyncExit = 1;
constexpr int kSyncDone1 = 2;
constexpr int kSyncUsed1 = kSyncDone1 + kMaxPairs;
constexpr int kSyncTok = kSyncUsed1 + kMaxPairs;  // then [T, row ranges <= ceil(D / kMinRows2)]

inline int sync_words(int max_tokens, int D) { return kSyncTok + max_tokens * ((D + kMinRows2 - 1) / kMinRows2); }
// Phase-1 partial sums: [pairs, K slices (<= ceil(D / 1024)), gate|up, I] fp32.
inline int max_ksplit(int D) { return (D + 1023) / 1024; }  // fp8: 64 vectors x 16 values per slice
inline long h_words(int D, int I) { return (long)kMaxPairs * 2 * max_ksplit(D) * I; }

}  // namespace smallm

// Host entry point implemented in smallm_moe.hip. Returns 0 on success, else a runtime error code.
int smallm_moe_launch(const smallm::MoeArgs& args, int fmt, int layout, void* stream);
const char* smallm_build_arch();
