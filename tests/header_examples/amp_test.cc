// The usage examples of amp's public headers, compiled and run. Each
// example's lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or check
// its results.
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "amp/grad_scaler.h"
#include "amp/precision_policy.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "nn/cross_entropy.h"
#include "nn/linear.h"
#include "nn/sgd.h"

namespace lockstep {
namespace {

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

// amp/grad_scaler.h: `steps` SGD steps of a Linear model with loss scaling;
// at step `poison_step` one gradient is made Inf (an overflow).
struct ScalerRun {
  std::vector<bool> stepped;
  std::vector<float> scales;  // after each Update
};

absl::StatusOr<ScalerRun> GradScalerExample(Linear* model, const Tensor& x, const Tensor& labels, int steps,
                                            int poison_step) {
  ScalerRun run;
  SgdOptions sgd;
  sgd.lr = 0.5;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd_optimizer, Sgd::Create(model->NamedParameters(), sgd));
  Sgd& optimizer = *sgd_optimizer;
  LOCKSTEP_ASSIGN_OR_RETURN(GradScaler scaler, GradScaler::Create({}));
  for (int step = 0; step < steps; ++step) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model->Forward(x));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult loss, CrossEntropy(logits, labels));  // ... forward; loss = ...;
    const Tensor& loss_grad = loss.grad_logits;
    LOCKSTEP_RETURN_IF_ERROR(scaler.Scale(loss_grad));  // d(S*loss) = S*d(loss)
    LOCKSTEP_RETURN_IF_ERROR(model->Backward(loss_grad).status());  // ... backward, DDP all-reduce: `grads` now hold S * the true gradients.
    std::vector<Tensor> grads = {model->weight().grad, model->bias().grad};
    if (step == poison_step) grads[0].data<float>()[0] = INFINITY;
    LOCKSTEP_RETURN_IF_ERROR(scaler.Unscale(grads));    // optional: to clip
    LOCKSTEP_ASSIGN_OR_RETURN(bool stepped,
        scaler.Step(grads, [&] { return optimizer.Step(); }));
    LOCKSTEP_RETURN_IF_ERROR(scaler.Update());
    run.stepped.push_back(stepped);
    run.scales.push_back(scaler.scale());
    LOCKSTEP_RETURN_IF_ERROR(optimizer.ZeroGrad());
  }
  return run;
}

TEST(AmpExamplesTest, GradScalerStepsWithTrueGradientsAndSkipsOverflows) {
  Mt19937 gen(0);
  LinearOptions options;
  options.in_features = 3;
  options.out_features = 2;
  std::unique_ptr<Linear> model = *Linear::Create(options, gen);
  std::unique_ptr<Linear> reference = *Linear::Create(options);
  ASSERT_TRUE(reference->LoadStateDict(model->StateDict()).ok());
  const Tensor x = *Tensor::FromVector<float>({1, 2, 3, -1, 0.5, 2}, {2, 3});
  const Tensor labels = *Tensor::FromVector<int64_t>({1, 0});

  absl::StatusOr<ScalerRun> run = GradScalerExample(model.get(), x, labels, /*steps=*/2, /*poison_step=*/1);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->stepped, (std::vector<bool>{true, false}));
  EXPECT_EQ(run->scales, (std::vector<float>{65536.0f, 32768.0f}));  // backoff 0.5 after the Inf

  // The one step taken used the true gradients: as plain SGD on `reference`.
  std::unique_ptr<Sgd> sgd = *Sgd::Create(reference->NamedParameters(), SgdOptions{0.5});
  CrossEntropyResult loss = *CrossEntropy(*reference->Forward(x), labels);
  ASSERT_TRUE(reference->Backward(loss.grad_logits).ok());
  ASSERT_TRUE(sgd->Step().ok());
  const std::vector<float> want = Values(reference->weight().value), got = Values(model->weight().value);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

// amp/precision_policy.h
struct PrecisionOut {
  PrecisionPolicy policy;
  GradScalerOptions scaling;
};

absl::StatusOr<PrecisionOut> PrecisionPolicyExample(absl::string_view flag) {
  LOCKSTEP_ASSIGN_OR_RETURN(PrecisionPolicy policy, ParsePrecision(flag));  // "bf16"
  GradScalerOptions scaling;
  scaling.enabled = NeedsLossScaling(policy);  // f16 only
  std::printf("precision %s\n", PrecisionName(policy).c_str());  // "bf16"
  return PrecisionOut{policy, scaling};
}

TEST(AmpExamplesTest, PrecisionPolicyFromAFlag) {
  absl::StatusOr<PrecisionOut> bf16 = PrecisionPolicyExample("bf16");
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->policy.compute_dtype, DType::kBF16);
  EXPECT_EQ(bf16->policy.master_dtype, DType::kF32);
  EXPECT_FALSE(bf16->scaling.enabled);
  EXPECT_EQ(PrecisionName(bf16->policy), "bf16");

  absl::StatusOr<PrecisionOut> f16 = PrecisionPolicyExample("fp16");
  ASSERT_TRUE(f16.ok()) << f16.status();
  EXPECT_EQ(f16->policy.compute_dtype, DType::kF16);
  EXPECT_TRUE(f16->scaling.enabled);

  EXPECT_FALSE(PrecisionPolicyExample("int8").ok());
}

}  // namespace
}  // namespace lockstep
