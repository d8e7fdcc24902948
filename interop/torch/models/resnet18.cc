#include "interop/torch/models/resnet18.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>

namespace lockstep {
namespace interop {
namespace {

torch::nn::Conv2dOptions Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false);
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in, int64_t out, int64_t stride) {
  conv1 = register_module("conv1", torch::nn::Conv2d(Conv(in, out, 3, stride, 1)));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(out));
  conv2 = register_module("conv2", torch::nn::Conv2d(Conv(out, out, 3, 1, 1)));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(out));
  if (stride != 1 || in != out) {
    downsample = register_module("downsample", torch::nn::Sequential(torch::nn::Conv2d(Conv(in, out, 1, stride, 0)),
                                                                     torch::nn::BatchNorm2d(out)));
  }
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor y = torch::relu(bn1(conv1(x)));
  y = bn2(conv2(y));
  const torch::Tensor identity = downsample ? downsample->forward(x) : x;
  return torch::relu(y + identity);
}

ResNet18Impl::ResNet18Impl(const ResNet18Options& o) {
  conv1 = register_module("conv1", torch::nn::Conv2d(Conv(o.in_channels, o.width, 7, 2, 3)));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(o.width));
  torch::nn::Sequential* layers[] = {&layer1, &layer2, &layer3, &layer4};
  int64_t in = o.width;
  for (int k = 0; k < 4; ++k) {
    const int64_t out = o.width << k;
    const int64_t stride = k == 0 ? 1 : 2;
    torch::nn::Sequential layer;
    for (int b = 0; b < 2; ++b) {
      // Built first, then wrapped: the same random draws either way.
      BasicBlock block(b == 0 ? in : out, out, b == 0 ? stride : 1);
      if (o.shard_blocks) {
        layer->push_back(Sharded(block));
      } else {
        layer->push_back(block);
      }
    }
    *layers[k] = register_module("layer" + std::to_string(k + 1), layer);
    in = out;
  }
  fc = register_module("fc", torch::nn::Linear(in, o.num_classes));
}

torch::Tensor ResNet18Impl::forward(torch::Tensor x) {
  x = torch::relu(bn1(conv1(x)));
  x = torch::max_pool2d(x, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);
  x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc(x);
}

}  // namespace interop
}  // namespace lockstep
