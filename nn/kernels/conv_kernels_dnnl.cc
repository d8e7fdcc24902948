// oneDNN's convolution primitives (libdnnl, 2.x C++ API).
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nn/kernels/conv_kernels.h"

namespace lockstep {
namespace nn_internal {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

memory::data_type DataType(DType dtype) {
  return dtype == DType::kBF16 ? memory::data_type::bf16 : memory::data_type::f32;
}

std::string IsaName(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    default:
      return "isa " + std::to_string(static_cast<int>(isa));
  }
}

// Debian's libdnnl runs on GNU OpenMP, whose default is a thread per core:
// with a rank per core that oversubscribes every core. As OpenBLAS in
// nn/math.cc, one thread unless OMP_NUM_THREADS says otherwise. The count
// is the calling thread's OpenMP setting, set around each call (primitive
// creation included: oneDNN blocks its work by the thread count) and put
// back after, so the caller's own OpenMP regions keep theirs.
class ThreadScope {
 public:
  explicit ThreadScope(int threads) : saved_(omp_get_max_threads()) {
    if (threads > 0 && threads != saved_) omp_set_num_threads(threads);
  }
  ~ThreadScope() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

// 0 (OpenMP's own setting) when OMP_NUM_THREADS is set, else 1.
int DefaultThreads() { return std::getenv("OMP_NUM_THREADS") != nullptr ? 0 : 1; }

// The primitives of one shape, made at its first use. Their layouts are
// oneDNN's choice (format_tag::any: blocked, aBcd16b and the like, where its
// JIT kernels want them; plain where they do not); the callers' tensors stay
// plain (NCHW, OIHW), reordered in and out at each call.
struct Primitives {
  ConvShape shape;
  memory::desc src, weights, bias, dst;  // the callers' plain layouts
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data backward_data;
  dnnl::convolution_backward_weights backward_weights;
};

// A tensor in a primitive's layout: the caller's memory when the layouts
// agree, else a buffer of ours holding a reordered copy, and which caller
// pointer it copies (so a later call on the same tensor reuses it).
struct Staged {
  memory buffer;
  const void* source = nullptr;
};

class DnnlConvKernels final : public ConvKernels {
 public:
  DnnlConvKernels() : threads_(DefaultThreads()), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  // f32 and bf16 (oneDNN 2.6 runs bf16 convolutions on every AVX-512 CPU,
  // natively with avx512_core_bf16; it has no f16 CPU convolution).
  bool Supports(DType dtype) const override { return dtype == DType::kF32 || dtype == DType::kBF16; }

  absl::Status Forward(const ConvShape& s, const void* x, const void* w, const void* b, void* y) override {
    return Run("Forward", s, [&](Primitives& p) {
      // A new forward: what the last one staged is stale.
      src_ = Staged();
      weights_ = Staged();
      diff_dst_ = Staged();
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, In(p.fwd_pd.src_desc(), p.src, x, src_)},
                                              {DNNL_ARG_WEIGHTS, In(p.fwd_pd.weights_desc(), p.weights, w, weights_)}};
      if (s.bias) args.insert({DNNL_ARG_BIAS, Wrap(p.bias, b)});
      Staged out;
      const memory dst = Out(p.fwd_pd.dst_desc(), p.dst, y, out);
      args.insert({DNNL_ARG_DST, dst});
      p.forward.execute(stream_, args);
      Finish(out, p.dst, y);
    });
  }

  absl::Status BackwardData(const ConvShape& s, const void* dy, const void* w, void* dx) override {
    return Run("BackwardData", s, [&](Primitives& p) {
      Staged out;
      const memory diff_src = Out(p.bwd_data_pd.diff_src_desc(), p.src, dx, out);
      p.backward_data.execute(stream_, {{DNNL_ARG_DIFF_DST, In(p.bwd_data_pd.diff_dst_desc(), p.dst, dy, diff_dst_)},
                                        {DNNL_ARG_WEIGHTS, In(p.bwd_data_pd.weights_desc(), p.weights, w, weights_)},
                                        {DNNL_ARG_DIFF_SRC, diff_src}});
      Finish(out, p.src, dx);
    });
  }

  absl::Status BackwardWeights(const ConvShape& s, const void* x, const void* dy, void* dw, void* db) override {
    return Run("BackwardWeights", s, [&](Primitives& p) {
      Staged out;
      const memory diff_weights = Out(p.bwd_weights_pd.diff_weights_desc(), p.weights, dw, out);
      std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, In(p.bwd_weights_pd.src_desc(), p.src, x, src_)},
          {DNNL_ARG_DIFF_DST, In(p.bwd_weights_pd.diff_dst_desc(), p.dst, dy, diff_dst_)},
          {DNNL_ARG_DIFF_WEIGHTS, diff_weights}};
      if (s.bias) args.insert({DNNL_ARG_DIFF_BIAS, Wrap(p.bias, db)});
      p.backward_weights.execute(stream_, args);
      Finish(out, p.weights, dw);
    });
  }

 private:
  memory Wrap(const memory::desc& md, const void* data) { return memory(md, engine_, const_cast<void*>(data)); }

  // `data` (in `user` layout) as the primitive wants it (`want`): itself,
  // or `staged`'s copy, reordered now unless it already holds this tensor
  // in that layout (the forward's input and weights, reused by both
  // backward passes; the output gradient, by the second).
  memory In(const memory::desc& want, const memory::desc& user, const void* data, Staged& staged) {
    if (want == user) return Wrap(user, data);
    if (staged.source == data && staged.buffer && staged.buffer.get_desc() == want) return staged.buffer;
    if (!staged.buffer || staged.buffer.get_desc() != want) staged.buffer = memory(want, engine_);
    memory from = Wrap(user, data);
    dnnl::reorder(from, staged.buffer).execute(stream_, from, staged.buffer);
    staged.source = data;
    return staged.buffer;
  }

  // Where the primitive writes `data`: itself, or a buffer that Finish
  // reorders into it.
  memory Out(const memory::desc& want, const memory::desc& user, void* data, Staged& staged) {
    if (want == user) return Wrap(user, data);
    staged.buffer = memory(want, engine_);
    staged.source = data;
    return staged.buffer;
  }

  void Finish(Staged& staged, const memory::desc& user, void* data) {
    if (!staged.buffer) return;
    memory to = Wrap(user, data);
    dnnl::reorder(staged.buffer, to).execute(stream_, staged.buffer, to);
  }

  // The primitives for `s`, made once (a few shapes are kept: a model's
  // batches all have one shape but the last of an epoch).
  Primitives& For(const ConvShape& s) {
    for (Primitives& p : cache_) {
      if (p.shape == s) return p;
    }
    const memory::dims strides = {s.sh, s.sw}, padding = {s.ph, s.pw};
    const memory::dims src_dims = {s.n, s.c, s.h, s.w}, weight_dims = {s.o, s.c, s.kh, s.kw},
                       dst_dims = {s.n, s.o, s.oh, s.ow};
    // Every operand and result in the shape's dtype: bf16 ones are rounded
    // once from oneDNN's f32 accumulators, as PyTorch's autocast convolution
    // (whose weight and bias are bf16 copies, so their gradients are bf16).
    const memory::data_type type = DataType(s.dtype);
    memory::desc src(src_dims, type, Tag::nchw), weights(weight_dims, type, Tag::oihw), bias({s.o}, type, Tag::x),
        dst(dst_dims, type, Tag::nchw);
    memory::desc any_src(src_dims, type, Tag::any), any_weights(weight_dims, type, Tag::any),
        any_dst(dst_dims, type, Tag::any);
    const auto algorithm = dnnl::algorithm::convolution_direct;
    const auto fwd_desc = s.bias
                              ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, any_src,
                                                                any_weights, bias, any_dst, strides, padding, padding)
                              : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, any_src,
                                                                any_weights, any_dst, strides, padding, padding);
    dnnl::convolution_forward::primitive_desc fwd(fwd_desc, engine_);
    dnnl::convolution_backward_data::primitive_desc bwd_data(
        dnnl::convolution_backward_data::desc(algorithm, any_src, any_weights, any_dst, strides, padding, padding),
        engine_, fwd);
    const auto bwd_w_desc = s.bias ? dnnl::convolution_backward_weights::desc(algorithm, any_src, any_weights, bias,
                                                                              any_dst, strides, padding, padding)
                                   : dnnl::convolution_backward_weights::desc(algorithm, any_src, any_weights, any_dst,
                                                                              strides, padding, padding);
    dnnl::convolution_backward_weights::primitive_desc bwd_weights(bwd_w_desc, engine_, fwd);
    if (cache_.size() >= 4) cache_.erase(cache_.begin());
    cache_.push_back(Primitives{s, src, weights, bias, dst, fwd, bwd_data, bwd_weights, dnnl::convolution_forward(fwd),
                                dnnl::convolution_backward_data(bwd_data),
                                dnnl::convolution_backward_weights(bwd_weights)});
    return cache_.back();
  }

  template <typename Fn>
  absl::Status Run(const char* what, const ConvShape& s, Fn fn) {
    ThreadScope threads(threads_);
    try {
      fn(For(s));
      stream_.wait();
      return absl::OkStatus();
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("Conv2d.", what, " (oneDNN, ", DTypeName(s.dtype), " input [", s.n, ", ",
                                              s.c, ", ", s.h, ", ", s.w, "], weight [", s.o, ", ", s.c, ", ", s.kh,
                                              ", ", s.kw, "]): ", e.what(), " (status ", static_cast<int>(e.status),
                                              ")"));
    }
  }

  const int threads_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::vector<Primitives> cache_;
  // The last Forward's input and weights and the last backward's output
  // gradient, in the primitives' layouts.
  Staged src_, weights_, diff_dst_;
};

}  // namespace

std::unique_ptr<ConvKernels> ConvKernels::Create() {
  if (const char* off = std::getenv("LOCKSTEP_NO_DNNL"); off != nullptr && std::string(off) == "1") return nullptr;
  try {
    return std::make_unique<DnnlConvKernels>();
  } catch (const dnnl::error&) {
    return nullptr;  // No CPU engine: Conv2d falls back to im2col + BLAS.
  }
}

std::string ConvKernels::Description() {
  if (const char* off = std::getenv("LOCKSTEP_NO_DNNL"); off != nullptr && std::string(off) == "1") {
    return "im2col + BLAS per image (LOCKSTEP_NO_DNNL=1)";
  }
  const dnnl_version_t* v = dnnl_version();
  return absl::StrCat("oneDNN ", v->major, ".", v->minor, ".", v->patch, " (", IsaName(dnnl::get_effective_cpu_isa()),
                      ")");
}

}  // namespace nn_internal
}  // namespace lockstep
