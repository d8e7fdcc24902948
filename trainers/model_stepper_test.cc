#include "trainers/model_stepper.h"

#include <memory>
#include <vector>

#include "core/mt19937.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"
#include "trainers/train_loop.h"

namespace lockstep {
namespace {

std::unique_ptr<Sequential> Model() {
  Mt19937 gen(0);
  MlpOptions mlp;
  mlp.sizes = {4, 3, 2};
  return *MakeMlp(mlp, gen);
}

// The header's example: a step through the stepper, handed to the loop.
absl::Status Example(Module* model, const Tensor& input, const Tensor& grad_logits, TrainParts& parts) {
  LocalStepper stepper(*model);  // or DdpStepper (ddp_stepper.h)
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, stepper.Forward(input));
  LOCKSTEP_RETURN_IF_ERROR(stepper.Backward(grad_logits));  // gradients final
  parts.stepper = &stepper;                                 // RunTraining drives it (train_loop.h)
  EXPECT_EQ(&parts.stepper->module(), model);
  parts.stepper = nullptr;  // The stepper ends here.
  return absl::OkStatus();
}

// LocalStepper is the module itself: the same gradients as calling it
// directly.
TEST(ModelStepperTest, LocalStepperIsTheModule) {
  std::unique_ptr<Sequential> model = Model();
  std::unique_ptr<Sequential> direct = Model();
  Tensor input = *Tensor::FromVector<float>({0.5f, -1.0f, 2.0f, 0.25f, 1.0f, 0.0f, -0.5f, 3.0f}, {2, 4});
  Tensor grad = *Tensor::FromVector<float>({0.1f, -0.2f, 0.3f, 0.4f}, {2, 2});
  TrainParts parts;
  ASSERT_TRUE(Example(model.get(), input, grad, parts).ok());
  ASSERT_TRUE(direct->Forward(input).ok());
  ASSERT_TRUE(direct->Backward(grad, /*input_grad=*/false).ok());
  const std::vector<Parameter*> mine = model->Parameters(), theirs = direct->Parameters();
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(*mine[i]->grad.ToVector<float>(), *theirs[i]->grad.ToVector<float>()) << i;
  }
}

// One process has no shards to join and nothing to do after a step.
TEST(ModelStepperTest, LocalStepperHooksDoNothing) {
  std::unique_ptr<Sequential> model = Model();
  LocalStepper stepper(*model);
  stepper.AttachTrace(nullptr);
  EXPECT_TRUE(stepper.BeginShard().ok());
  EXPECT_TRUE(stepper.EndShard().ok());
  EXPECT_TRUE(stepper.AfterStep(0).ok());
}

}  // namespace
}  // namespace lockstep
