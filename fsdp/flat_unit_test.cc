// FlatUnit on 2 and 3 ranks: the shard holds this rank's elements, a gather
// gives every parameter back (bit for bit in f32, rounded once in bf16),
// the reduced gradient is DDP's float(1/world)-scaled sum (exact at world
// 2), a bf16 reduction stays within bf16's rounding of it, a second
// reduction adds to the first, and misuse is named.
#include "fsdp/flat_unit.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/kernels.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Parameter p's value element k on every rank; its gradient on rank r.
float Value(int p, int64_t k) { return 0.25f * static_cast<float>(p + 1) + 0.001f * static_cast<float>(k); }
float Grad(int r, int p, int64_t k) { return std::sin(0.37f * static_cast<float>(k + 11 * p + 3 * r)) / 3.0f; }

const std::vector<int64_t> kNumels = {7, 1, 12};

absl::Status Check(bool ok, const std::string& what) { return ok ? absl::OkStatus() : absl::InternalError(what); }

absl::Status RoundTrip(Communicator& comm, DType gather_dtype, DType reduce_dtype, std::vector<float>* grads) {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FlatUnit> unit, FlatUnit::Create("block", kNumels, comm));
  const FlatShardLayout& layout = unit->layout();
  for (size_t p = 0; p < kNumels.size(); ++p) {
    std::vector<float> v(kNumels[p]);
    for (int64_t k = 0; k < kNumels[p]; ++k) v[k] = Value(static_cast<int>(p), k);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<float>(v));
    LOCKSTEP_RETURN_IF_ERROR(unit->SetShardFrom(p, t));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty({layout.padded}, gather_dtype));
  LOCKSTEP_RETURN_IF_ERROR(unit->IssueGather(full));
  LOCKSTEP_RETURN_IF_ERROR(unit->WaitGather());
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor wide, Tensor::Empty({layout.padded}, DType::kF32));
  LOCKSTEP_RETURN_IF_ERROR(Cast(full, wide));
  for (size_t p = 0; p < kNumels.size(); ++p) {
    for (int64_t k = 0; k < kNumels[p]; ++k) {
      const float want = Value(static_cast<int>(p), k);
      const float got = wide.data<float>()[layout.offsets[p] + k];
      const float tolerance = gather_dtype == DType::kF32 ? 0.0f : std::fabs(want) * std::ldexp(1.0f, -8);
      LOCKSTEP_RETURN_IF_ERROR(Check(std::fabs(got - want) <= tolerance,
                                     absl::StrCat("gathered parameter ", p, "[", k, "] = ", got, ", want ", want)));
    }
  }
  for (int64_t k = layout.total; k < layout.padded; ++k) {
    LOCKSTEP_RETURN_IF_ERROR(Check(wide.data<float>()[k] == 0.0f, "padding is not zero"));
  }
  LOCKSTEP_RETURN_IF_ERROR(unit->BeginGrads(reduce_dtype));
  for (size_t p = 0; p < kNumels.size(); ++p) {
    if (p == 1) continue;  // Unused on every rank: zeros.
    std::vector<float> g(kNumels[p]);
    for (int64_t k = 0; k < kNumels[p]; ++k) g[k] = Grad(comm.rank(), static_cast<int>(p), k);
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<float>(g));
    LOCKSTEP_RETURN_IF_ERROR(unit->AddGrad(p, t));
  }
  LOCKSTEP_RETURN_IF_ERROR(unit->IssueReduce());
  LOCKSTEP_RETURN_IF_ERROR(unit->FinishReduce());
  LOCKSTEP_ASSIGN_OR_RETURN(*grads, unit->shard().grad.ToVector<float>());
  return absl::OkStatus();
}

// The average each flat element must hold: sum over ranks of
// float(g * float(1 / world)), computed here in double, and in float
// (`*float_sum`, rank order: at world 2 the one rounding any order gives).
double Expected(int world, int64_t flat, const FlatShardLayout& layout, double* abs_sum, float* float_sum) {
  const float factor = static_cast<float>(1.0 / world);
  double sum = 0;
  *abs_sum = 0;
  *float_sum = 0.0f;
  for (size_t p = 0; p < kNumels.size(); ++p) {
    if (p == 1 || flat < layout.offsets[p] || flat >= layout.offsets[p] + kNumels[p]) continue;
    for (int r = 0; r < world; ++r) {
      const float t = Grad(r, static_cast<int>(p), flat - layout.offsets[p]) * factor;
      sum += t;
      *float_sum += t;
      *abs_sum += std::fabs(t);
    }
  }
  return sum;
}

void ExpectReduced(int world, DType gather_dtype, DType reduce_dtype) {
  std::vector<std::vector<float>> grads(world);
  testing::ExpectAllOk(testing::RunThreads(
      world, [&](Communicator& comm) { return RoundTrip(comm, gather_dtype, reduce_dtype, &grads[comm.rank()]); }));
  const FlatShardLayout layout = FlatShardLayout::Make(kNumels, world);
  // f32: (world - 1) roundings of the sum (at world 2 exactly the float
  // sum, as DDP's: two terms add the same in either order);
  // bf16: each term and each partial sum rounded to 8 bits, then widened.
  const double u = reduce_dtype == DType::kF32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
  const double roundings = reduce_dtype == DType::kF32 ? world - 1 : 2 * world;
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(grads[r].size(), static_cast<size_t>(layout.shard));
    for (int64_t i = 0; i < layout.shard; ++i) {
      double abs_sum = 0;
      float float_sum = 0;
      const double want = Expected(world, r * layout.shard + i, layout, &abs_sum, &float_sum);
      if (world == 2 && reduce_dtype == DType::kF32) {
        EXPECT_EQ(grads[r][i], float_sum) << "rank " << r << " element " << i;
        continue;
      }
      EXPECT_LE(std::fabs(grads[r][i] - want), roundings * u * (1 + u) * abs_sum) << "rank " << r << " element " << i;
    }
  }
}

TEST(FlatUnitTest, F32AtWorldTwoIsDdpsExactSum) { ExpectReduced(2, DType::kF32, DType::kF32); }
TEST(FlatUnitTest, F32AtWorldThreeIsWithinTwoRoundings) { ExpectReduced(3, DType::kF32, DType::kF32); }
TEST(FlatUnitTest, Bf16GatherAndReduceAreWithinBf16Rounding) { ExpectReduced(2, DType::kBF16, DType::kBF16); }
TEST(FlatUnitTest, F16GatherWithF32Reduction) { ExpectReduced(3, DType::kF16, DType::kF32); }

TEST(FlatUnitTest, ASecondReductionAddsToTheShardGradient) {
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FlatUnit> unit, FlatUnit::Create("", {3}, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor g, Tensor::FromVector<float>({2.0f, 4.0f, 8.0f}));
    for (int i = 0; i < 2; ++i) {
      LOCKSTEP_RETURN_IF_ERROR(unit->BeginGrads());
      LOCKSTEP_RETURN_IF_ERROR(unit->AddGrad(0, g));
      LOCKSTEP_RETURN_IF_ERROR(unit->IssueReduce());
      LOCKSTEP_RETURN_IF_ERROR(unit->FinishReduce());
    }
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<float> got, unit->shard().grad.ToVector<float>());
    // Padded to 4: rank 0 holds {2, 4} * 2 steps, rank 1 {8, pad 0} * 2.
    const std::vector<float> want = comm.rank() == 0 ? std::vector<float>{4, 8} : std::vector<float>{16, 0};
    return Check(got == want, absl::StrCat("rank ", comm.rank(), " shard gradient ", got[0], ", ", got[1]));
  }));
}

TEST(FlatUnitTest, MisuseIsNamed) {
  testing::ExpectAllOk(testing::RunThreads(1, [&](Communicator& comm) -> absl::Status {
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<FlatUnit> unit, FlatUnit::Create("layer1", {4, 2}, comm));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor g, Tensor::Zeros({4}, DType::kF32));
    absl::Status s = unit->AddGrad(0, g);
    LOCKSTEP_RETURN_IF_ERROR(
        Check(s.code() == absl::StatusCode::kFailedPrecondition &&
                  s.message().find("unit 'layer1' parameter 0: no BeginGrads") != absl::string_view::npos,
              s.ToString()));
    LOCKSTEP_RETURN_IF_ERROR(unit->BeginGrads());
    s = unit->AddGrad(1, g);  // Parameter 1 has 2 elements.
    LOCKSTEP_RETURN_IF_ERROR(
        Check(s.message().find("does not fit the parameter") != absl::string_view::npos, s.ToString()));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor small, Tensor::Zeros({5}, DType::kF32));
    s = unit->IssueGather(small);
    LOCKSTEP_RETURN_IF_ERROR(
        Check(s.code() == absl::StatusCode::kInvalidArgument &&
                  s.message().find("expected a buffer of 6 f32, bf16 or f16 elements") != absl::string_view::npos,
              s.ToString()));
    s = unit->SetShardFrom(0, small);
    LOCKSTEP_RETURN_IF_ERROR(
        Check(s.message().find("parameter 0 expected 4 elements") != absl::string_view::npos, s.ToString()));
    s = unit->BeginGrads(DType::kI64);
    return Check(s.message().find("reduce dtype i64 is not f32, bf16 or f16") != absl::string_view::npos, s.ToString());
  }));
}

}  // namespace
}  // namespace lockstep
