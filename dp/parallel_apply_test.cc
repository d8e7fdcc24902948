// DeviceWorkers / ParallelApply: replica i runs on worker i, on the same
// persistent thread every call and concurrently with the others; all
// replicas run even when one fails, and the first failure by replica index
// comes back naming its device.
#include "dp/parallel_apply.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/mt19937.h"
#include "gtest/gtest.h"
#include "nn/mlp.h"

namespace lockstep {
namespace {

const std::vector<Device> kThree = {Device::Cpu(0), Device::Cpu(1), Device::Cpu(2)};

TEST(DeviceWorkers, RejectsEmptyAndDuplicateDevices) {
  EXPECT_EQ(DeviceWorkers::Create({}).status().message(), "DeviceWorkers: the device list is empty");
  EXPECT_EQ(DeviceWorkers::Create({Device::Cpu(0), Device::Cpu(1), Device::Cpu(0)}).status().message(),
            "DeviceWorkers: device cpu:0 is listed twice (positions 0 and 2); list each device once");
}

TEST(DeviceWorkers, PersistentThreadPerDeviceRunningConcurrently) {
  std::unique_ptr<DeviceWorkers> workers = *DeviceWorkers::Create(kThree);
  std::vector<std::thread::id> first(3), second(3);
  // All three tasks must be inside Run at once: each waits for the others
  // (would deadlock if the workers ran them one after another).
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  ASSERT_TRUE(workers
                  ->Run(3,
                        [&](size_t i) {
                          first[i] = std::this_thread::get_id();
                          std::unique_lock<std::mutex> lock(mu);
                          ++arrived;
                          cv.notify_all();
                          cv.wait(lock, [&] { return arrived == 3; });
                          return absl::OkStatus();
                        })
                  .ok());
  ASSERT_TRUE(workers
                  ->Run(2,
                        [&](size_t i) {
                          second[i] = std::this_thread::get_id();
                          return absl::OkStatus();
                        })
                  .ok());
  EXPECT_NE(first[0], first[1]);
  EXPECT_NE(first[1], first[2]);
  EXPECT_NE(first[0], std::this_thread::get_id());
  EXPECT_EQ(second[0], first[0]);
  EXPECT_EQ(second[1], first[1]);
}

TEST(DeviceWorkers, FirstErrorByIndexNamesTheDevice) {
  std::unique_ptr<DeviceWorkers> workers = *DeviceWorkers::Create(kThree);
  std::atomic<int> ran{0};
  absl::Status s = workers->Run(3, [&](size_t i) {
    ++ran;
    if (i == 0) return absl::OkStatus();
    return absl::ResourceExhaustedError(i == 1 ? "out of memory" : "other");
  });
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "replica 1 on device cpu:1: out of memory");
  EXPECT_FALSE(workers->Run(4, [](size_t) { return absl::OkStatus(); }).ok());
}

TEST(ParallelApply, ForwardAndBackwardMatchSerialCalls) {
  Mt19937 gen(3);
  MlpOptions o;
  o.sizes = {8, 16, 4};
  o.flatten = false;
  std::unique_ptr<Sequential> model = *MakeMlp(o, gen);
  std::vector<std::unique_ptr<Module>> replicas;
  std::vector<Module*> pointers;
  std::vector<Tensor> inputs, grads;
  for (int i = 0; i < 2; ++i) {
    replicas.push_back(*model->CloneTo(kThree[i]));
    pointers.push_back(replicas.back().get());
    Tensor x = *Tensor::Empty({3 + i, 8}, DType::kF32, kThree[i]);
    Tensor g = *Tensor::Empty({3 + i, 4}, DType::kF32, kThree[i]);
    for (int64_t k = 0; k < x.numel(); ++k) x.data<float>()[k] = static_cast<float>(gen.Next32() % 17) - 8;
    for (int64_t k = 0; k < g.numel(); ++k) g.data<float>()[k] = static_cast<float>(gen.Next32() % 5) - 2;
    inputs.push_back(x);
    grads.push_back(g);
  }
  std::unique_ptr<DeviceWorkers> workers = *DeviceWorkers::Create(kThree);
  std::vector<Tensor> outputs = *ParallelApply(*workers, pointers, inputs);
  std::vector<Tensor> input_grads = *ParallelBackward(*workers, pointers, grads, true);
  ASSERT_EQ(outputs.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(outputs[i].device(), kThree[i]);
    std::unique_ptr<Module> serial = *model->CloneTo(Device::Cpu());
    Tensor x = *inputs[i].To(Device::Cpu());
    Tensor out = *serial->Forward(x);
    Tensor gin = *serial->Backward(*grads[i].To(Device::Cpu()));
    EXPECT_EQ(*outputs[i].ToVector<float>(), *out.ToVector<float>());
    EXPECT_EQ(*input_grads[i].ToVector<float>(), *gin.ToVector<float>());
    for (size_t k = 0; k < serial->Parameters().size(); ++k) {
      EXPECT_EQ(*replicas[i]->Parameters()[k]->grad.ToVector<float>(),
                *serial->Parameters()[k]->grad.ToVector<float>());
    }
  }
  EXPECT_FALSE(ParallelApply(*workers, pointers, {inputs[0]}).ok());
}

}  // namespace
}  // namespace lockstep
