// Bad options are refused before anything is connected, naming the field
// and its range; nothing is published in the store.
#include "collectives/bootstrap/tcp_communicator.h"

#include <memory>

#include "collectives/host_backend.h"
#include "collectives/store/hash_store.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

void ExpectRefused(const TcpCommunicatorOptions& options, absl::string_view field) {
  auto store = std::make_shared<HashStore>();
  const absl::Status s = CreateTcpCommunicator(store, 0, 2, options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(field), absl::string_view::npos) << s;
  EXPECT_EQ(*store->NumKeys(), 0) << "nothing may be published for refused options";
}

TEST(TcpCommunicatorTest, BadOptionsAreRefusedNamingTheField) {
  TcpCommunicatorOptions o;
  o.communicator.timeout = Milliseconds(0);
  ExpectRefused(o, "CommunicatorOptions.timeout");
  o = TcpCommunicatorOptions();
  o.communicator.worker_spin_microseconds = -1;
  ExpectRefused(o, "worker_spin_microseconds");
  o = TcpCommunicatorOptions();
  o.communicator.failure_report_window = Milliseconds(-5);
  ExpectRefused(o, "failure_report_window");
  o = TcpCommunicatorOptions();
  o.algorithms.segment_bytes = 0;
  ExpectRefused(o, "AlgorithmOptions.segment_bytes");
  o = TcpCommunicatorOptions();
  o.transport.host = "";
  ExpectRefused(o, "TcpTransportOptions.host");
  o = TcpCommunicatorOptions();
  o.store_prefix = "";
  ExpectRefused(o, "store_prefix");
}

TEST(TcpCommunicatorTest, ARankOutsideTheGroupAndMissingPiecesAreRefused) {
  auto store = std::make_shared<HashStore>();
  EXPECT_EQ(CreateTcpCommunicator(store, 2, 2, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CreateTcpCommunicator(nullptr, 0, 2, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HostBackend::Create(nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Communicator::Create(nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep
