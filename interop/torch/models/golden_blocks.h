// The golden models of interop/torch/ddp:ddp_golden_test in C++: the same modules as
// golden_blocks.py (names, shapes, and the operations in the
// same order), so that libtorch runs the same kernels here and in Python.
#ifndef LOCKSTEP_INTEROP_TORCH_MODELS_GOLDEN_BLOCKS_H_
#define LOCKSTEP_INTEROP_TORCH_MODELS_GOLDEN_BLOCKS_H_

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <vector>

namespace lockstep {
namespace interop {

// ResNet in golden_blocks.py.
struct GoldenResNet : torch::nn::Module {
  static torch::nn::Conv2dOptions Conv(int in, int out) {
    return torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false);
  }

  explicit GoldenResNet(bool with_unused) {
    stem_conv = register_module("stem_conv", torch::nn::Conv2d(Conv(3, 8)));
    stem_bn = register_module("stem_bn", torch::nn::BatchNorm2d(8));
    block_conv1 = register_module("block_conv1", torch::nn::Conv2d(Conv(8, 8)));
    block_bn1 = register_module("block_bn1", torch::nn::BatchNorm2d(8));
    block_conv2 = register_module("block_conv2", torch::nn::Conv2d(Conv(8, 8)));
    block_bn2 = register_module("block_bn2", torch::nn::BatchNorm2d(8));
    fc = register_module("fc", torch::nn::Linear(8, 10));
    if (with_unused) fc_unused = register_module("fc_unused", torch::nn::Linear(8, 10));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(stem_bn(stem_conv(x)));
    torch::Tensor y = torch::relu(block_bn1(block_conv1(x)));
    y = block_bn2(block_conv2(y));
    x = torch::relu(x + y);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return fc(x);
  }

  torch::nn::Conv2d stem_conv{nullptr}, block_conv1{nullptr}, block_conv2{nullptr};
  torch::nn::BatchNorm2d stem_bn{nullptr}, block_bn1{nullptr}, block_bn2{nullptr};
  torch::nn::Linear fc{nullptr}, fc_unused{nullptr};
};

// Transformer in golden_blocks.py.
struct GoldenTransformer : torch::nn::Module {
  static constexpr int64_t kDim = 16, kHeads = 2, kHidden = 32;

  explicit GoldenTransformer(bool with_unused) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    qkv = register_module("qkv", torch::nn::Linear(kDim, 3 * kDim));
    proj = register_module("proj", torch::nn::Linear(kDim, kDim));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kDim})));
    fc1 = register_module("fc1", torch::nn::Linear(kDim, kHidden));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kDim));
    head = register_module("head", torch::nn::Linear(kDim, 5));
    if (with_unused) fc_unused = register_module("fc_unused", torch::nn::Linear(kDim, 5));
  }

  torch::Tensor forward(torch::Tensor x) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2);
    const int64_t h = kHeads, hd = kDim / kHeads;
    std::vector<torch::Tensor> qkv_parts = qkv(ln1(x)).chunk(3, -1);
    torch::Tensor q = qkv_parts[0].reshape({b, t, h, hd}).transpose(1, 2);
    torch::Tensor k = qkv_parts[1].reshape({b, t, h, hd}).transpose(1, 2);
    torch::Tensor v = qkv_parts[2].reshape({b, t, h, hd}).transpose(1, 2);
    torch::Tensor att =
        torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd))), -1);
    torch::Tensor o = torch::matmul(att, v).transpose(1, 2).reshape({b, t, d});
    x = x + proj(o);
    x = x + fc2(torch::gelu(fc1(ln2(x))));
    return head(x.mean(1));
  }

  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr}, head{nullptr}, fc_unused{nullptr};
};

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_MODELS_GOLDEN_BLOCKS_H_
