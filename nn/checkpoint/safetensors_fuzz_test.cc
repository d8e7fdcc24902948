// Runs the safetensors fuzz target over a seed corpus and a bounded number of
// random mutations. Most mutations edit the JSON header and then re-encode
// its length, so that they get past the length check and exercise the JSON
// parser and the layout validation: bit flips, structural characters and
// tokens inserted, digit runs replaced by edge-case numbers, ranges deleted
// or duplicated, dtypes swapped. The rest change the length prefix or the
// data section, or the raw bytes. Any crash, sanitizer report or
// inconsistent success fails the test.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "gtest/gtest.h"
#include "nn/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace lockstep {
namespace {

struct Seed {
  std::string json;  // Padding included.
  std::string data;
};

std::string Encode(const std::string& json, const std::string& data, uint64_t length) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xFF));
  return out + json + data;
}

Seed Split(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(file[i]);
  return {file.substr(8, n), file.substr(8 + n)};
}

std::vector<Seed> Corpus() {
  std::vector<Seed> corpus;
  const auto add = [&](std::vector<std::pair<std::string, Tensor>> tensors,
                       std::map<std::string, std::string> metadata) {
    corpus.push_back(Split(*SerializeSafetensors(tensors, metadata)));
  };
  add({}, {});
  add({{"w", *Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})}, {"b", *Tensor::FromVector<double>({-1, 1})}},
      {{"format", "pt"}});
  add({{"scalar", *Tensor::Zeros({}, DType::kI64)},
       {"empty", *Tensor::Empty({0, 4}, DType::kBF16)},
       {"h", *Tensor::Zeros({3}, DType::kF16)},
       {"ids", *Tensor::FromVector<int32_t>({7, 8})},
       {"mask", *Tensor::FromVector<uint8_t>({1, 0, 1})}},
      {{"note", "tab\t\"q\" \xc3\xa9 \x01"}, {"step", "12"}});
  // Hand-written: whitespace, escapes, fields out of order, header order not
  // offset order.
  corpus.push_back(
      {"{ \"b\\u00e9\\ud83d\\ude00\" : {\"shape\":[ 2 ],\"data_offsets\":[1,3],\"dtype\":\"U8\"},\n"
       "\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]},"
       "\"__metadata__\":{\"k\\n\":\"v\\/\"} }   ",
       "xyz"});
  return corpus;
}

constexpr const char* kTokens[] = {"{",
                                   "}",
                                   "[",
                                   "]",
                                   "\"",
                                   ",",
                                   ":",
                                   " ",
                                   "\\",
                                   "\\u",
                                   "\\ud83d",
                                   "\\ude00",
                                   "\\u0000",
                                   "0",
                                   "-1",
                                   "1.5",
                                   "1e3",
                                   "true",
                                   "null",
                                   "\"__metadata__\"",
                                   "\"dtype\"",
                                   "\"shape\"",
                                   "\"data_offsets\"",
                                   "\"F32\"",
                                   "[]",
                                   "{}",
                                   "[0,0]",
                                   "\xc3",
                                   "\xff",
                                   "\xe6\x97\xa5",
                                   "\x01"};
constexpr const char* kNumbers[] = {"0",
                                    "1",
                                    "2",
                                    "3",
                                    "4",
                                    "7",
                                    "8",
                                    "16",
                                    "24",
                                    "00",
                                    "01",
                                    "255",
                                    "4294967296",
                                    "9223372036854775807",
                                    "9223372036854775808",
                                    "18446744073709551616",
                                    "4611686018427387904"};
constexpr const char* kDTypes[] = {"F32", "F64", "F16", "BF16", "I32", "I64", "U8", "BOOL", "I8", "f32", ""};

void MutateJson(std::mt19937& rng, std::string* json) {
  const auto position = [&](size_t extra) { return rng() % (json->size() + extra); };
  switch (rng() % 8) {
    case 0:  // Flip a bit.
      if (!json->empty()) (*json)[position(0)] ^= static_cast<char>(1 << (rng() % 8));
      break;
    case 1: {  // Set a byte to a structural character.
      static constexpr char kChars[] = "{}[]\":,\\u0123456789-.eE \t\n";
      if (!json->empty()) (*json)[position(0)] = kChars[rng() % (sizeof(kChars) - 1)];
      break;
    }
    case 2:  // Insert a token.
      json->insert(position(1), kTokens[rng() % (sizeof(kTokens) / sizeof(kTokens[0]))]);
      break;
    case 3: {  // Replace a digit run with an edge-case number.
      std::vector<std::pair<size_t, size_t>> runs;
      for (size_t i = 0; i < json->size();) {
        if (!std::isdigit(static_cast<unsigned char>((*json)[i]))) {
          ++i;
          continue;
        }
        const size_t start = i;
        while (i < json->size() && std::isdigit(static_cast<unsigned char>((*json)[i]))) ++i;
        runs.emplace_back(start, i - start);
      }
      if (runs.empty()) break;
      const auto [start, length] = runs[rng() % runs.size()];
      json->replace(start, length, kNumbers[rng() % (sizeof(kNumbers) / sizeof(kNumbers[0]))]);
      break;
    }
    case 4: {  // Delete a range.
      if (json->empty()) break;
      const size_t start = position(0);
      json->erase(start, 1 + rng() % 12);
      break;
    }
    case 5: {  // Duplicate a range elsewhere (duplicate keys, nesting).
      if (json->empty()) break;
      const size_t start = position(0);
      const std::string piece = json->substr(start, 1 + rng() % 64);
      json->insert(position(1), piece);
      break;
    }
    case 6: {  // Swap a dtype.
      for (const char* dtype : {"\"F32\"", "\"F64\"", "\"F16\"", "\"BF16\"", "\"I32\"", "\"I64\"", "\"U8\""}) {
        const size_t at = json->find(dtype);
        if (at == std::string::npos) continue;
        json->replace(at + 1, std::string(dtype).size() - 2, kDTypes[rng() % (sizeof(kDTypes) / sizeof(kDTypes[0]))]);
        break;
      }
      break;
    }
    case 7:  // Truncate (the padding, or more).
      json->resize(position(1));
      break;
  }
}

std::string Mutant(std::mt19937& rng, const std::vector<Seed>& corpus) {
  Seed seed = corpus[rng() % corpus.size()];
  const int json_mutations = rng() % 4;
  for (int m = 0; m < json_mutations; ++m) MutateJson(rng, &seed.json);
  switch (rng() % 8) {
    case 0:  // Drop or add data bytes.
      if (!seed.data.empty() && rng() % 2) {
        seed.data.resize(rng() % seed.data.size());
      } else {
        seed.data.append(1 + rng() % 8, static_cast<char>(rng()));
      }
      break;
    case 1:  // Change a data byte (valid files stay valid).
      if (!seed.data.empty()) seed.data[rng() % seed.data.size()] ^= static_cast<char>(1 + rng() % 255);
      break;
    default:
      break;
  }
  uint64_t length = seed.json.size();
  switch (rng() % 10) {
    case 0:
      length += rng() % 9;
      break;
    case 1:
      length -= std::min<uint64_t>(length, rng() % 9);
      break;
    case 2:
      length = (uint64_t{rng()} << 32) | rng();
      break;
    case 3:
      length = 100'000'000 + rng() % 2;
      break;
    default:
      break;
  }
  std::string file = Encode(seed.json, seed.data, length);
  if (rng() % 8 == 0) {  // A raw bit flip anywhere, or a truncation.
    if (rng() % 2) {
      file[rng() % file.size()] ^= static_cast<char>(1 << (rng() % 8));
    } else {
      file.resize(rng() % (file.size() + 1));
    }
  }
  return file;
}

TEST(SafetensorsFuzzTest, SeedCorpusParses) {
  for (const Seed& seed : Corpus()) {
    const std::string file = Encode(seed.json, seed.data, seed.json.size());
    EXPECT_TRUE(ParseSafetensors(file, "seed").ok()) << ParseSafetensors(file, "seed").status();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(file.data()), file.size());
  }
}

TEST(SafetensorsFuzzTest, RandomMutationsNeverCrash) {
  std::mt19937 rng(20261202);
  const std::vector<Seed> corpus = Corpus();
  int accepted = 0;
  constexpr int kRuns = 200000;
  for (int run = 0; run < kRuns; ++run) {
    const std::string input = Mutant(rng, corpus);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    accepted += ParseSafetensors(input, "mutant").ok();
  }
  // Most mutants are invalid, but some (data-only or whitespace changes)
  // stay valid.
  EXPECT_GT(accepted, kRuns / 100);
  EXPECT_LT(accepted, kRuns / 2);
}

}  // namespace
}  // namespace lockstep
