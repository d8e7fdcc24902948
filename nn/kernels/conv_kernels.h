// The CPU convolution kernels behind nn/conv2d.h: oneDNN's primitives when
// lockstep is built with oneDNN (@local_dnnl, Debian's libdnnl-dev), none
// otherwise (Conv2d then runs im2col + BLAS per image).
//
//   std::unique_ptr<ConvKernels> k = ConvKernels::Create();   // null without oneDNN
//   LOCKSTEP_RETURN_IF_ERROR(k->Forward(shape, x, w, b, y));
//
// Plain layouts in and out (NCHW activations, OIHW weights), all of the
// shape's dtype: f32, or bf16 (autocast: bf16 operands, f32 accumulation,
// the results rounded once to bf16; f16 is Unimplemented on the CPU, where
// oneDNN 2.6 has no f16 convolution); the whole batch in one primitive. Primitives are made once per shape and kept; they
// run in the layouts oneDNN picks (blocked, where its JIT kernels want it),
// with reorders at each call. The backward passes reuse the copies Forward
// made of x and w, and BackwardData the one BackwardWeights made of dy: the
// same pointers must hold the same values from a Forward to its backward
// (autograd's rule for saved tensors; Conv2d keeps its input and changes
// its weights only at the optimizer's step). oneDNN sums in an order of its
// own (any order is within nn/testing/error_bound.h's radius). Threads: one
// per call unless OMP_NUM_THREADS is set (oneDNN's OpenMP would otherwise
// take every core in every rank), as nn/math.h does for OpenBLAS. One
// object per Conv2d: not thread-safe.
#ifndef LOCKSTEP_NN_KERNELS_CONV_KERNELS_H_
#define LOCKSTEP_NN_KERNELS_CONV_KERNELS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "core/dtype.h"

namespace lockstep {
namespace nn_internal {

struct ConvShape {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight [o, c, kh, kw]
  int64_t sh, sw, ph, pw;
  int64_t oh, ow;  // output
  bool bias;
  DType dtype = DType::kF32;  // of every operand and result
  bool operator==(const ConvShape& b) const {
    return n == b.n && c == b.c && h == b.h && w == b.w && o == b.o && kh == b.kh && kw == b.kw && sh == b.sh &&
           sw == b.sw && ph == b.ph && pw == b.pw && oh == b.oh && ow == b.ow && bias == b.bias && dtype == b.dtype;
  }
};

class ConvKernels {
 public:
  virtual ~ConvKernels() = default;
  // oneDNN's kernels, or null when lockstep was built without oneDNN (or
  // LOCKSTEP_NO_DNNL=1 is set: an A/B switch).
  static std::unique_ptr<ConvKernels> Create();
  // What runs convolutions on the CPU, for the trainers' start-up line:
  // "oneDNN 2.6.3 (avx512_core_bf16)", or the fallback and how to get oneDNN.
  static std::string Description();

  // Whether these kernels run convolutions in `dtype` (else Conv2d uses
  // its im2col fallback for that dtype).
  virtual bool Supports(DType dtype) const = 0;
  // y = conv(x, w) + b; b null without bias. Pointers to s.dtype values.
  virtual absl::Status Forward(const ConvShape& s, const void* x, const void* w, const void* b, void* y) = 0;
  // dx = conv_transpose(dy, w).
  virtual absl::Status BackwardData(const ConvShape& s, const void* dy, const void* w, void* dx) = 0;
  // dw (and db unless null) from x and dy, over the whole batch (written,
  // not accumulated).
  virtual absl::Status BackwardWeights(const ConvShape& s, const void* x, const void* dy, void* dw, void* db) = 0;
};

}  // namespace nn_internal
}  // namespace lockstep

#endif  // LOCKSTEP_NN_KERNELS_CONV_KERNELS_H_
