// Seeded, bounded mutation fuzzing of FileStore's record parser, and its
// round trip and refusals.
#include <random>
#include <string>
#include <vector>

#include "collectives/store/file_store_format.h"
#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace lockstep {
namespace {

namespace fs = file_store;

std::string Corpus() {
  std::string out;
  out += fs::Encode({fs::Record::Kind::kSet, "key", "value"});
  out += fs::Encode({fs::Record::Kind::kSet, "", std::string("\0\1\2", 3)});
  out += fs::Encode({fs::Record::Kind::kDelete, "key", ""});
  out += fs::Encode({fs::Record::Kind::kSet, "counter", "-12"});
  return out;
}

TEST(FileStoreFormatTest, RoundTripsAndStopsBeforeAnIncompleteRecord) {
  const std::string all = Corpus();
  std::vector<fs::Record> records;
  absl::StatusOr<size_t> used = fs::ParseRecords(all, 8, &records);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(*used, all.size());
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[1].value, std::string("\0\1\2", 3));
  EXPECT_EQ(records[2].kind, fs::Record::Kind::kDelete);
  // Every cut inside the last record leaves it for later, whole records parsed.
  const size_t last = all.size() - fs::Encode(records[3]).size();
  for (size_t cut = last; cut < all.size(); ++cut) {
    records.clear();
    used = fs::ParseRecords(absl::string_view(all).substr(0, cut), 8, &records);
    ASSERT_TRUE(used.ok()) << cut;
    EXPECT_EQ(*used, last) << cut;
    EXPECT_EQ(records.size(), 3u) << cut;
  }
}

TEST(FileStoreFormatTest, CorruptRecordsAreRefusedNamingTheirOffset) {
  std::vector<fs::Record> records;
  const std::string all = Corpus();
  std::string bad_kind = all;
  bad_kind[0] = 9;
  absl::StatusOr<size_t> used = fs::ParseRecords(bad_kind, 8, &records);
  EXPECT_EQ(used.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(used.status().message().find("the record at offset 8 has kind 9"), std::string::npos) << used.status();
  std::string huge_key = all;
  huge_key[1] = huge_key[2] = huge_key[3] = huge_key[4] = static_cast<char>(0xff);
  used = fs::ParseRecords(huge_key, 8, &records);
  EXPECT_NE(used.status().message().find("claims a key of 4294967295 bytes"), std::string::npos) << used.status();
  std::string huge_value = fs::Encode({fs::Record::Kind::kSet, "k", "v"});
  huge_value[1 + 4 + 1 + 3] = static_cast<char>(0x7f);  // The value length's top byte.
  used = fs::ParseRecords(huge_value, 100, &records);
  EXPECT_NE(used.status().message().find("at offset 100 claims a value of"), std::string::npos) << used.status();
}

TEST(FileStoreFormatTest, RandomMutationsNeverCrash) {
  std::mt19937 rng(11);
  const std::string corpus = Corpus();
  for (int run = 0; run < 200000; ++run) {
    std::string input = corpus.substr(0, rng() % (corpus.size() + 1));
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
