// Sharded(module): marks a submodule of a libtorch model as one unit of
// fully sharded data parallel (interop/torch/fsdp/fully_shard.h). libtorch's
// C++ modules have no forward hooks, so a unit is marked where the model is
// built, as FSDP1 wraps its units:
//
//   layer->push_back(Sharded(BasicBlock(64, 64, 1)));        // in a Sequential
//   blocks->push_back(Sharded(CharTransformerBlock(384, 6)));  // or a ModuleList
//
// The wrapper registers the wrapped module's parameters, buffers and
// children under its own name, so names and state dicts are the plain
// model's ("layer1.0.conv1.weight", not "layer1.0.module.conv1.weight").
// Its forward is the wrapped module's, between FullyShard's gather before
// and release after; before a FullyShard holds the model (or after it is
// gone) it simply runs the wrapped module. Its forward takes one tensor
// and returns one: the output's gradient hook is where the unit is gathered
// again for backward.
#ifndef LOCKSTEP_INTEROP_TORCH_FSDP_SHARDED_UNIT_H_
#define LOCKSTEP_INTEROP_TORCH_FSDP_SHARDED_UNIT_H_

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <utility>

namespace lockstep {
namespace interop {

// What FullyShard sees of a unit: the calls around its forward.
class ShardedUnitBase : public torch::nn::Module {
 public:
  // Set by FullyShard (both empty: run plainly). `before` may throw
  // c10::Error; `after` takes the output and may register its hook.
  void SetCallbacks(std::function<void()> before, std::function<void(const at::Tensor&)> after) {
    before_ = std::move(before);
    after_ = std::move(after);
  }

 protected:
  void Before() {
    if (before_) before_();
  }
  void After(const at::Tensor& out) {
    if (after_) after_(out);
  }
  // Adopts `inner`'s parameters, buffers and children under this module.
  void Adopt(torch::nn::Module& inner) {
    for (const auto& item : inner.named_parameters(/*recurse=*/false)) {
      register_parameter(item.key(), item.value(), item.value().requires_grad());
    }
    for (const auto& item : inner.named_buffers(/*recurse=*/false)) register_buffer(item.key(), item.value());
    for (const auto& item : inner.named_children()) register_module(item.key(), item.value());
  }

 private:
  std::function<void()> before_;
  std::function<void(const at::Tensor&)> after_;
};

template <typename Inner>  // Inner: a module type (BasicBlockImpl), not its holder.
class ShardedImpl : public ShardedUnitBase {
 public:
  explicit ShardedImpl(std::shared_ptr<Inner> inner) : inner_(std::move(inner)) { Adopt(*inner_); }

  // One tensor in, one out (a non-template forward, so that Sequential's
  // AnyModule can hold the unit).
  at::Tensor forward(at::Tensor x) {
    Before();
    at::Tensor out = inner_->forward(std::move(x));
    After(out);
    return out;
  }

  Inner& inner() { return *inner_; }

 private:
  std::shared_ptr<Inner> inner_;
};

// The holder, as TORCH_MODULE makes for a plain module.
template <typename Inner>
class ShardedHolder : public torch::nn::ModuleHolder<ShardedImpl<Inner>> {
 public:
  using torch::nn::ModuleHolder<ShardedImpl<Inner>>::ModuleHolder;
};

// Sharded(BasicBlock(...)): the unit wrapping a module holder.
template <typename Holder>
ShardedHolder<typename Holder::ContainedType> Sharded(Holder module) {
  return ShardedHolder<typename Holder::ContainedType>(
      std::make_shared<ShardedImpl<typename Holder::ContainedType>>(module.ptr()));
}

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_FSDP_SHARDED_UNIT_H_
