#include "collectives/transport/transport.h"

#include "core/dtype.h"

namespace lockstep {

std::string ElementName(uint8_t element) {
  if (element == 0) return "untyped";
  return std::string(DTypeName(static_cast<DType>(element - 1)));
}

TrafficCounters TrafficTally::Snapshot() const {
  TrafficCounters c;
  for (int peer = 0; peer < size_; ++peer) {
    c.bytes_sent.push_back(sent_[peer].load(std::memory_order_relaxed));
    c.bytes_received.push_back(received_[peer].load(std::memory_order_relaxed));
  }
  return c;
}

}  // namespace lockstep
