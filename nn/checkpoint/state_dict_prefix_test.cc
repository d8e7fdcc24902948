// Wrapped models' state dicts: plain names and PyTorch's "module."-prefixed
// names load the same; other names are untouched and still checked.
#include "nn/checkpoint/state_dict_prefix.h"

#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"

namespace lockstep {
namespace {

std::unique_ptr<Sequential> Model(uint64_t seed) {
  Mt19937 gen(seed);
  MlpOptions o;
  o.sizes = {6, 5, 3};
  o.flatten = false;
  return std::move(*MakeMlp(o, gen));
}

TEST(StateDictPrefixTest, PlainAndModulePrefixedNamesLoadAlike) {
  std::unique_ptr<Sequential> source = Model(1);
  std::vector<NamedTensor> plain;
  for (const NamedTensor& e : source->StateDict()) plain.push_back({e.first, *e.second.Clone()});
  std::vector<NamedTensor> prefixed = plain;
  for (NamedTensor& e : prefixed) e.first = "module." + e.first;
  for (const auto* state : {&plain, &prefixed}) {
    std::unique_ptr<Sequential> target = Model(2);
    ASSERT_TRUE(LoadStateDictAcceptingWrapperPrefix(*target, *state).ok());
    const std::vector<NamedTensor> loaded = target->StateDict();
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_EQ(*loaded[i].second.ToVector<float>(), *plain[i].second.ToVector<float>()) << plain[i].first;
    }
  }
}

TEST(StateDictPrefixTest, OnlyTheLeadingPrefixGoesAndStrictnessStays) {
  std::vector<NamedTensor> state = {{"module.0.weight", Tensor()}, {"x.module.w", Tensor()}, {"module", Tensor()}};
  std::vector<NamedTensor> out = StripPrefixIfPresent(state);
  EXPECT_EQ(out[0].first, "0.weight");
  EXPECT_EQ(out[1].first, "x.module.w");
  EXPECT_EQ(out[2].first, "module");
  std::unique_ptr<Sequential> target = Model(2);
  std::vector<NamedTensor> wrong = {{"module.9.weight", *Tensor::Zeros({1}, DType::kF32)}};
  const absl::Status s = LoadStateDictAcceptingWrapperPrefix(*target, wrong);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("9.weight"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace lockstep
