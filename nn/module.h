// Module: a layer or a tree of layers with named parameters, explicit
// forward and backward, and per-parameter gradient-ready hooks.
//
//   MlpOptions mlp;
//   mlp.sizes = {784, 512, 10};
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
//   model->SetGradReadyHook([&](const GradReadyEvent& e) { return MarkReady(e.index); });
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> optimizer, Sgd::Create(model->NamedParameters(), {}));
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(images));
//   LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));
//   LOCKSTEP_RETURN_IF_ERROR(model->Backward(loss.grad_logits).status());
//   LOCKSTEP_RETURN_IF_ERROR(optimizer->Step());
//   LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad());
//
// There is no general autograd. Each layer's Forward keeps what its Backward
// needs (the last forward only) and Backward consumes it: it computes the
// gradients of the layer's parameters, accumulates them into
// `Parameter::grad`, reports each parameter as soon as its gradient is final
// (which fires the gradient-ready hook), and returns the gradient of the
// layer's input.
// Containers run their children's backward in reverse order, so hooks fire
// in reverse registration order of the parameters -- the order in which
// PyTorch's autograd finishes them and in which DDP fills its buckets.
//
// Gradients accumulate across backward calls until ZeroGrad (gradient
// accumulation and DDP's no_sync rely on it). Parameter names are PyTorch's:
// a child registered as "fc1" with a parameter "weight" is "fc1.weight";
// Sequential children are named "0", "1", ... unless added with a name.
//
// Writing a layer: derive from Module; in the constructor or a Create
// factory, register parameters (RegisterParameter), buffers (RegisterBuffer)
// and children (RegisterModule) by address, in PyTorch's order; Forward saves
// what backward needs; BackwardImpl consumes it, accumulates each parameter's
// gradient with AccumulateGrad (or adds it itself and calls GradReady) in
// reverse registration order, returns the first error of either, and returns
// the input gradient (undefined when !input_grad). docs/TRAINING.md has
// a worked example.
//
// A Module is neither copyable nor movable (parameters are registered by
// address); hold it by unique_ptr and use CloneTo for a deep copy.
#ifndef LOCKSTEP_NN_MODULE_H_
#define LOCKSTEP_NN_MODULE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/device.h"
#include "core/tensor.h"

namespace lockstep {

// A trainable tensor and its accumulated gradient (undefined until the first
// backward reaches it; same shape, dtype and device as `value` after that).
// A frozen parameter (requires_grad false, torch's requires_grad_(False))
// gets no gradient and fires no hook: backward leaves `grad` as it is
// (undefined unless it was computed before the parameter was frozen),
// optimizers skip it while `grad` is undefined, DDP leaves it out of its
// buckets, and it stays in state dicts.
struct Parameter {
  Tensor value;
  Tensor grad;
  bool requires_grad = true;
};

// What the gradient-ready hook is told: the parameter, and its position and
// name in NamedParameters() of the module the hook was set on (so a hook set
// on the root sees "fc1.weight", one set on the child "fc1" sees "weight").
// `name` is valid during the call only.
struct GradReadyEvent {
  Parameter& parameter;
  size_t index;
  const std::string& name;
};

// Called once per parameter per backward, right after its gradient became
// final. Runs on the thread that called Backward; keep it short or hand off.
// An error stops the backward at once and Backward returns it (see Backward).
using GradReadyHook = std::function<absl::Status(const GradReadyEvent& event)>;

// What layers call per parameter inside BackwardImpl (Module::Backward turns
// it into a GradReadyEvent for the hook). Empty when no hook is set.
using ParameterReadyFn = std::function<absl::Status(Parameter& parameter)>;

// An entry of a state dict: a name and a tensor handle (not a copy).
using NamedTensor = std::pair<std::string, Tensor>;

struct NamedParameter {
  std::string name;
  Parameter* parameter;
};

// Hooks around one module's forward and backward, run when a container
// runs it (Module::ChildForward and ChildBackward; Sequential does): torch's
// forward pre-hook, forward hook, full backward pre-hook and full backward
// hook, reduced to what FSDP needs (fsdp/fully_shard.h gathers a unit's
// parameters before each and frees or reduces them after). Empty ones are
// skipped. An error stops the pass, which returns it; a post hook does not
// run when the module itself failed.
struct ModuleHooks {
  std::function<absl::Status()> pre_forward;
  std::function<absl::Status()> post_forward;
  std::function<absl::Status()> pre_backward;
  std::function<absl::Status()> post_backward;
};

class Module {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // "Linear", "Sequential", ... (for messages and printing).
  virtual absl::string_view type_name() const = 0;

  // Computes the output and keeps what backward needs.
  virtual absl::StatusOr<Tensor> Forward(const Tensor& input) = 0;

  // Gradient of the input given the gradient of the last Forward's output;
  // accumulates parameter gradients and fires the hook (see above). An error
  // if no forward is pending. With input_grad = false the input's gradient is
  // not computed (as for a PyTorch input that does not require grad) and an
  // undefined tensor is returned: the first layer of a model skips a GEMM.
  //
  // A hook error stops the backward immediately and is returned (its code
  // kept, its message prefixed with the parameter's name and the path of
  // layers). Then the parameter whose hook failed and those before it in
  // backward order have accumulated this backward's gradient, the others
  // have not, and layers not reached keep their pending forward (the next
  // Forward replaces it): ZeroGrad and redo the step (DDP: fail the step).
  absl::StatusOr<Tensor> Backward(const Tensor& grad_output, bool input_grad = true);

  // The hook for this module and everything below it (replaces any previous
  // one; an empty function removes it). Only the hook of the module whose
  // Backward is called runs. The parameter -> (index, name) table is built
  // here; modules do not normally change after construction, but if any
  // module registers a parameter or child afterwards, the next Backward
  // rebuilds it (a global registration counter tells).
  void SetGradReadyHook(GradReadyHook hook);

  // Replaces this module's ModuleHooks (empty ones remove them). They fire
  // only when a container runs this module, not when Forward or Backward is
  // called on it directly.
  void SetModuleHooks(ModuleHooks hooks) { module_hooks_ = std::move(hooks); }

  // Parameters in registration order, depth first, with hierarchical names;
  // the order of torch's model.named_parameters().
  std::vector<NamedParameter> NamedParameters();
  std::vector<Parameter*> Parameters();
  // Buffers (non-trainable state such as running statistics).
  std::vector<NamedTensor> NamedBuffers();

  // Sets requires_grad of every parameter whose name is `name_prefix` or
  // starts with it followed by "." (or whose name starts with a prefix that
  // ends in "."): "fc1" and "fc1." select "fc1.weight" and "fc1.bias", "1"
  // selects "1.weight" but not "10.weight". Returns how many parameters
  // matched; NotFound, listing the names, when none did (nothing changes).
  absl::StatusOr<int64_t> SetRequiresGrad(absl::string_view name_prefix, bool requires_grad);

  // This module and every module below it, depth first in registration
  // order, with their paths ("" for this one, "0", "fc1", "0.bn"): torch's
  // named_modules().
  std::vector<std::pair<std::string, Module*>> NamedModules();

  // Parameters then buffers of each module, depth first: torch's state_dict
  // order. Handles, not copies: use the tensors' Clone for a snapshot.
  std::vector<NamedTensor> StateDict();
  // Copies values into the parameters and buffers. With `strict`, missing
  // and unexpected names are errors; a wrong shape or dtype always is. The
  // message lists every problem. Nothing is written unless all checks pass.
  absl::Status LoadStateDict(const std::vector<NamedTensor>& state, bool strict = true);

  // Non-tensor state that a resumed run needs (PyTorch's get_extra_state),
  // e.g. Dropout's call counter, as "<module path>.<key>" -> value strings.
  std::map<std::string, std::string> ExtraState() const;
  // Restores what ExtraState returned; unknown or malformed entries are
  // errors naming them, and nothing changes unless all are valid.
  absl::Status LoadExtraState(const std::map<std::string, std::string>& state);

  // Zeroes every defined gradient (torch 1.13's zero_grad(set_to_none=False));
  // with set_to_none, drops them instead.
  absl::Status ZeroGrad(bool set_to_none = false);

  // Training mode (dropout active) or evaluation mode, recursively.
  void Train(bool on = true);
  void Eval() { Train(false); }
  bool is_training() const { return training_; }

  // A deep copy with parameters and buffers on `device` (gradients, hooks and
  // pending forwards are not copied). DataParallel's replicate uses it.
  absl::StatusOr<std::unique_ptr<Module>> CloneTo(Device device) const;

  // Whether this module or any below it has a parameter.
  bool HasParameters() const;

  // Number of elements over all parameters.
  int64_t NumParameterElements();

 protected:
  Module() = default;

  // Called by Backward with the per-parameter callback of the module it was
  // called on; pass it to ChildBackward, AccumulateGrad and GradReady and
  // return their errors at once.
  virtual absl::StatusOr<Tensor> BackwardImpl(const Tensor& grad_output, bool input_grad,
                                              const ParameterReadyFn& ready) = 0;
  // A new module of the same kind and configuration, with uninitialized (or
  // any) parameters on `device`; CloneTo copies the values in.
  virtual absl::StatusOr<std::unique_ptr<Module>> NewLike(Device device) const = 0;

  // This module's own extra state (not its children's); see ExtraState.
  virtual std::map<std::string, std::string> OwnExtraState() const { return {}; }
  // Checks (apply = false) or applies (apply = true) one entry of it.
  virtual absl::Status LoadOwnExtraState(const std::string& key, const std::string& value, bool apply) {
    return absl::InvalidArgumentError("unknown extra state '" + key + "' for " + std::string(type_name()));
  }

  void RegisterParameter(std::string name, Parameter* parameter);
  void RegisterBuffer(std::string name, Tensor* buffer);
  // Takes ownership; returns the raw pointer for convenience.
  Module* RegisterModule(std::string name, std::unique_ptr<Module> child);

  // For containers: runs a child's forward between its ModuleHooks' pre and
  // post forward hooks.
  static absl::StatusOr<Tensor> ChildForward(Module& child, const Tensor& input);
  // For containers: runs a child's backward with the caller's callback,
  // between its ModuleHooks' pre and post backward hooks.
  static absl::StatusOr<Tensor> ChildBackward(Module& child, const Tensor& grad_output, bool input_grad,
                                              const ParameterReadyFn& ready);
  static absl::StatusOr<std::unique_ptr<Module>> ChildNewLike(const Module& child, Device device) {
    return child.NewLike(device);
  }

  // Reports a parameter whose gradient a layer accumulated itself; returns
  // the hook's error. Nothing for a frozen parameter.
  static absl::Status GradReady(Parameter& parameter, const ParameterReadyFn& ready) {
    return ready && parameter.requires_grad ? ready(parameter) : absl::OkStatus();
  }

  // parameter.grad += grad (creating it as zeros of the parameter's dtype and
  // device on first use; `grad` may be of another floating dtype and is
  // converted), then reports it (GradReady). Nothing for a frozen parameter
  // (layers may skip computing its gradient: see requires_grad).
  static absl::Status AccumulateGrad(Parameter& parameter, const Tensor& grad, const ParameterReadyFn& ready);

  const std::vector<std::pair<std::string, std::unique_ptr<Module>>>& children() const { return children_; }

 private:
  void CollectParameters(const std::string& prefix, std::vector<NamedParameter>& out);
  void CollectState(const std::string& prefix, std::vector<NamedTensor>& out);
  void CollectBuffers(const std::string& prefix, std::vector<NamedTensor>& out);
  void CollectExtraState(const std::string& prefix, std::map<std::string, std::string>& out) const;
  absl::Status VisitExtraState(const std::string& prefix, const std::map<std::string, std::string>& state, bool apply,
                               std::vector<std::string>& problems, std::set<std::string>& seen);

  void BuildHookTable();
  // Bumped by every RegisterParameter/RegisterModule anywhere, so a hook
  // table built before a change is noticed (cheaply, at the next Backward).
  static uint64_t structure_generation();

  GradReadyHook hook_;
  ModuleHooks module_hooks_;
  // For hook_: each parameter's index in NamedParameters() and the names.
  std::unordered_map<const Parameter*, size_t> hook_index_;
  std::vector<std::string> hook_names_;
  uint64_t hook_generation_ = 0;
  bool training_ = true;
  std::vector<std::pair<std::string, Parameter*>> parameters_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_MODULE_H_
