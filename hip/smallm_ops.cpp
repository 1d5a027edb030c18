// smallm_ops.cpp: torch custom ops over the compiled kernels (namespace sglang_smallm).
// Shapes, dtypes and devices are checked here; the Python gate decides eligibility before this
// is ever called, so a failed check here is a bug in the caller and raises.
// Built twice: for the GPU (the install: CUDA / ROCm torch, ops sglang_smallm on the CUDA key) and as the
// gfx950 emulation on a CPU (-DSMALLM_EMU, sglang_smallm_plugin/emulated.py: ops sglang_smallm_emu on the
// CPU key, the same checks, the launches run by hip/smallm_emu.h).
#include <Python.h>
#include <ATen/ATen.h>
#include <torch/library.h>
#if defined(SMALLM_EMU)
#define SMALLM_OPS sglang_smallm_emu
#define SMALLM_OPS_KEY CPU
#define SMALLM_MODULE "_emu"
#define SMALLM_ON_DEVICE(t) ((t).is_cpu())
#define SMALLM_DEVICE_WORD "CPU (the gfx950 emulation)"
#define SMALLM_GUARD(t)
#define SMALLM_STREAM() nullptr
const char* smallm_emu_last_error();  // why the last emulated launch failed (hip/smallm_emu.h)
bool smallm_emu_track_reads(const void* base, size_t bytes, int32_t* counts, size_t granule);  // hip/smallm_moe.hip
long long smallm_emu_reset_reads();
#define SMALLM_LAUNCH_DETAIL() "; ", smallm_emu_last_error()
#else
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#define SMALLM_OPS sglang_smallm
#define SMALLM_OPS_KEY CUDA
#define SMALLM_MODULE "_C"
#define SMALLM_ON_DEVICE(t) ((t).is_cuda())
#define SMALLM_DEVICE_WORD "GPU"
#define SMALLM_GUARD(t) const c10::cuda::CUDAGuard guard((t).device())
#define SMALLM_STREAM() c10::cuda::getCurrentCUDAStream().stream()
#define SMALLM_LAUNCH_DETAIL() ""
#endif

#include "smallm_args.h"
#include "smallm_sort_args.h"

int smallm_read_floor_launch(const uint8_t* base, const int32_t* ids, int n_ids, long expert_bytes, long offset,
                             long length, int chunks, bool dependent, unsigned* sink, void* stream);

namespace {

void check(bool ok, const char* what) { TORCH_CHECK(ok, "sglang_smallm::moe_fused: ", what); }

void moe_fused(const at::Tensor& x, const at::Tensor& w13, const at::Tensor& w2, const at::Tensor& s13,
               const at::Tensor& s2, const at::Tensor& topk_w, const at::Tensor& topk_ids, at::Tensor& out,
               at::Tensor& h, at::Tensor& y, at::Tensor& sync, int64_t fmt, int64_t layout, double out_scale,
               int64_t inter) {
  using TensorList = std::initializer_list<const at::Tensor*>;
  for (const at::Tensor* t : TensorList{&x, &w13, &w2, &s13, &s2, &topk_w, &topk_ids, &out, &h, &y, &sync})
    check(SMALLM_ON_DEVICE(*t), "all tensors must be on the " SMALLM_DEVICE_WORD);
  check(x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.is_contiguous(), "x must be contiguous bf16 [T, D]");
  check(out.sizes() == x.sizes() && out.scalar_type() == at::kBFloat16 && out.is_contiguous(), "out must be bf16 like x");
  check(topk_ids.dim() == 2 && topk_ids.scalar_type() == at::kInt && topk_ids.is_contiguous(),
        "topk_ids must be contiguous int32 [T, K]");
  check(topk_w.sizes() == topk_ids.sizes() && topk_w.scalar_type() == at::kFloat && topk_w.is_contiguous(),
        "topk_weights must be contiguous fp32 [T, K]");
  check(w13.dim() == 3 && w2.dim() == 3 && w13.is_contiguous() && w2.is_contiguous() && w13.element_size() == 1 &&
            w2.element_size() == 1,
        "weights must be contiguous 1-byte tensors [E, 2I, Kbytes] and [E, D, Ibytes]");
  check(s13.is_contiguous() && s2.is_contiguous(), "scales must be contiguous");
  for (const at::Tensor* t : {&x, &w13, &w2})
    check(reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0, "x, w13 and w2 must be 16-byte aligned");
  const int64_t T = x.size(0), D = x.size(1), K = topk_ids.size(1), E = w13.size(0);
  // Iw: the intermediate size the weights are stored with; I: the one computed (inter, 0 for Iw), smaller where
  // SGLang padded each gate/up half and w2's K with zeros for AITER (Quark MXFP4), which the kernels skip
  const int64_t Iw = w13.size(1) / 2, I = inter > 0 ? inter : Iw;
  check(topk_ids.size(0) == T, "topk_ids rows != tokens");
  check(T * K <= smallm::kMaxPairs, "tokens * slots exceeds kMaxPairs");
  check(K >= 1 && K <= smallm::kMaxSlots, "slots per token must be 1..16");
  check(E <= smallm::kMaxExperts, "too many experts");
  check(I % 128 == 0 && I <= smallm::kMaxInter && D % 128 == 0, "D and I must be multiples of 128, I <= kMaxInter");
  check(inter >= 0 && I <= Iw && Iw % 128 == 0 && E * 2 * Iw < (int64_t(1) << 31),
        "inter must be 0 or at most the weights' intermediate size (w13 rows / 2), a multiple of 128");
  check(w2.size(0) == E && w2.size(1) == D, "w2 must be [E, D, Ibytes]");
  if (fmt == smallm::kFp8Block128) {
    check(w13.size(2) == D && w2.size(2) == Iw, "fp8 weight byte widths");
    check(s13.scalar_type() == at::kFloat && s13.numel() == E * (2 * Iw / 128) * (D / 128), "fp8 w13 scale shape");
    check(s2.scalar_type() == at::kFloat && s2.numel() == E * (D / 128) * (Iw / 128), "fp8 w2 scale shape");
  } else if (fmt == smallm::kMxfp4) {
    check(w13.size(2) == D / 2 && w2.size(2) == Iw / 2, "mxfp4 weight byte widths");
    check(s13.element_size() == 1 && s2.element_size() == 1, "mxfp4 scales must be e8m0 bytes");
    const int64_t c13 = layout == smallm::kShuffle16x16 ? (D / 32 + 7) / 8 * 8 : D / 32;
    const int64_t c2 = layout == smallm::kShuffle16x16 ? (Iw / 32 + 7) / 8 * 8 : Iw / 32;
    check(s13.numel() >= E * 2 * Iw * c13 && s2.numel() >= E * D * c2, "mxfp4 scale sizes");
    if (layout == smallm::kRowMajor)  // the tensor-core down reads four e8m0 bytes at once
      check(reinterpret_cast<uintptr_t>(s13.data_ptr()) % 4 == 0 && reinterpret_cast<uintptr_t>(s2.data_ptr()) % 4 == 0,
            "row-major mxfp4 scales must be 4-byte aligned");
  } else {
    check(false, "unknown weight format");
  }
  check(h.scalar_type() == at::kFloat && h.numel() >= smallm::h_words((int)D, (int)I), "workspace h too small");
  check(y.scalar_type() == at::kFloat && y.numel() >= (int64_t)smallm::kMaxPairs * D, "workspace y too small");
  check(sync.scalar_type() == at::kInt && sync.numel() >= smallm::sync_words((int)T, (int)D), "workspace sync too small");
  if (T == 0) return;
  SMALLM_GUARD(x);
  smallm::MoeArgs a{};
  a.x = reinterpret_cast<const uint16_t*>(x.data_ptr());
  a.w13 = reinterpret_cast<const uint8_t*>(w13.data_ptr());
  a.w2 = reinterpret_cast<const uint8_t*>(w2.data_ptr());
  a.s13 = s13.data_ptr();
  a.s2 = s2.data_ptr();
  a.topk_w = topk_w.data_ptr<float>();
  a.topk_ids = topk_ids.data_ptr<int32_t>();
  a.out = reinterpret_cast<uint16_t*>(out.data_ptr());
  a.h = h.data_ptr<float>();
  a.y = y.data_ptr<float>();
  a.sync = reinterpret_cast<unsigned*>(sync.data_ptr<int32_t>());
  a.T = (int)T; a.K = (int)K; a.E = (int)E; a.D = (int)D; a.I = (int)I; a.Iw = (int)Iw;
  a.out_scale = (float)out_scale;
  const int rc = smallm_moe_launch(a, (int)fmt, (int)layout, SMALLM_STREAM());
  TORCH_CHECK(rc == 0, "sglang_smallm::moe_fused: kernel launch failed with code ", rc, SMALLM_LAUNCH_DETAIL());
}

void scheck(bool ok, const char* what) { TORCH_CHECK(ok, "sglang_smallm::moe_sort: ", what); }

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

void moe_sort(const at::Tensor& topk_ids, const std::optional<at::Tensor>& topk_w, at::Tensor& sorted_ids,
              const std::optional<at::Tensor>& sorted_w, at::Tensor& expert_ids, at::Tensor& num_valid,
              const std::optional<at::Tensor>& x, const std::optional<at::Tensor>& xq,
              const std::optional<at::Tensor>& xs, const std::optional<at::Tensor>& zero_buf, int64_t E, int64_t block,
              int64_t fmt, int64_t path) {
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{&topk_ids, &sorted_ids, &expert_ids,
                                                                      &num_valid})
    scheck(SMALLM_ON_DEVICE(*t), "tensors must be on the " SMALLM_DEVICE_WORD);
  scheck(topk_ids.dim() == 2 && topk_ids.scalar_type() == at::kInt && topk_ids.is_contiguous(),
         "topk_ids must be contiguous int32 [T, K]");
  scheck(fmt == smallm::kSortAiter || fmt == smallm::kSortTriton, "unknown output format");
  scheck(path == smallm::kSortCompact || path == smallm::kSortDistributed, "unknown sort path");
  scheck(E > 0 && block > 0, "E and block must be positive");
  const int64_t T = topk_ids.size(0), K = topk_ids.size(1), P = T * K;
  scheck(K > 0 && K < 256 && T < (1 << 24), "slots must be 1..255, tokens < 2^24");
  const int64_t NB = smallm::sort_buckets((int)fmt, (int)E);
  const int64_t rows = P + std::min(P, NB) * (block - 1);  // most rows any routing can need
  for (const at::Tensor* t : {&sorted_ids, &expert_ids, &num_valid})
    scheck(t->scalar_type() == at::kInt && t->is_contiguous(), "index outputs must be contiguous int32");
  scheck(sorted_ids.numel() >= rows, "sorted_ids is smaller than the worst-case padded length");
  scheck(expert_ids.numel() >= (rows + block - 1) / block, "expert_ids is smaller than the worst-case block count");
  scheck(num_valid.numel() >= (fmt == smallm::kSortAiter ? 2 : 1), "num_valid too small");
  smallm::SortArgs a{};
  a.topk_ids = topk_ids.data_ptr<int32_t>();
  a.sorted_ids = sorted_ids.data_ptr<int32_t>();
  a.expert_ids = expert_ids.data_ptr<int32_t>();
  a.num_valid = num_valid.data_ptr<int32_t>();
  if (fmt == smallm::kSortAiter) {
    scheck(topk_w.has_value() && sorted_w.has_value(), "AITER format needs topk_weights and sorted_weights");
    scheck(SMALLM_ON_DEVICE(*topk_w) && topk_w->sizes() == topk_ids.sizes() && topk_w->scalar_type() == at::kFloat &&
               topk_w->is_contiguous(),
           "topk_weights must be contiguous fp32 like topk_ids");
    scheck(SMALLM_ON_DEVICE(*sorted_w) && sorted_w->scalar_type() == at::kFloat && sorted_w->is_contiguous() &&
               sorted_w->numel() >= rows,
           "sorted_weights must be contiguous fp32, as long as sorted_ids");
    a.topk_w = topk_w->data_ptr<float>();
    a.sorted_w = sorted_w->data_ptr<float>();
  }
  if (x.has_value()) {
    scheck(fmt == smallm::kSortAiter, "fused MXFP8 quantisation is for the AITER format");
    scheck(block % 32 == 0, "fused MXFP8 needs block_size % 32 == 0 (32-row scale tiles)");
    scheck(xq.has_value() && xs.has_value(), "fused MXFP8 needs xq and xs");
    scheck(SMALLM_ON_DEVICE(*x) && x->dim() == 2 && x->size(0) == T && x->scalar_type() == at::kBFloat16 &&
               x->is_contiguous() && aligned16(*x) && x->size(1) % 32 == 0,
           "x must be contiguous 16-byte-aligned bf16 [T, D], D % 32 == 0");
    const int64_t D = x->size(1), sc = (D / 32 + 7) / 8 * 8;
    scheck(T * D < (int64_t(1) << 31), "T * D must stay below 2^31");
    scheck(SMALLM_ON_DEVICE(*xq) && xq->element_size() == 1 && xq->numel() == T * D && xq->is_contiguous() &&
               aligned16(*xq),
           "xq must be contiguous 16-byte-aligned 1-byte [T, D]");
    scheck(SMALLM_ON_DEVICE(*xs) && xs->element_size() == 1 && xs->is_contiguous() && aligned16(*xs) &&
               xs->numel() >= (rows + 31) / 32 * 32 * sc,
           "xs must be contiguous bytes [ceil(rows / 32) * 32, ceil(D / 256) * 8]");
    a.x = reinterpret_cast<const uint16_t*>(x->data_ptr());
    a.xq = reinterpret_cast<uint8_t*>(xq->data_ptr());
    a.xs = reinterpret_cast<uint8_t*>(xs->data_ptr());
    a.D = (int)D;
    a.scale_cols = (int)sc;
  }
  if (zero_buf.has_value() && zero_buf->numel() > 0) {
    scheck(SMALLM_ON_DEVICE(*zero_buf) && zero_buf->is_contiguous() && aligned16(*zero_buf) &&
               zero_buf->nbytes() % 16 == 0,
           "zero_buf must be contiguous, 16-byte aligned, a multiple of 16 bytes");
    a.zero = zero_buf->data_ptr();
    a.zero_vecs = (long)(zero_buf->nbytes() / 16);
  }
  a.T = (int)T; a.K = (int)K; a.E = (int)E; a.block = (int)block;
  SMALLM_GUARD(topk_ids);
  const int rc = smallm_sort_launch(a, (int)fmt, (int)path, SMALLM_STREAM());
  TORCH_CHECK(rc == 0, "sglang_smallm::moe_sort: launch failed with code ", rc,
              " (-2: too many pairs for compact, -3: too many pairs or experts for distributed)",
              SMALLM_LAUNCH_DETAIL());
}

// Reads bytes [offset, offset + length) of each listed expert (length -1: to the expert's end);
// dependent: launched as a programmatic dependent of the kernel before it (CUDA), reading after it.
void read_floor(const at::Tensor& base, const at::Tensor& ids, int64_t expert_bytes, int64_t chunks, at::Tensor& sink,
                int64_t offset, int64_t length, bool dependent) {
  TORCH_CHECK(SMALLM_ON_DEVICE(base) && SMALLM_ON_DEVICE(ids) && SMALLM_ON_DEVICE(sink),
              "sglang_smallm::read_floor: tensors must be on the " SMALLM_DEVICE_WORD);
  TORCH_CHECK(base.element_size() == 1 && base.is_contiguous() && expert_bytes % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(base.data_ptr()) % 16 == 0,
              "sglang_smallm::read_floor: base must be contiguous aligned bytes, expert_bytes % 16 == 0");
  if (length == -1) length = expert_bytes - offset;  // -1 (the default): to the expert's end
  TORCH_CHECK(offset >= 0 && length >= 0 && offset % 16 == 0 && length % 16 == 0 && offset + length <= expert_bytes,
              "sglang_smallm::read_floor: offset and length must be multiples of 16 within expert_bytes");
  TORCH_CHECK(ids.scalar_type() == at::kInt && ids.dim() == 1 && ids.is_contiguous(), "read_floor: ids int32 [n]");
  TORCH_CHECK(sink.scalar_type() == at::kInt && sink.numel() >= 1, "read_floor: sink int32 [1]");
  SMALLM_GUARD(base);
  const int rc = smallm_read_floor_launch(reinterpret_cast<const uint8_t*>(base.data_ptr()), ids.data_ptr<int32_t>(),
                                          (int)ids.numel(), (long)expert_bytes, (long)offset, (long)length,
                                          (int)chunks, dependent, reinterpret_cast<unsigned*>(sink.data_ptr<int32_t>()),
                                          SMALLM_STREAM());
  TORCH_CHECK(rc == 0, "sglang_smallm::read_floor: launch failed with code ", rc, SMALLM_LAUNCH_DETAIL());
}

std::string build_arch() { return smallm_build_arch(); }

#if defined(SMALLM_EMU)
// The emulation counts the weight bytes the kernels load (load_weights, load_weight_word) per `granule` bytes of
// `base` into `counts` (int32, one per granule, accumulated) until emu_reset_reads, which returns the bytes
// loaded outside every tracked tensor meanwhile.
void emu_track_reads(const at::Tensor& base, at::Tensor& counts, int64_t granule) {
  TORCH_CHECK(base.is_cpu() && base.is_contiguous() && counts.is_cpu() && counts.is_contiguous() &&
                  counts.scalar_type() == at::kInt && granule > 0,
              "emu_track_reads: contiguous CPU base, int32 counts, granule > 0");
  const int64_t n = (int64_t)base.nbytes();
  TORCH_CHECK(counts.numel() == (n + granule - 1) / granule, "emu_track_reads: counts needs one int32 per granule");
  TORCH_CHECK(smallm_emu_track_reads(base.data_ptr(), (size_t)n, counts.data_ptr<int32_t>(), (size_t)granule),
              "emu_track_reads: at most 4 tensors tracked at once (emu_reset_reads first)");
}
int64_t emu_reset_reads() { return smallm_emu_reset_reads(); }
#endif

}  // namespace

TORCH_LIBRARY(SMALLM_OPS, m) {
  m.def(
      "moe_fused(Tensor x, Tensor w13, Tensor w2, Tensor s13, Tensor s2, Tensor topk_weights, Tensor topk_ids, "
      "Tensor(a!) out, Tensor(b!) h, Tensor(c!) y, Tensor(d!) sync, int fmt, int layout, float out_scale, int inter=0) -> ()");
  m.def(
      "moe_sort(Tensor topk_ids, Tensor? topk_weights, Tensor(a!) sorted_ids, Tensor(b!)? sorted_weights, "
      "Tensor(c!) expert_ids, Tensor(d!) num_valid, Tensor? x, Tensor(e!)? xq, Tensor(f!)? xs, Tensor(g!)? zero_buf, "
      "int E, int block, int fmt, int path) -> ()");
  m.def(
      "read_floor(Tensor base, Tensor ids, int expert_bytes, int chunks, Tensor(a!) sink, int offset=0, int length=-1, "
      "bool dependent=False) -> ()");
  m.def("build_arch() -> str", &build_arch);
#if defined(SMALLM_EMU)
  m.def("emu_track_reads(Tensor base, Tensor(a!) counts, int granule) -> ()");
  m.def("emu_reset_reads() -> int", &emu_reset_reads);
#endif
}

TORCH_LIBRARY_IMPL(SMALLM_OPS, SMALLM_OPS_KEY, m) {
  m.impl("moe_fused", &moe_fused);
  m.impl("moe_sort", &moe_sort);
  m.impl("read_floor", &read_floor);
#if defined(SMALLM_EMU)
  m.impl("emu_track_reads", &emu_track_reads);
#endif
}

// Importing the extension module registers the ops above.
// Every field given (m_methods, m_slots, m_traverse, m_clear, m_free): -Wextra checks the op file too.
static struct PyModuleDef smallm_module = {PyModuleDef_HEAD_INIT, SMALLM_MODULE, "sglang-smallm compiled kernels", -1,
                                           nullptr, nullptr, nullptr, nullptr, nullptr};
#if defined(SMALLM_EMU)
PyMODINIT_FUNC PyInit__emu(void) { return PyModule_Create(&smallm_module); }
#else
PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&smallm_module); }
#endif
