// smallm_sort.h: the small MoE sort, one launch, no cross-workgroup communication.
//
// Every sorting workgroup computes the whole sort plan in shared memory (each pair's bucket and
// destination row, and per used output block its bucket and first padding row), then writes only
// its own share of the outputs. Two ways to compute the plan:
//   * compact (<= kCompactMaxPairs pairs, any expert count): pair-axis ranks, O(P^2 / threads),
//     independent of E; one sorting workgroup writes everything.
//   * distributed (<= kDistMaxPairs pairs, <= 256 experts): a shared-memory histogram over the
//     buckets and a block scan; workgroup g owns buckets [64 g, 64 g + 64) and writes their rows.
// Extra workgroups quantise the activations to MXFP8 (e4m3 + e8m0 per 32, scales scattered to the
// sorted rows in AITER's tile-shuffled layout) and zero AITER's moe_buf, in the same launch.
//
// Output formats (template Fmt):
//   kSortAiter:  sorted_ids = (slot << 24) | token, padding (K << 24) | T with weight 0;
//                pairs whose expert id is outside [0, E) are dropped; num_valid = [rows, T].
//   kSortTriton: sorted_ids = token * K + slot, padding T * K; SGLang's "+1" convention: ids
//                outside [0, E) go to a leading bucket whose blocks carry expert id -1;
//                num_valid = [rows].
// Experts ascend, pairs inside an expert ascend by (token, slot); nothing at or past the padded
// length is written (sorted ids, weights, expert ids, scale rows).
#pragma once

#include "smallm_compat.h"
#include "smallm_sort_args.h"

namespace smallm {

struct SortShared {
  int key[kDistMaxPairs];        // bucket of each pair, -1: dropped
  int cnt[2 * kSortThreads];     // compact: per pair, its padded count if it leads its bucket; distributed: per bucket
  int pos[kDistMaxPairs];        // destination row of each pair, -1: dropped
  int off[2 * kSortThreads];     // distributed: exclusive row offset of each bucket, [NB] = total
  int scan[kSortThreads];
  int blk_key[kDistMaxPairs];    // per used output block: its bucket
  int blk_pad[kDistMaxPairs];    // per used output block: first padding row of its bucket
  int total;
};

SMALLM_DEV int pad_to(int n, int b) { return (n + b - 1) / b * b; }

SMALLM_DEV Vec16 zero_vec16() {
  Vec16 z;
  z.w[0] = z.w[1] = z.w[2] = z.w[3] = 0u;
  return z;
}

// Record bucket k's output blocks: rows [off, off + padded), real rows [off, off + count).
SMALLM_DEV void record_bucket_blocks(SortShared& s, int k, int off, int padded, int count, int block) {
  for (int q = 0; q < padded / block; ++q) {
    s.blk_key[off / block + q] = k;
    s.blk_pad[off / block + q] = off + count;
  }
}

// Byte offset of the e8m0 scale of (sorted row r, 32-group j): 32-row x 8-column tiles of 256
// bytes, tiles row-major; inside a tile [j % 4][r % 16][(j / 4) % 2][(r / 16) % 2].
SMALLM_DEV long scale_offset(int r, int j, int scale_cols) {
  return (long)(r >> 5) * (scale_cols * 32) + (j >> 3) * 256 + (j & 3) * 64 + (r & 15) * 4 + ((j >> 2) & 1) * 2 +
         ((r >> 4) & 1);
}

template <int Fmt>
SMALLM_DEV int bucket_of(int id, int E) {
  const bool ok = id >= 0 && id < E;
  if (Fmt == kSortTriton) return ok ? id + 1 : 0;
  return ok ? id : -1;
}

// Plan, compact: pair i's rank and count inside its bucket by comparing with every pair; then
// its bucket's row offset from the padded counts of the buckets' leaders (first pair of each).
SMALLM_DEV void plan_compact(SortShared& s, int P, int block, int t) {
  int k = -1, c = 0, r = 0;
  if (t < P) {
    k = s.key[t];
    for (int j = 0; j < P; ++j) {
      const bool same = s.key[j] == k;
      c += same;
      r += same & (j < t);
    }
    s.cnt[t] = (k >= 0 && r == 0) ? pad_to(c, block) : 0;  // a leader's padded count, else 0
  }
  block_sync();
  if (t < P) {
    int off = 0, tot = 0;
    for (int j = 0; j < P; ++j) {
      const int pj = s.cnt[j];
      tot += pj;
      off += s.key[j] < k ? pj : 0;
    }
    if (t == 0) s.total = tot;
    s.pos[t] = k >= 0 ? off + r : -1;
    if (k >= 0 && r == 0) record_bucket_blocks(s, k, off, s.cnt[t], c, block);
  }
  if (P == 0 && t == 0) s.total = 0;
  block_sync();
}

// Plan, distributed: histogram, scan of padded counts, stable ranks.
SMALLM_DEV void plan_distributed(SortShared& s, int P, int NB, int block, int t) {
  s.cnt[t] = 0;
  s.cnt[t + kSortThreads] = 0;
  block_sync();
  if (t < P && s.key[t] >= 0) smem_atomic_add(&s.cnt[s.key[t]], 1);
  block_sync();
  // Padded counts of buckets 2t and 2t + 1 (zero past NB); Hillis-Steele scan over threads.
  const int p0 = pad_to(s.cnt[2 * t], block), p1 = pad_to(s.cnt[2 * t + 1], block);
  s.scan[t] = p0 + p1;
  block_sync();
  for (int d = 1; d < kSortThreads; d <<= 1) {
    const int v = t >= d ? s.scan[t - d] : 0;
    block_sync();
    s.scan[t] += v;
    block_sync();
  }
  const int excl = s.scan[t] - p0 - p1;
  s.off[2 * t] = excl;
  s.off[2 * t + 1] = excl + p0;  // off[NB] is the total: buckets past NB are empty
  if (t == kSortThreads - 1) s.total = s.scan[t];
  block_sync();
  if (t < P) {
    const int k = s.key[t];
    int r = 0;
    for (int j = 0; j < t; ++j) r += s.key[j] == k;
    s.pos[t] = k >= 0 ? s.off[k] + r : -1;
  }
  for (int b = t; b < NB; b += kSortThreads)  // used output blocks of each bucket
    record_bucket_blocks(s, b, s.off[b], s.off[b + 1] - s.off[b], s.cnt[b], block);
  block_sync();
}

// Scale rows of padding entries are zero. A 32-row tile row lies inside one output block
// (block % 32 == 0), whose padding rows are a suffix starting at local row ps. Each thread takes one
// 16-byte vector of a tile: rows i0..i0+3 and i0+16..i0+19 (i0 in {0, 4, 8, 12}) of columns jl and
// jl + 4. All eight rows padding: one vector store; some: byte stores for the padding rows only
// (real rows' bytes belong to the quantising workgroups, so no byte is written twice).
// Shared by every planning workgroup (worker w of n): it only ever writes padding bytes.
SMALLM_DEV void zero_padding_scale_rows(const SortArgs& a, const SortShared& s, int w, int n, int t) {
  const int vec_per_row32 = a.scale_cols * 2;  // (scale_cols / 8) tiles x 16 vectors
  const int units = s.total / 32 * vec_per_row32;
  const Vec16 z = zero_vec16();
  for (int u = w * kSortThreads + t; u < units; u += n * kSortThreads) {
    const int g = u / vec_per_row32, v = u - g * vec_per_row32;
    int ps = s.blk_pad[(g * 32) / a.block] - g * 32;
    ps = ps < 0 ? 0 : ps;
    if (ps >= 32) continue;  // no padding row in this tile row
    const long base = (long)g * a.scale_cols * 32 + (long)v * 16;
    const int i0 = (v % 16) * 4 % 16;
    if (i0 >= ps) {
      *reinterpret_cast<Vec16*>(a.xs + base) = z;
      continue;
    }
    for (int b = 0; b < 16; ++b) {  // byte b: word b / 4 (row i0 + b / 4), then (n_idx, m_idx) = (b / 2 % 2, b % 2)
      const int row = i0 + b / 4 + 16 * (b & 1);
      if (row >= ps) a.xs[base + b] = 0;
    }
  }
}

template <int Fmt, int Path>
__global__ void __launch_bounds__(kSortThreads) smallm_sort_kernel(SortArgs a) {
  __shared__ SortShared s;
  const int t = thread_id();
  const int bid = block_id();
  const int S = a.sort_blocks, Q = a.quant_blocks;
  grid_dependency_wait();  // before any global read or write (outputs may reuse memory just freed)
  grid_dependents_launch();

  if (bid >= S + Q) {  // zero-fill workgroups: no plan needed
    const int zb = bid - S - Q;
    const Vec16 z = zero_vec16();
    Vec16* dst = reinterpret_cast<Vec16*>(a.zero);
    for (long v = (long)zb * kSortThreads + t; v < a.zero_vecs; v += (long)a.zero_blocks * kSortThreads) dst[v] = z;
    return;
  }

  const int P = a.T * a.K;
  const int NB = Fmt == kSortTriton ? a.E + 1 : a.E;
  const int block = a.block;
  for (int i = t; i < P; i += kSortThreads) s.key[i] = bucket_of<Fmt>(a.topk_ids[i], a.E);
  block_sync();
  if (Path == kSortCompact) {
    plan_compact(s, P, block, t);
  } else {
    plan_distributed(s, P, NB, block, t);
  }

  if (Fmt == kSortAiter && a.x != nullptr) zero_padding_scale_rows(a, s, bid, S + Q, t);

  if (bid < S) {
    // This workgroup's buckets and the rows they occupy.
    int b0 = 0, b1 = 1 << 30, lo = 0, hi = s.total;
    if (Path == kSortDistributed) {
      b0 = bid * kBucketsPerOwner;
      b1 = b0 + kBucketsPerOwner < NB ? b0 + kBucketsPerOwner : NB;
      lo = s.off[b0];
      hi = s.off[b1];
    }
    const int pad_id = Fmt == kSortAiter ? ((a.K << 24) | a.T) : P;
    for (int i = t; i < P; i += kSortThreads) {
      const int k = s.key[i];
      if (k < b0 || k >= b1) continue;
      const int p = s.pos[i];
      if (Fmt == kSortAiter) {
        a.sorted_ids[p] = ((i % a.K) << 24) | (i / a.K);
        a.sorted_w[p] = a.topk_w[i];
      } else {
        a.sorted_ids[p] = i;
      }
    }
    for (int q = lo + t; q < hi; q += kSortThreads) {
      if (q < s.blk_pad[q / block]) continue;
      a.sorted_ids[q] = pad_id;
      if (Fmt == kSortAiter) a.sorted_w[q] = 0.0f;
    }
    for (int b = lo / block + t; b < hi / block; b += kSortThreads)
      a.expert_ids[b] = Fmt == kSortAiter ? s.blk_key[b] : s.blk_key[b] - 1;
    if (bid == 0 && t == 0) {
      a.num_valid[0] = s.total;
      if (Fmt == kSortAiter) a.num_valid[1] = a.T;
    }
    return;
  }

  // MXFP8 workgroups: unit (token, 32-group j < scale_cols); groups past D / 32 only pad scale rows.
  if (Fmt != kSortAiter || a.x == nullptr) return;
  const int qb = bid - S;
  const int sc = a.scale_cols, groups = a.D / 32;
  const int units = a.T * sc;  // < 2^31: the binding bounds T * D
  for (int u = qb * kSortThreads + t; u < units; u += Q * kSortThreads) {
    const int tok = u / sc, j = u - tok * sc;
    uint32_t e = 0;
    if (j < groups) {
      const Vec16* src = reinterpret_cast<const Vec16*>(a.x + (long)tok * a.D + 32 * j);
      Vec16 v[4];
      uint32_t amax_bits = 0;  // |x| compared as integers: exact, order-preserving for finite values
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        v[c] = load_cached(src + c);
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const uint32_t lo = (v[c].w[w] & 0x7fffu) << 16, hi = v[c].w[w] & 0x7fff0000u;
          amax_bits = lo > amax_bits ? lo : amax_bits;
          amax_bits = hi > amax_bits ? hi : amax_bits;
        }
      }
      const float amax = __builtin_bit_cast(float, amax_bits);
      const float sf = (amax > 1e-10f ? amax : 1e-10f) / 448.0f;
      const uint32_t bits = __builtin_bit_cast(uint32_t, sf);
      e = ((bits >> 23) & 0xffu) + ((bits & 0x7fffffu) != 0u);
      const float inv = __builtin_bit_cast(float, (254u - e) << 23);  // exact 1 / 2^(e - 127)
      Vec16 o[2];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
#pragma unroll
        for (int w = 0; w < 4; w += 2) {
          const uint32_t b0 = f32_to_e4m3_rne(bf16_lo(v[c].w[w]) * inv);
          const uint32_t b1 = f32_to_e4m3_rne(bf16_hi(v[c].w[w]) * inv);
          const uint32_t b2 = f32_to_e4m3_rne(bf16_lo(v[c].w[w + 1]) * inv);
          const uint32_t b3 = f32_to_e4m3_rne(bf16_hi(v[c].w[w + 1]) * inv);
          o[c / 2].w[(c % 2) * 2 + w / 2] = b0 | (b1 << 8) | (b2 << 16) | (b3 << 24);
        }
      }
      Vec16* dst = reinterpret_cast<Vec16*>(a.xq + (long)tok * a.D + 32 * j);
      dst[0] = o[0];
      dst[1] = o[1];
    }
    for (int k = 0; k < a.K; ++k) {
      const int p = s.pos[tok * a.K + k];
      if (p >= 0) a.xs[scale_offset(p, j, sc)] = (uint8_t)e;
    }
  }
}

}  // namespace smallm
