// SystemNcclRuntime in a build without CUDA: no NCCL, and every call says
// how to get it.
#include <memory>
#include <string>

#include "collectives/nccl/nccl_api.h"

namespace lockstep {
namespace {

absl::Status NoNccl(const char* call) {
  return absl::FailedPreconditionError(
      std::string(call) +
      ": this build of lockstep has no NCCL; install the CUDA toolkit with NCCL under /usr/local/cuda (or set "
      "CUDA_PATH) and build with --config=cuda, or use the host backend (LOCKSTEP_BACKEND=host)");
}

class NoNcclRuntime final : public NcclRuntime {
 public:
  int Version() override { return 0; }
  int DeviceCount() override { return 0; }
  absl::StatusOr<std::string> DeviceId(int) override { return NoNccl("cudaDeviceGetPCIBusId"); }
  absl::StatusOr<std::string> NewUniqueId() override { return NoNccl("ncclGetUniqueId"); }
  absl::StatusOr<std::unique_ptr<NcclComm>> InitRank(const std::string&, int, int, int, bool, Deadline) override {
    return NoNccl("ncclCommInitRank");
  }
};

}  // namespace

std::unique_ptr<NcclRuntime> SystemNcclRuntime() { return std::make_unique<NoNcclRuntime>(); }

}  // namespace lockstep
