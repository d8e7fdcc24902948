#include "collectives/bootstrap/backend_choice.h"

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "collectives/nccl/nccl_api.h"

namespace lockstep {
namespace {

enum class Request { kAuto, kHost, kNccl };

absl::StatusOr<Request> ParseRequest(absl::string_view text, absl::string_view where) {
  const std::string value = absl::AsciiStrToLower(text);
  if (value.empty() || value == "auto") return Request::kAuto;
  if (value == "host" || value == "tcp" || value == "gloo") return Request::kHost;
  if (value == "nccl") return Request::kNccl;
  return absl::InvalidArgumentError(absl::StrCat(where, " is \"", text, "\"; expected auto, host or nccl"));
}

}  // namespace

absl::string_view BackendKindName(BackendKind kind) { return kind == BackendKind::kNccl ? "nccl" : "host"; }

absl::StatusOr<BackendChoice> ChooseBackend(const BackendChoiceInput& in) {
  absl::StatusOr<Request> flag = ParseRequest(in.requested, "--backend");
  if (!flag.ok()) return flag.status();
  absl::StatusOr<Request> env = ParseRequest(in.environment, "LOCKSTEP_BACKEND");
  if (!env.ok()) return env.status();
  const Request request = *flag != Request::kAuto ? *flag : *env;
  const char* by = *flag != Request::kAuto ? "--backend" : "LOCKSTEP_BACKEND";

  // Why NCCL cannot run here; empty when it can.
  std::string nccl_blocker;
  if (!in.device.is_cuda()) {
    nccl_blocker = absl::StrCat("tensors are on ", in.device.ToString(), ", and NCCL needs CUDA tensors");
  } else if (in.nccl_version == 0) {
    nccl_blocker = "this build or machine has no NCCL";
  } else if (in.nccl_version < kNcclMinimumVersion) {
    nccl_blocker = absl::StrCat("the linked NCCL ", NcclVersionString(in.nccl_version), " is older than ",
                                NcclVersionString(kNcclMinimumVersion));
  } else if (in.device.index() >= in.visible_gpus) {
    nccl_blocker = absl::StrCat(in.device.ToString(), " is not one of the ", in.visible_gpus, " visible GPU(s)");
  } else if (in.local_world_size > in.visible_gpus) {
    nccl_blocker = absl::StrCat(in.local_world_size, " local ranks share ", in.visible_gpus,
                                " GPU(s), and NCCL refuses several ranks on one GPU");
  }

  BackendChoice choice;
  switch (request) {
    case Request::kHost:
      choice.kind = BackendKind::kHost;
      choice.reason = absl::StrCat("host backend, forced by ", by);
      return choice;
    case Request::kNccl:
      if (!nccl_blocker.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(by, " asks for NCCL, but ", nccl_blocker,
                                                          "; use the host backend (", by,
                                                          "=host or auto), which stages CUDA tensors through pinned "
                                                          "host memory"));
      }
      choice.kind = BackendKind::kNccl;
      choice.reason = absl::StrCat("NCCL ", NcclVersionString(in.nccl_version), ", forced by ", by);
      return choice;
    case Request::kAuto:
      break;
  }
  if (nccl_blocker.empty()) {
    choice.kind = BackendKind::kNccl;
    choice.reason = absl::StrCat("NCCL ", NcclVersionString(in.nccl_version), ": one rank per GPU (",
                                 in.local_world_size, " local rank(s), ", in.visible_gpus, " GPU(s))");
  } else {
    choice.kind = BackendKind::kHost;
    choice.reason = absl::StrCat("host backend: ", nccl_blocker);
  }
  return choice;
}

std::string BackendFromEnvironment() {
  const char* value = std::getenv("LOCKSTEP_BACKEND");
  return value == nullptr ? "" : value;
}

}  // namespace lockstep
