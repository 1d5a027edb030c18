// smallm_sort_args.h: plain C++ description of one MoE sort call (with optional fused MXFP8
// activation quantisation and output-buffer zeroing), shared by the kernel source and the torch
// binding.
#pragma once

#include <stdint.h>

namespace smallm {

constexpr int kSortThreads = 256;
constexpr int kCompactMaxPairs = 64;    // compact path: one workgroup, pair-axis ranks
constexpr int kDistMaxPairs = 256;      // distributed path: one pair per thread
constexpr int kDistMaxBuckets = 257;    // 256 experts (+1 invalid bucket in SGLang's format)
constexpr int kBucketsPerOwner = 64;    // distributed path: experts owned by one workgroup
constexpr int kMaxQuantBlocks = 64;
constexpr int kMaxZeroBlocks = 64;

enum SortFormat : int { kSortAiter = 0, kSortTriton = 1 };
enum SortPath : int { kSortCompact = 0, kSortDistributed = 1 };

struct SortArgs {
  const int32_t* topk_ids;  // [T, K]
  const float* topk_w;      // [T, K] (AITER format only)
  int32_t* sorted_ids;      // AITER: (slot << 24) | token; Triton: token * K + slot
  float* sorted_w;          // AITER format only
  int32_t* expert_ids;      // one per block
  int32_t* num_valid;       // AITER: [padded length, T]; Triton: [padded length]
  // Fused MXFP8 quantisation of x (AITER format; x == nullptr: off).
  const uint16_t* x;        // [T, D] bf16
  uint8_t* xq;              // [T, D] e4m3fn
  uint8_t* xs;              // e8m0 scales per (sorted row, 32-group), AITER's tile-shuffled layout
  int D;
  int scale_cols;           // ceil(D / 32 / 8) * 8: the padded scale row width
  // Zero-filled output buffer (AITER's moe_buf; nullptr: off), in 16-byte vectors.
  void* zero;
  long zero_vecs;
  int T, K, E, block;
  int sort_blocks, quant_blocks, zero_blocks;
};

inline int sort_buckets(int fmt, int E) { return fmt == kSortTriton ? E + 1 : E; }

}  // namespace smallm

// Host entry point implemented in smallm_sort.hip. Returns 0 on success, else an error code.
int smallm_sort_launch(smallm::SortArgs& args, int fmt, int path, void* stream);
