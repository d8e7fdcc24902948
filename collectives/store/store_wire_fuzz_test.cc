// Seeded, bounded mutation fuzzing of the store frame parsers.
#include <random>
#include <string>
#include <vector>

#include "collectives/store/store_wire.h"
#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace lockstep {
namespace {

namespace wire = store_wire;

std::vector<std::string> Corpus() {
  std::vector<std::string> out;
  wire::Request r;
  r.op = wire::Op::kHello;
  r.value = "token";
  out.push_back(wire::EncodeRequest(r));
  r = {};
  r.op = wire::Op::kSet;
  r.keys = {"key"};
  r.value = "value";
  out.push_back(wire::EncodeRequest(r));
  r = {};
  r.op = wire::Op::kWait;
  r.keys = {"a", "bb", "ccc"};
  r.integer = 1000;
  out.push_back(wire::EncodeRequest(r));
  r = {};
  r.op = wire::Op::kCompareSet;
  r.keys = {"k"};
  r.value = "old";
  r.desired = "new";
  out.push_back(wire::EncodeRequest(r));
  out.push_back(wire::EncodeResponse({absl::StatusCode::kNotFound, "msg", 7}));
  return out;
}

TEST(StoreWireTest, RoundTrips) {
  for (const std::string& frame : Corpus()) {
    absl::StatusOr<wire::FrameHeader> h = wire::ParseHeader(absl::string_view(frame).substr(0, 12));
    ASSERT_TRUE(h.ok()) << h.status();
    const std::string body = frame.substr(12);
    ASSERT_EQ(h->body_bytes, body.size());
    if (h->op == wire::Op::kResponse) {
      const absl::StatusOr<wire::Response> r = wire::ParseResponse(body);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->value, "msg");
      EXPECT_EQ(r->integer, 7);
    } else {
      const absl::StatusOr<wire::Request> r = wire::ParseRequest(h->op, body);
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(wire::EncodeRequest(*r), frame);
    }
  }
}

TEST(StoreWireTest, RejectsBadFramesWithReasons) {
  std::string frame = Corpus()[1];
  std::string bad_magic = frame;
  bad_magic[0] = 'X';
  EXPECT_NE(wire::ParseHeader(bad_magic.substr(0, 12)).status().message().find("bad magic"), std::string::npos);
  std::string bad_version = frame;
  bad_version[4] = 9;
  EXPECT_NE(wire::ParseHeader(bad_version.substr(0, 12)).status().message().find("version 9"), std::string::npos);
  // A key length that runs past the frame.
  std::string body = frame.substr(12);
  body[0] = 100;
  const auto r = wire::ParseRequest(wire::Op::kSet, body);
  EXPECT_NE(r.status().message().find("claims 100 bytes"), std::string::npos) << r.status();
  EXPECT_NE(wire::ParseRequest(wire::Op::kSet, body.substr(0, 2)).status().message().find("truncated"),
            std::string::npos);
  EXPECT_NE(wire::ParseRequest(wire::Op::kNumKeys, "x").status().message().find("trailing"), std::string::npos);
}

TEST(StoreWireTest, RandomMutationsNeverCrash) {
  std::mt19937 rng(7);
  const std::vector<std::string> corpus = Corpus();
  for (int run = 0; run < 200000; ++run) {
    std::string input = corpus[rng() % corpus.size()];
    for (int m = 1 + rng() % 4; m > 0; --m) {
      switch (rng() % 4) {
        case 0:
          if (!input.empty()) input[rng() % input.size()] ^= static_cast<char>(1 << (rng() % 8));
          break;
        case 1:
          if (!input.empty()) input[rng() % input.size()] = static_cast<char>(rng());
          break;
        case 2:
          input.resize(rng() % (input.size() + 1));
          break;
        case 3:
          for (int k = rng() % 8; k > 0; --k) input.push_back(static_cast<char>(rng()));
          break;
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
}

}  // namespace
}  // namespace lockstep
