#include "amp/grad_scaler.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/kernels.h"
#include "core/tensor.h"
#include "core/testing/float_bits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

using testing::Bits;
using testing::FromBits;

uint64_t ParseHex(const std::string& s) { return std::stoull(s, nullptr, 16); }

GradScaler MakeScaler(GradScalerOptions options = {}) {
  absl::StatusOr<GradScaler> s = GradScaler::Create(options);
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

Tensor F32(std::vector<float> v) { return *Tensor::FromVector<float>(v); }

// A tensor of `dtype` holding `values` rounded once (core's Cast).
Tensor Make(DType dtype, const std::vector<float>& values) {
  Tensor src = F32(values);
  Tensor dst = *Tensor::Empty({static_cast<int64_t>(values.size())}, dtype);
  EXPECT_TRUE(Cast(src, dst).ok());
  return dst;
}

// Raw bytes, to compare tensors bit for bit (NaN included).
std::vector<uint8_t> Bytes(const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  if (!out.empty()) std::memcpy(out.data(), t.raw_data(), out.size());
  return out;
}

GradScalerOptions InitScale(double init_scale) {
  GradScalerOptions o;
  o.init_scale = init_scale;
  return o;
}

GradScalerOptions With(std::function<void(GradScalerOptions&)> change) {
  GradScalerOptions o;
  change(o);
  return o;
}

GradScalerState StateWithScale(float scale) {
  GradScalerState st;
  st.scale = scale;
  return st;
}

absl::Status Noop() { return absl::OkStatus(); }

// --- golden data from PyTorch (amp/testdata/make_grad_scaler_golden.py) ---

struct GoldenStep {
  int64_t step;
  std::string event;
  std::string new_scale;  // "-" or f32 bits.
  bool stepped, found_inf;
  uint32_t scale_bits;
  int64_t tracker;
};

struct GoldenSeries {
  std::string name;
  GradScalerOptions options;
  std::vector<GoldenStep> steps;
};

struct GoldenValue {
  std::string dtype;
  uint32_t scale_bits, inv_bits;  // inv_bits only for unscale.
  uint64_t in_bits, out_bits;
};

// Two optimizers over one scaler (the "multi" lines).
struct GoldenMultiStep {
  int64_t step;
  std::string event_a, event_b;
  bool unscaled_a, stepped_a, stepped_b;
  uint32_t scale_bits;
  int64_t tracker;
};

struct Golden {
  std::vector<GoldenSeries> series;
  GradScalerOptions multi_options;
  std::vector<GoldenMultiStep> multi;
  std::vector<GoldenValue> unscale, scale;
  std::vector<std::string> state_keys;
};

Golden LoadGolden() {
  std::ifstream in("amp/testdata/grad_scaler_golden.txt");
  EXPECT_TRUE(in.good()) << "golden file missing";
  Golden g;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string kind;
    s >> kind;
    if (kind == "series") {
      GoldenSeries series;
      std::string init, growth, backoff;
      s >> series.name >> init >> growth >> backoff >> series.options.growth_interval;
      series.options.init_scale = std::stod(init);
      series.options.growth_factor = std::stod(growth);
      series.options.backoff_factor = std::stod(backoff);
      g.series.push_back(series);
    } else if (kind == "unscale" || kind == "scale") {
      GoldenValue v;
      std::string scale, inv = "0", in_bits, out_bits;
      s >> v.dtype >> scale;
      if (kind == "unscale") s >> inv;
      s >> in_bits >> out_bits;
      v.scale_bits = static_cast<uint32_t>(ParseHex(scale));
      v.inv_bits = static_cast<uint32_t>(ParseHex(inv));
      v.in_bits = ParseHex(in_bits);
      v.out_bits = ParseHex(out_bits);
      (kind == "unscale" ? g.unscale : g.scale).push_back(v);
    } else if (kind == "multi_series") {
      std::string init, growth, backoff;
      s >> init >> growth >> backoff >> g.multi_options.growth_interval;
      g.multi_options.init_scale = std::stod(init);
      g.multi_options.growth_factor = std::stod(growth);
      g.multi_options.backoff_factor = std::stod(backoff);
    } else if (kind == "multi") {
      GoldenMultiStep m;
      int unscaled, a, b;
      std::string scale_bits;
      s >> m.step >> m.event_a >> m.event_b >> unscaled >> a >> b >> scale_bits >> m.tracker;
      m.unscaled_a = unscaled;
      m.stepped_a = a;
      m.stepped_b = b;
      m.scale_bits = static_cast<uint32_t>(ParseHex(scale_bits));
      g.multi.push_back(m);
    } else if (kind == "state_keys") {
      std::string key;
      while (s >> key) g.state_keys.push_back(key);
    } else {
      GoldenStep st;
      st.step = std::stoll(kind);
      std::string scale_bits;
      int stepped, found_inf;
      s >> st.event >> st.new_scale >> stepped >> found_inf >> scale_bits >> st.tracker;
      st.stepped = stepped;
      st.found_inf = found_inf;
      st.scale_bits = static_cast<uint32_t>(ParseHex(scale_bits));
      EXPECT_FALSE(g.series.empty()) << line;
      g.series.back().steps.push_back(st);
    }
  }
  return g;
}

const Golden& GetGolden() {
  static const Golden* golden = new Golden(LoadGolden());
  return *golden;
}

DType ParseGoldenDType(const std::string& name) {
  if (name == "f64") return DType::kF64;
  if (name == "f16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  return DType::kF32;
}

// A one-element tensor holding raw bits of `dtype`.
Tensor FromBitsTensor(DType dtype, uint64_t bits) {
  Tensor t = *Tensor::Empty({1}, dtype);
  std::memcpy(t.raw_data(), &bits, t.element_size());  // Little endian.
  return t;
}

uint64_t BitsOf(const Tensor& t, int64_t i) {
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const char*>(t.raw_data()) + i * t.element_size(), t.element_size());
  return bits;
}

TEST(GradScalerGoldenTest, SeriesMatchPyTorchBitwise) {
  const Golden& golden = GetGolden();
  ASSERT_EQ(golden.series.size(), 8u);
  int64_t total = 0;
  for (const GoldenSeries& series : golden.series) {
    GradScaler scaler = MakeScaler(series.options);
    // As bad_grads in the script: sizes 4 and 3, the bad value at flat
    // position (step * 5) % 7.
    Tensor a = *Tensor::Empty({4}, DType::kF32);
    Tensor b = *Tensor::Empty({3}, DType::kF32);
    for (const GoldenStep& st : series.steps) {
      const std::string where = series.name + " step " + std::to_string(st.step);
      std::vector<float> flat(7, 0.25f * scaler.scale());
      if (st.event != "ok") {
        const float bad = st.event == "inf"    ? std::numeric_limits<float>::infinity()
                          : st.event == "-inf" ? -std::numeric_limits<float>::infinity()
                                               : std::numeric_limits<float>::quiet_NaN();
        ASSERT_TRUE(st.event == "inf" || st.event == "-inf" || st.event == "nan") << where;
        flat[(st.step * 5) % 7] = bad;
      }
      std::memcpy(a.data<float>(), flat.data(), 4 * sizeof(float));
      std::memcpy(b.data<float>(), flat.data() + 4, 3 * sizeof(float));
      bool stepped = false;
      absl::StatusOr<bool> r = scaler.Step({a, b}, [&] {
        stepped = true;
        return absl::OkStatus();
      });
      ASSERT_TRUE(r.ok()) << where << ": " << r.status();
      EXPECT_EQ(*r, st.stepped) << where;
      EXPECT_EQ(stepped, st.stepped) << where;
      EXPECT_EQ(scaler.found_inf(), st.found_inf) << where;
      if (st.new_scale == "-") {
        ASSERT_TRUE(scaler.Update().ok()) << where;
      } else {
        ASSERT_TRUE(scaler.Update(FromBits(static_cast<uint32_t>(ParseHex(st.new_scale)))).ok()) << where;
      }
      ASSERT_EQ(Bits(scaler.scale()), st.scale_bits)
          << where << ": got " << scaler.scale() << ", PyTorch " << FromBits(st.scale_bits);
      ASSERT_EQ(scaler.growth_tracker(), st.tracker) << where;
      ++total;
    }
  }
  EXPECT_EQ(total, 6046);  // Every step of every series.
}

// PyTorch's per-optimizer state: each optimizer steps or skips on its own
// gradients; one update() backs off once if any of them found an inf/NaN.
TEST(GradScalerGoldenTest, TwoOptimizersMatchPyTorch) {
  const Golden& golden = GetGolden();
  ASSERT_EQ(golden.multi.size(), 40u);
  GradScaler scaler = MakeScaler(golden.multi_options);
  int encoder = 0, decoder = 0;  // Their addresses are the keys.
  Tensor a = *Tensor::Empty({4}, DType::kF32);
  Tensor b = *Tensor::Empty({3}, DType::kF32);
  const auto fill = [&](const Tensor& t, const std::string& event, int64_t step) {
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.25f * scaler.scale();
    if (event == "inf") t.data<float>()[step % t.numel()] = std::numeric_limits<float>::infinity();
    if (event == "nan") t.data<float>()[step % t.numel()] = std::numeric_limits<float>::quiet_NaN();
  };
  for (const GoldenMultiStep& st : golden.multi) {
    const std::string where = "step " + std::to_string(st.step);
    fill(a, st.event_a, st.step);
    fill(b, st.event_b, st.step);
    if (st.unscaled_a) ASSERT_TRUE(scaler.Unscale(&encoder, {a}).ok()) << where;
    bool ran_a = false, ran_b = false;
    absl::StatusOr<bool> ra = scaler.Step(&encoder, {a}, [&] {
      ran_a = true;
      return absl::OkStatus();
    });
    absl::StatusOr<bool> rb = scaler.Step(&decoder, {b}, [&] {
      ran_b = true;
      return absl::OkStatus();
    });
    ASSERT_TRUE(ra.ok() && rb.ok()) << where << ": " << ra.status() << " " << rb.status();
    EXPECT_EQ(*ra, st.stepped_a) << where;
    EXPECT_EQ(ran_a, st.stepped_a) << where;
    EXPECT_EQ(*rb, st.stepped_b) << where;
    EXPECT_EQ(ran_b, st.stepped_b) << where;
    EXPECT_EQ(scaler.found_inf(), st.event_a != "ok" || st.event_b != "ok") << where;
    ASSERT_TRUE(scaler.Update().ok()) << where;
    ASSERT_EQ(Bits(scaler.scale()), st.scale_bits)
        << where << ": got " << scaler.scale() << ", PyTorch " << FromBits(st.scale_bits);
    ASSERT_EQ(scaler.growth_tracker(), st.tracker) << where;
  }
}

// The per-optimizer protocol: order errors are per optimizer, Update needs a
// check from any of them and resets all.
TEST(GradScalerTest, SeveralOptimizersKeepTheirOwnProtocol) {
  GradScaler scaler = MakeScaler({});
  int first = 0, second = 0;
  Tensor a = *Tensor::FromVector<float>(std::vector<float>{2.0f});
  Tensor b = *Tensor::FromVector<float>(std::vector<float>{4.0f});
  const auto ok = [] { return absl::OkStatus(); };
  ASSERT_TRUE(scaler.Unscale(&first, {a}).ok());
  absl::Status twice = scaler.Unscale(&first, {a});
  EXPECT_EQ(twice.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(twice.message().find("unscale_() has already been called on this optimizer"), std::string::npos) << twice;
  EXPECT_TRUE(scaler.Unscale(&second, {b}).ok());  // Another optimizer: fine.
  EXPECT_TRUE(scaler.Step(&first, {a}, ok).ok());
  absl::StatusOr<bool> again = scaler.Step(&first, {a}, ok);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("step() has already been called since the last update()"), std::string::npos);
  EXPECT_TRUE(scaler.Step(&second, {b}, ok).ok());
  // Each gradient was unscaled once.
  EXPECT_EQ(a.data<float>()[0], 2.0f / 65536.0f);
  EXPECT_EQ(b.data<float>()[0], 4.0f / 65536.0f);
  ASSERT_TRUE(scaler.Update().ok());
  EXPECT_EQ(scaler.growth_tracker(), 1);  // One clean iteration, not two.
  // After Update every optimizer starts afresh; without any check Update fails.
  EXPECT_TRUE(scaler.Unscale(&first, {a}).ok());
  ASSERT_TRUE(scaler.Update().ok());
  absl::Status none = scaler.Update();
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.message().find("No inf checks were recorded prior to update."), std::string::npos) << none;
  // An optimizer whose gradients are all undefined has nothing to step on.
  absl::StatusOr<bool> empty = scaler.Step(&second, {Tensor()}, ok);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(empty.status().message().find("No inf checks were recorded for this optimizer."), std::string::npos);
}

TEST(GradScalerGoldenTest, UnscaleMatchesPyTorchBitwise) {
  const Golden& golden = GetGolden();
  ASSERT_GT(golden.unscale.size(), 800u);
  // Grouped by (dtype, scale) into one tensor, as a real gradient.
  std::map<std::pair<std::string, uint32_t>, std::vector<const GoldenValue*>> groups;
  for (const GoldenValue& v : golden.unscale) groups[{v.dtype, v.scale_bits}].push_back(&v);
  ASSERT_EQ(groups.size(), 20u);
  for (const auto& [key, values] : groups) {
    const DType dtype = ParseGoldenDType(key.first);
    const float scale = FromBits(key.second);
    const std::string where = key.first + " scale " + std::to_string(scale);
    // GradScaler's inv_scale, as PyTorch's scale.double().reciprocal().float().
    EXPECT_EQ(Bits(static_cast<float>(1.0 / static_cast<double>(scale))), values[0]->inv_bits) << where;
    Tensor t = *Tensor::Empty({static_cast<int64_t>(values.size())}, dtype);
    for (size_t i = 0; i < values.size(); ++i) {
      std::memcpy(static_cast<char*>(t.raw_data()) + i * t.element_size(), &values[i]->in_bits, t.element_size());
    }
    GradScaler scaler = MakeScaler(InitScale(scale));
    ASSERT_EQ(scaler.scale(), scale);
    ASSERT_TRUE(scaler.Unscale({t}).ok()) << where;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(BitsOf(t, i), values[i]->out_bits)
          << where << " element " << i << " in 0x" << std::hex << values[i]->in_bits;
    }
  }
}

TEST(GradScalerGoldenTest, ScaleMatchesPyTorchBitwise) {
  const Golden& golden = GetGolden();
  ASSERT_GT(golden.scale.size(), 400u);
  for (const GoldenValue& v : golden.scale) {
    const DType dtype = ParseGoldenDType(v.dtype);
    GradScaler scaler = MakeScaler(InitScale(FromBits(v.scale_bits)));
    Tensor t = FromBitsTensor(dtype, v.in_bits);
    ASSERT_TRUE(scaler.Scale(t).ok());
    EXPECT_EQ(BitsOf(t, 0), v.out_bits) << v.dtype << " 0x" << std::hex << v.in_bits;
    if (dtype == DType::kF32) {
      EXPECT_EQ(Bits(scaler.Scale(FromBits(static_cast<uint32_t>(v.in_bits)))), v.out_bits)
          << "Scale(float) 0x" << std::hex << v.in_bits;
    }
  }
}

TEST(GradScalerGoldenTest, StateKeysArePyTorchs) {
  const Golden& golden = GetGolden();
  std::set<std::string> ours;
  for (const auto& [key, value] : MakeScaler().StateToMetadata()) ours.insert(key);
  EXPECT_EQ(ours, std::set<std::string>(golden.state_keys.begin(), golden.state_keys.end()));
}

// --- behaviour ---

TEST(GradScalerTest, DefaultsArePyTorchs) {
  GradScaler s = MakeScaler();
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_TRUE(s.enabled());
  EXPECT_FALSE(s.found_inf());
  const GradScalerState st = s.GetState();
  EXPECT_EQ(st.growth_factor, 2.0);
  EXPECT_EQ(st.backoff_factor, 0.5);
  EXPECT_EQ(st.growth_interval, 2000);
}

TEST(GradScalerTest, FindsInfAndNanAtEveryPositionOfEveryTensor) {
  const float kBad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()};
  const int64_t kSizes[] = {1, 17, 67};  // Odd sizes: SIMD bodies and tails.
  for (DType dtype : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}) {
    for (float bad : kBad) {
      for (int which = 0; which < 3; ++which) {
        for (int64_t pos = 0; pos < kSizes[which]; ++pos) {
          std::vector<Tensor> grads;
          for (int k = 0; k < 3; ++k) {
            std::vector<float> v(kSizes[k], 3.0f);
            if (k == which) v[pos] = bad;
            grads.push_back(Make(dtype, v));
          }
          grads.insert(grads.begin() + 1, Tensor());  // A parameter without a gradient.
          GradScaler s = MakeScaler(InitScale(2.0));
          bool called = false;
          absl::StatusOr<bool> r = s.Step(grads, [&] {
            called = true;
            return absl::OkStatus();
          });
          const std::string where = std::string(DTypeName(dtype)) + " " + std::to_string(bad) + " tensor " +
                                    std::to_string(which) + " position " + std::to_string(pos);
          ASSERT_TRUE(r.ok()) << where << ": " << r.status();
          ASSERT_FALSE(*r) << where;
          ASSERT_FALSE(called) << where;
          ASSERT_TRUE(s.found_inf()) << where;
          ASSERT_TRUE(s.Update().ok());
          ASSERT_EQ(s.scale(), 1.0f) << where;
        }
      }
    }
  }
}

TEST(GradScalerTest, SkippedStepLeavesParametersUntouched) {
  Tensor param = F32({1.5f, -2.25f, 1e-20f, std::numeric_limits<float>::denorm_min()});
  const std::vector<uint8_t> before = Bytes(param);
  Tensor grad = F32({1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 3.0f});
  GradScaler s = MakeScaler();
  bool called = false;
  auto sgd = [&]() -> absl::Status {
    called = true;
    return Scale(param, 0.5);  // Would change every parameter.
  };
  absl::StatusOr<bool> r = s.Step({grad}, sgd);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(*r);
  EXPECT_FALSE(called);
  EXPECT_EQ(Bytes(param), before);
  ASSERT_TRUE(s.Update().ok());
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_TRUE(s.found_inf());  // Still reported after Update.

  // A clean step runs the optimizer once, with unscaled gradients.
  Tensor clean = F32({32768.0f, -16384.0f});
  r = s.Step({clean}, [&]() -> absl::Status {
    EXPECT_EQ(*clean.ToVector<float>(), (std::vector<float>{1.0f, -0.5f}));
    return sgd();
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(*r);
  EXPECT_TRUE(called);
  EXPECT_FALSE(s.found_inf());
  EXPECT_NE(Bytes(param), before);
}

TEST(GradScalerTest, StepAfterUnscaleDoesNotUnscaleAgain) {
  GradScaler s = MakeScaler(InitScale(4.0));
  Tensor g = F32({8.0f, -4.0f});
  ASSERT_TRUE(s.Unscale({g}).ok());
  EXPECT_EQ(*g.ToVector<float>(), (std::vector<float>{2.0f, -1.0f}));
  // Clipping would go here.
  absl::StatusOr<bool> r = s.Step({g}, Noop);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(*r);
  EXPECT_EQ(*g.ToVector<float>(), (std::vector<float>{2.0f, -1.0f}));
  ASSERT_TRUE(s.Update().ok());
  EXPECT_EQ(s.growth_tracker(), 1);
}

TEST(GradScalerTest, ScalesTensorsAndFloats) {
  GradScaler s = MakeScaler(InitScale(3.0));
  Tensor loss = F32({0.1f});
  ASSERT_TRUE(s.Scale(loss).ok());
  EXPECT_EQ(loss.data<float>()[0], 0.1f * 3.0f);
  EXPECT_EQ(s.Scale(0.1f), 0.1f * 3.0f);
  Tensor bf = Make(DType::kBF16, {1.0f});
  ASSERT_TRUE(s.Scale(bf).ok());
  EXPECT_EQ(BitsOf(bf, 0), BitsOf(Make(DType::kBF16, {3.0f}), 0));

  absl::Status st = s.Scale(*Tensor::Zeros({2}, DType::kI32));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("GradScaler::Scale"));
  EXPECT_EQ(s.Scale(Tensor()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GradScalerTest, UndefinedGradientsAreSkipped) {
  GradScaler s = MakeScaler(InitScale(2.0));
  Tensor g = F32({4.0f});
  ASSERT_TRUE(s.Unscale({Tensor(), g, Tensor()}).ok());
  EXPECT_EQ(g.data<float>()[0], 2.0f);
  ASSERT_TRUE(s.Update().ok());

  // All undefined: nothing was checked, as PyTorch's "No inf checks".
  absl::StatusOr<bool> r = s.Step({Tensor(), Tensor()}, Noop);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("No inf checks were recorded"));
  EXPECT_EQ(s.Update().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GradScalerTest, IntegerGradientsAreRefused) {
  GradScaler s = MakeScaler();
  Tensor g = F32({1.0f});
  absl::Status st = s.Unscale({g, *Tensor::Zeros({2}, DType::kI64)});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("grads[1]"));
  EXPECT_EQ(g.data<float>()[0], 1.0f);  // Nothing written.
  EXPECT_TRUE(s.Unscale({g}).ok());     // Nothing recorded either.
}

TEST(GradScalerTest, OrderErrorsFollowPyTorch) {
  GradScaler s = MakeScaler();
  Tensor g = F32({1.0f});

  absl::Status st = s.Update();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("No inf checks were recorded prior to update"));

  ASSERT_TRUE(s.Unscale({g}).ok());
  st = s.Unscale({g});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("already been called"));
  EXPECT_EQ(g.data<float>()[0], 1.0f / 65536.0f);  // Not unscaled twice.

  ASSERT_TRUE(s.Step({g}, Noop).ok());
  st = s.Unscale({g});
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(st.message()), HasSubstr("after step()"));
  absl::StatusOr<bool> r = s.Step({g}, Noop);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("step() has already been called"));

  ASSERT_TRUE(s.Update().ok());
  EXPECT_EQ(s.Update().code(), absl::StatusCode::kFailedPrecondition);  // Once per iteration.
  EXPECT_TRUE(s.Step({g}, Noop).ok());
}

TEST(GradScalerTest, FailedOptimizerStepCanBeRetried) {
  GradScaler s = MakeScaler(InitScale(2.0));
  Tensor g = F32({2.0f});
  absl::StatusOr<bool> r = s.Step({g}, [] { return absl::UnavailableError("peer lost"); });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  int calls = 0;
  r = s.Step({g}, [&] {
    ++calls;
    return absl::OkStatus();
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(g.data<float>()[0], 1.0f);  // Unscaled once.
}

TEST(GradScalerTest, UpdateWithNewScale) {
  GradScaler s = MakeScaler(With([](GradScalerOptions& o) { o.growth_interval = 3; }));
  Tensor g = F32({1.0f});
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(s.Step({g}, Noop).ok());
    ASSERT_TRUE(s.Update().ok());
  }
  ASSERT_EQ(s.growth_tracker(), 2);
  // No step needed; the tracker is kept.
  ASSERT_TRUE(s.Update(100.0f).ok());
  EXPECT_EQ(s.scale(), 100.0f);
  EXPECT_EQ(s.growth_tracker(), 2);
  // Also ends an iteration in which Step found an inf (ignored).
  Tensor bad = F32({std::numeric_limits<float>::infinity()});
  ASSERT_TRUE(s.Step({bad}, Noop).ok());
  ASSERT_TRUE(s.Update(7.0f).ok());
  EXPECT_EQ(s.scale(), 7.0f);
  EXPECT_EQ(s.growth_tracker(), 2);
  for (float bad_scale :
       {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    absl::Status st = s.Update(bad_scale);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad_scale;
    EXPECT_THAT(std::string(st.message()), HasSubstr("new_scale")) << bad_scale;
  }
  EXPECT_EQ(s.scale(), 7.0f);
}

TEST(GradScalerTest, CollapsedScaleRefusesFiniteGradients) {
  for (float tiny : {0.0f, 1e-39f, std::numeric_limits<float>::denorm_min()}) {
    GradScaler s = MakeScaler();
    ASSERT_TRUE(s.LoadState(StateWithScale(tiny)).ok());
    Tensor g = F32({1.0f, 0.0f});
    const std::vector<uint8_t> before = Bytes(g);
    absl::StatusOr<bool> r = s.Step({g}, Noop);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << tiny;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("overflows f32")) << tiny;
    EXPECT_EQ(Bytes(g), before);
    // With an inf the step is skipped and the scale backs off as usual.
    Tensor bad = F32({1.0f, std::numeric_limits<float>::infinity()});
    r = s.Step({bad}, Noop);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_FALSE(*r);
    ASSERT_TRUE(s.Update().ok());
    EXPECT_EQ(s.scale(), static_cast<float>(static_cast<double>(tiny) * 0.5));
  }
  // Just above the edge: 1/scale rounds to a finite float.
  GradScaler s = MakeScaler();
  ASSERT_TRUE(s.LoadState(StateWithScale(3e-39f)).ok());
  Tensor g = F32({1e-39f});
  EXPECT_TRUE(s.Step({g}, Noop).ok());
}

TEST(GradScalerTest, DisabledIsANoOp) {
  GradScaler s = MakeScaler(With([](GradScalerOptions& o) {
    o.init_scale = 8.0;
    o.enabled = false;
  }));
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  Tensor g = F32({3.0f, std::numeric_limits<float>::infinity()});
  const std::vector<uint8_t> before = Bytes(g);
  ASSERT_TRUE(s.Scale(g).ok());
  EXPECT_EQ(s.Scale(0.3f), 0.3f);
  ASSERT_TRUE(s.Unscale({g}).ok());
  ASSERT_TRUE(s.Unscale({g}).ok());
  EXPECT_EQ(Bytes(g), before);
  bool called = false;
  absl::StatusOr<bool> r = s.Step({g}, [&] {
    called = true;
    return absl::OkStatus();
  });
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_TRUE(called);
  EXPECT_FALSE(s.found_inf());
  EXPECT_TRUE(s.Update().ok());
  EXPECT_TRUE(s.Update().ok());
  EXPECT_EQ(s.scale(), 1.0f);
  EXPECT_TRUE(s.StateToMetadata().empty());  // PyTorch's state_dict() is {}.
  EXPECT_TRUE(s.LoadStateFromMetadata({}).ok());
  EXPECT_TRUE(s.LoadState(StateWithScale(5.0f)).ok());
  EXPECT_EQ(s.scale(), 1.0f);
}

TEST(GradScalerTest, OptionsAreValidated) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto init_scale = [](double v) { return With([v](GradScalerOptions& o) { o.init_scale = v; }); };
  auto growth = [](double v) { return With([v](GradScalerOptions& o) { o.growth_factor = v; }); };
  auto backoff = [](double v) { return With([v](GradScalerOptions& o) { o.backoff_factor = v; }); };
  auto interval = [](int64_t v) { return With([v](GradScalerOptions& o) { o.growth_interval = v; }); };
  const std::vector<std::pair<GradScalerOptions, const char*>> cases = {
      {init_scale(0.0), "init_scale"},
      {init_scale(-1.0), "init_scale"},
      {init_scale(inf), "init_scale"},
      {init_scale(nan), "init_scale"},
      {init_scale(1e39), "init_scale"},   // inf as f32.
      {init_scale(1e-50), "init_scale"},  // 0 as f32.
      {growth(1.0), "growth_factor"},
      {growth(0.5), "growth_factor"},
      {growth(inf), "growth_factor"},
      {growth(nan), "growth_factor"},
      {backoff(0.0), "backoff_factor"},
      {backoff(1.0), "backoff_factor"},
      {backoff(-0.5), "backoff_factor"},
      {backoff(nan), "backoff_factor"},
      {interval(0), "growth_interval"},
      {interval(-3), "growth_interval"},
      {interval(int64_t{1} << 31), "growth_interval"},
  };
  for (const auto& [options, field] : cases) {
    absl::StatusOr<GradScaler> s = GradScaler::Create(options);
    ASSERT_FALSE(s.ok()) << field;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(field));
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("GradScaler::Create"));
  }
  EXPECT_TRUE(GradScaler::Create(interval((int64_t{1} << 31) - 1)).ok());
  EXPECT_TRUE(GradScaler::Create(init_scale(1e-40)).ok());  // Subnormal f32.
  EXPECT_TRUE(GradScaler::Create(growth(1.0000001)).ok());
  EXPECT_TRUE(GradScaler::Create(backoff(1e-9)).ok());
}

// Runs `steps` iterations with an inf every 5th.
void Drive(GradScaler& s, int steps) {
  for (int i = 1; i <= steps; ++i) {
    Tensor g = F32({i % 5 == 0 ? std::numeric_limits<float>::infinity() : 1.0f});
    ASSERT_TRUE(s.Step({g}, Noop).ok());
    ASSERT_TRUE(s.Update().ok());
  }
}

void ExpectSameState(const GradScalerState& a, const GradScalerState& b) {
  EXPECT_EQ(Bits(a.scale), Bits(b.scale));
  EXPECT_EQ(a.growth_tracker, b.growth_tracker);
  EXPECT_EQ(a.growth_factor, b.growth_factor);
  EXPECT_EQ(a.backoff_factor, b.backoff_factor);
  EXPECT_EQ(a.growth_interval, b.growth_interval);
}

TEST(GradScalerStateTest, StructRoundTripContinuesIdentically) {
  GradScaler a = MakeScaler(With([](GradScalerOptions& o) {
    o.init_scale = 1000.0;
    o.growth_factor = 1.7;
    o.backoff_factor = 0.37;
    o.growth_interval = 3;
  }));
  Drive(a, 17);
  const GradScalerState st = a.GetState();
  EXPECT_EQ(st.growth_tracker, 2);
  GradScaler b = MakeScaler();
  ASSERT_TRUE(b.LoadState(st).ok());
  ExpectSameState(b.GetState(), st);
  Drive(a, 23);
  Drive(b, 23);
  ExpectSameState(a.GetState(), b.GetState());
}

TEST(GradScalerStateTest, MetadataRoundTripsExactly) {
  std::vector<float> scales = {65536.0f,
                               0.0f,
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min(),
                               std::numeric_limits<float>::max(),
                               0.1f,
                               1.0f / 3.0f,
                               1e-39f};
  uint32_t x = 0x12345678u;
  for (int i = 0; i < 2000; ++i) {  // Random finite non-negative bit patterns.
    x = x * 1664525u + 1013904223u;
    const float f = FromBits(x & 0x7fffffffu);
    if (std::isfinite(f)) scales.push_back(f);
  }
  const double factors[][2] = {
      {2.0, 0.5}, {1.7, 0.37}, {1.0000000000000002, 0.99999999999999989}, {1e300, 1e-300}, {1.0001, 0.1}};
  GradScaler s = MakeScaler();
  for (size_t i = 0; i < scales.size(); ++i) {
    const auto& f = factors[i % 5];
    GradScalerState st;
    st.scale = scales[i];
    st.growth_tracker = static_cast<int64_t>(i % 7);
    st.growth_factor = f[0];
    st.backoff_factor = f[1];
    st.growth_interval = 7 + static_cast<int64_t>(i);
    ASSERT_TRUE(s.LoadState(st).ok()) << scales[i];
    const std::map<std::string, std::string> m = s.StateToMetadata("amp.scaler.");
    ASSERT_EQ(m.size(), 5u);
    GradScaler t = MakeScaler();
    ASSERT_TRUE(t.LoadStateFromMetadata(m, "amp.scaler.").ok()) << m.at("amp.scaler.scale");
    ExpectSameState(t.GetState(), st);
  }
  const std::map<std::string, std::string> m = MakeScaler().StateToMetadata();
  EXPECT_EQ(m.at("scale"), "65536");
  EXPECT_EQ(m.at("growth_factor"), "2");
  EXPECT_EQ(m.at("backoff_factor"), "0.5");
  EXPECT_EQ(m.at("growth_interval"), "2000");
  EXPECT_EQ(m.at("_growth_tracker"), "0");
}

TEST(GradScalerStateTest, MalformedMetadataIsRefused) {
  const std::map<std::string, std::string> good = MakeScaler().StateToMetadata("p/");
  struct Case {
    std::string key, value, expect;
  };
  const std::vector<Case> cases = {
      {"p/scale", "", "not a float"},
      {"p/scale", " 65536", "not a float"},
      {"p/scale", "65536 ", "not a float"},
      {"p/scale", "+65536", "not a float"},
      {"p/scale", "0x1p16", "not a float"},
      {"p/scale", "abc", "not a float"},
      {"p/scale", "1e39", "out of range"},
      {"p/scale", "nan", "finite"},
      {"p/scale", "inf", "finite"},
      {"p/scale", "-1", ">= 0"},
      {"p/scale", "-0", ">= 0"},
      {"p/growth_factor", "1", "growth_factor"},
      {"p/growth_factor", "two", "not a number"},
      {"p/backoff_factor", "1.5", "backoff_factor"},
      {"p/growth_interval", "2000.0", "not an integer"},
      {"p/growth_interval", "2e3", "not an integer"},
      {"p/growth_interval", "99999999999999999999", "out of range"},
      {"p/growth_interval", "0", "growth_interval"},
      {"p/_growth_tracker", "2000", "growth_tracker"},
      {"p/_growth_tracker", "-1", "growth_tracker"},
      {"p/_growth_tracker", "1\n", "not an integer"},
  };
  for (const Case& c : cases) {
    std::map<std::string, std::string> m = good;
    m[c.key] = c.value;
    GradScaler s = MakeScaler(InitScale(4.0));
    absl::Status st = s.LoadStateFromMetadata(m, "p/");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.key << "=" << c.value;
    EXPECT_THAT(std::string(st.message()), HasSubstr(c.expect)) << c.key << "=" << c.value;
    EXPECT_THAT(std::string(st.message()), HasSubstr("GradScaler::LoadStateFromMetadata"));
    EXPECT_EQ(s.scale(), 4.0f);  // Unchanged.
  }

  std::map<std::string, std::string> m = good;
  m.erase("p/growth_interval");
  absl::Status st = MakeScaler().LoadStateFromMetadata(m, "p/");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("missing \"p/growth_interval\""));

  // No keys at all (another prefix, or a disabled scaler saved nothing).
  st = MakeScaler().LoadStateFromMetadata(good, "q/");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr("disabled GradScaler"));
  st = MakeScaler().LoadStateFromMetadata({}, "");
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  // Unrelated keys are ignored.
  m = good;
  m["p/other"] = "x";
  m["step"] = "12";
  EXPECT_TRUE(MakeScaler().LoadStateFromMetadata(m, "p/").ok());
}

TEST(GradScalerStateTest, InvalidStatesAreRefused) {
  const float inf = std::numeric_limits<float>::infinity();
  auto state = [](std::function<void(GradScalerState&)> change) {
    GradScalerState st;
    change(st);
    return st;
  };
  const std::vector<std::pair<GradScalerState, const char*>> cases = {
      {StateWithScale(-1.0f), "scale"},
      {StateWithScale(-0.0f), "scale"},
      {StateWithScale(inf), "scale"},
      {StateWithScale(std::numeric_limits<float>::quiet_NaN()), "scale"},
      {state([](GradScalerState& st) { st.growth_tracker = 2000; }), "growth_tracker"},
      {state([](GradScalerState& st) { st.growth_tracker = -1; }), "growth_tracker"},
      {state([](GradScalerState& st) { st.growth_factor = 1.0; }), "growth_factor"},
      {state([](GradScalerState& st) { st.backoff_factor = 0.0; }), "backoff_factor"},
      {state([](GradScalerState& st) { st.growth_interval = 0; }), "growth_interval"},
  };
  for (const auto& [state, field] : cases) {
    GradScaler s = MakeScaler(InitScale(4.0));
    absl::Status st = s.LoadState(state);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(st.message()), HasSubstr(field));
    EXPECT_EQ(s.scale(), 4.0f);
  }
  GradScaler s = MakeScaler();
  EXPECT_TRUE(s.LoadState(StateWithScale(0.0f)).ok());  // Reachable by backing off.
}

}  // namespace
}  // namespace lockstep
