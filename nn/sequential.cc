#include "nn/sequential.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace lockstep {
namespace {

// "2" for a positional child, "2 'fc1'" for a named one.
std::string Label(size_t i, const std::string& name) {
  return name == std::to_string(i) ? name : absl::StrCat(i, " '", name, "'");
}

}  // namespace

absl::Status Sequential::CheckChildName(const std::string& name, const Module* child) const {
  std::string problem;
  if (child == nullptr) {
    problem = "the child is null";
  } else if (name.empty()) {
    problem = "the name is empty";
  } else if (name.find('.') != std::string::npos) {
    problem = "a name must not contain '.' (it separates the parts of a parameter name)";
  } else if (std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    problem = "all-digit names are the positional names of unnamed children; use Add(child)";
  } else {
    for (size_t i = 0; i < size(); ++i) {
      if (child_name(i) == name) problem = absl::StrCat("child ", i, " already has this name");
    }
  }
  if (problem.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("Sequential::Add(\"", name, "\", ...): ", problem));
}

absl::StatusOr<Tensor> Sequential::Forward(const Tensor& input) {
  Tensor x = input;
  for (size_t i = 0; i < size(); ++i) {
    absl::StatusOr<Tensor> y = ChildForward(child(i), x);
    if (!y.ok()) {
      return absl::Status(y.status().code(), absl::StrCat("Sequential child ", Label(i, child_name(i)), " (",
                                                          child(i).type_name(), "): ", y.status().message()));
    }
    x = *std::move(y);
  }
  return x;
}

absl::StatusOr<Tensor> Sequential::BackwardImpl(const Tensor& grad_output, bool input_grad,
                                                const ParameterReadyFn& ready) {
  // Without an input gradient, nothing before the first child with
  // parameters needs one either (e.g. no 128x784 GEMM for Flatten's input).
  size_t first_trainable = size();
  for (size_t i = 0; i < size() && first_trainable == size(); ++i) {
    if (child(i).HasParameters()) first_trainable = i;
  }
  Tensor g = grad_output;
  for (size_t i = size(); i-- > 0;) {
    const bool child_input_grad = input_grad || i > first_trainable;
    absl::StatusOr<Tensor> gi = ChildBackward(child(i), g, child_input_grad, ready);
    if (!gi.ok()) {
      return absl::Status(gi.status().code(), absl::StrCat("Sequential child ", Label(i, child_name(i)), " (",
                                                           child(i).type_name(), "): ", gi.status().message()));
    }
    g = *std::move(gi);
  }
  return g;
}

absl::StatusOr<std::unique_ptr<Module>> Sequential::NewLike(Device device) const {
  auto copy = std::make_unique<Sequential>();
  for (size_t i = 0; i < size(); ++i) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Module> c, ChildNewLike(child(i), device));
    copy->RegisterModule(child_name(i), std::move(c));
  }
  return std::unique_ptr<Module>(std::move(copy));
}

}  // namespace lockstep
