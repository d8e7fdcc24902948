// ResNet-18 as a libtorch module: torchvision's resnet18 (BasicBlock, layers
// [2, 2, 2, 2], 7x7 stem with stride 2 and a 3x3 max pool, global average
// pool, linear head), with the stem's input channels, the classes and the
// base width as options: in_channels 1 and 10 classes for Fashion-MNIST
// (28x28 -> 7x7 after the stem, 1x1 after layer4), 11,175,370 parameters
// (~42.6 MiB of f32). Parameter names are torchvision's ("conv1.weight",
// "layer1.0.bn1.running_mean", "layer2.0.downsample.0.weight", "fc.bias"),
// so a state dict moves between this and torchvision.models.resnet18(
// num_classes=10) with conv1 replaced by a 1-channel one, and
// interop/torch/models/reference_models.py is its Python twin, op for op
// (the same libtorch kernels run on both sides: bitwise equal results).
//
//   ResNet18Options options;                      // 1 channel, 10 classes
//   ResNet18 model(options);
//   torch::Tensor logits = model->forward(torch::zeros({8, 1, 28, 28}));  // [8, 10]
//
// Initialization is libtorch's default for each layer, not torchvision's
// kaiming_normal_ (the Python twin does the same, so seeded twins match).
#ifndef LOCKSTEP_INTEROP_TORCH_MODELS_RESNET18_H_
#define LOCKSTEP_INTEROP_TORCH_MODELS_RESNET18_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "interop/torch/fsdp/sharded_unit.h"

#include <cstdint>

namespace lockstep {
namespace interop {

struct ResNet18Options {
  int64_t in_channels = 1;
  int64_t num_classes = 10;
  int64_t width = 64;  // channels of layer1; layer k has width * 2^(k-1)
  // Each BasicBlock built as an FSDP unit, Sharded(BasicBlock(...))
  // (interop/torch/fsdp/sharded_unit.h): the same names and initial values.
  bool shard_blocks = false;
};

// One BasicBlock: conv3x3-BN-ReLU-conv3x3-BN, plus the input (through a
// 1x1 conv-BN "downsample" where the stride or the width changes), ReLU.
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

class ResNet18Impl : public torch::nn::Module {
 public:
  explicit ResNet18Impl(const ResNet18Options& options = {});
  torch::Tensor forward(torch::Tensor x);  // [N, in_channels, H, W] -> [N, num_classes]

 private:
  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet18);

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_MODELS_RESNET18_H_
