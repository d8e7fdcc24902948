// all_to_all: every rank sends `bytes`, a block of bytes / n to every rank
// (nccl-tests' alltoall); count = bytes / element rounded down to whole
// blocks; busbw (n-1)/n. Numeric dtypes only.
#include "absl/status/status.h"
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

int64_t AllToAllCount(int64_t bytes, int64_t element_bytes, int n) {
  return WholeBufferCount(bytes, element_bytes, n) / n * n;
}

absl::Status ValidateAllToAll(DType dtype, int n) {
  if (dtype == DType::kBool) return absl::InvalidArgumentError("--op=all_to_all: use a numeric dtype");
  return absl::OkStatus();
}

std::shared_ptr<Work> LaunchAllToAll(Communicator& comm, const Buffers& b, const OpArgs& args) {
  return comm.AllToAll(b.input, b.output);
}

// Block k of the output is rank k's block r: its values r x block + i.
int64_t CheckAllToAll(const CheckInput& in) {
  const int64_t block = in.count / in.n;
  int64_t wrong = 0;
  for (int k = 0; k < in.n; ++k) {
    wrong +=
        CountWrongIn(in.host.output, k * block, block, [&](int64_t i) { return InputValue(k, in.rank * block + i); });
  }
  return wrong;
}

}  // namespace

CollectiveDescriptor AllToAllCollective() {
  CollectiveDescriptor d;
  d.name = "all_to_all";
  d.count = AllToAllCount;
  d.bytes = WholeBufferBytes;
  d.shape = SameShape;
  d.bus_factor = ShareBusFactor;
  d.validate = ValidateAllToAll;
  d.fill = FillInput;
  d.launch = LaunchAllToAll;
  d.count_wrong = CheckAllToAll;
  return d;
}

}  // namespace bench
}  // namespace lockstep
