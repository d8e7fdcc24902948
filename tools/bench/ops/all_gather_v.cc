// all_gather_v: uneven blocks gathered into every rank's output of `bytes`:
// rank r's block proportional to r + 1, the blocks together count = bytes /
// element (the row's count is the total); busbw (n-1)/n.
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

// Rank r's block: total x (r + 1) / (n(n + 1)/2), the last taking the rest.
BufferShape UnevenShape(int64_t total, int n, int rank) {
  BufferShape shape;
  const int64_t parts = static_cast<int64_t>(n) * (n + 1) / 2;
  int64_t given = 0;
  for (int r = 0; r < n; ++r) {
    shape.counts.push_back(r == n - 1 ? total - given : total * (r + 1) / parts);
    given += shape.counts.back();
  }
  shape.input = shape.counts[rank];
  shape.output = total;
  return shape;
}

std::shared_ptr<Work> LaunchAllGatherV(Communicator& comm, const Buffers& b, const OpArgs& args) {
  return comm.AllGatherV(b.input, b.output, b.counts);
}

// The output holds every rank's block in rank order.
int64_t CheckAllGatherV(const CheckInput& in) {
  int64_t wrong = 0, at = 0;
  for (int k = 0; k < in.n; ++k) {
    wrong += CountWrongIn(in.host.output, at, in.host.counts[k], [&](int64_t i) { return InputValue(k, i); });
    at += in.host.counts[k];
  }
  return wrong;
}

}  // namespace

CollectiveDescriptor AllGatherVCollective() {
  CollectiveDescriptor d;
  d.name = "all_gather_v";
  d.count = WholeBufferCount;
  d.bytes = WholeBufferBytes;
  d.shape = UnevenShape;
  d.bus_factor = ShareBusFactor;
  d.fill = FillInput;
  d.launch = LaunchAllGatherV;
  d.count_wrong = CheckAllGatherV;
  return d;
}

}  // namespace bench
}  // namespace lockstep
