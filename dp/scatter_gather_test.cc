// Scatter/Gather: torch.chunk's sizes (fewer chunks than devices for small
// inputs, an uneven last chunk), values and devices of every chunk, dim 1,
// views without copies where possible, and Gather/ScatterSizes as each
// other's backward.
#include "dp/scatter_gather.h"

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

const std::vector<Device> kThree = {Device::Cpu(0), Device::Cpu(1), Device::Cpu(2)};

Tensor Iota(Shape shape) {
  Tensor t = *Tensor::Empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

TEST(ChunkSizes, FollowsTorchChunk) {
  // torch.arange(n).chunk(k) sizes.
  EXPECT_EQ(*ChunkSizes(6, 3), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(*ChunkSizes(7, 3), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(*ChunkSizes(5, 4), (std::vector<int64_t>{2, 2, 1}));  // 3 chunks for 4 devices
  EXPECT_EQ(*ChunkSizes(2, 3), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(*ChunkSizes(1, 2), (std::vector<int64_t>{1}));
  EXPECT_EQ(*ChunkSizes(128, 2), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(*ChunkSizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_FALSE(ChunkSizes(0, 2).ok());
  EXPECT_FALSE(ChunkSizes(3, 0).ok());
}

TEST(Scatter, UnevenChunksOnTheirDevices) {
  Tensor x = Iota({7, 2});
  std::vector<Tensor> chunks = *Scatter(x, kThree);
  ASSERT_EQ(chunks.size(), 3u);
  const int64_t rows[] = {3, 3, 1};
  int64_t start = 0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(chunks[i].shape(), (Shape{rows[i], 2}));
    EXPECT_EQ(chunks[i].device(), kThree[i]);
    std::vector<float> v = *chunks[i].ToVector<float>();
    for (int64_t j = 0; j < rows[i] * 2; ++j) EXPECT_EQ(v[j], static_cast<float>(start * 2 + j));
    start += rows[i];
  }
  // The chunk on the input's own device is a view; the others are copies.
  EXPECT_TRUE(chunks[0].SharesStorageWith(x));
  EXPECT_FALSE(chunks[1].SharesStorageWith(x));
}

TEST(Scatter, FewerRowsThanDevicesUsesTheFirstDevices) {
  std::vector<Tensor> chunks = *Scatter(Iota({2, 3}), kThree);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[1].device(), Device::Cpu(1));
  EXPECT_EQ(*chunks[1].ToVector<float>(), (std::vector<float>{3, 4, 5}));
}

TEST(Scatter, AlongDimOne) {
  Tensor x = Iota({2, 5});  // rows 0..4, 5..9
  std::vector<Tensor> chunks = *Scatter(x, {Device::Cpu(0), Device::Cpu(1)}, /*dim=*/1);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(*chunks[0].ToVector<float>(), (std::vector<float>{0, 1, 2, 5, 6, 7}));
  EXPECT_EQ(*chunks[1].ToVector<float>(), (std::vector<float>{3, 4, 8, 9}));
  Tensor back = *Gather(chunks, Device::Cpu(0), 1);
  EXPECT_EQ(back.shape(), x.shape());
  EXPECT_EQ(*back.ToVector<float>(), *x.ToVector<float>());
}

TEST(Scatter, Errors) {
  EXPECT_EQ(Scatter(Iota({4}), {}).status().message(), "Scatter: the device list is empty");
  EXPECT_FALSE(Scatter(Tensor(), kThree).ok());
  EXPECT_FALSE(Scatter(*Tensor::Zeros({}, DType::kF32), kThree).ok());
  EXPECT_FALSE(Scatter(Iota({4}), kThree, 1).ok());
  EXPECT_FALSE(Scatter(*Tensor::Zeros({0, 3}, DType::kF32), kThree).ok());
  EXPECT_FALSE(ScatterSizes(Iota({4}), {1, 2}, {Device::Cpu(0), Device::Cpu(1)}).ok());  // 3 != 4
  EXPECT_FALSE(ScatterSizes(Iota({4}), {4}, {Device::Cpu(0), Device::Cpu(1)}).ok());
}

TEST(Gather, ConcatenatesOnTheTargetDevice) {
  Tensor x = Iota({5, 3});
  std::vector<Tensor> chunks = *Scatter(x, kThree);
  Tensor whole = *Gather(chunks, Device::Cpu(2));
  EXPECT_EQ(whole.device(), Device::Cpu(2));
  EXPECT_EQ(whole.shape(), (Shape{5, 3}));
  EXPECT_EQ(*whole.ToVector<float>(), *x.ToVector<float>());
}

TEST(Gather, BackwardIsScatterWithItsInputSizes) {
  // Gather of [3, 2] + [1, 2]; its output gradient splits back 3 / 1.
  std::vector<Tensor> chunks = {Iota({3, 2}), *Iota({1, 2}).To(Device::Cpu(1))};
  Tensor grad = Iota({4, 2});
  std::vector<Tensor> grads = *ScatterSizes(grad, {3, 1}, {Device::Cpu(0), Device::Cpu(1)});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_EQ(grads[0].shape(), chunks[0].shape());
  EXPECT_EQ(grads[1].shape(), chunks[1].shape());
  EXPECT_EQ(grads[1].device(), Device::Cpu(1));
  EXPECT_EQ(*grads[1].ToVector<float>(), (std::vector<float>{6, 7}));
}

TEST(Gather, Errors) {
  EXPECT_FALSE(Gather({}, Device::Cpu()).ok());
  absl::Status s = Gather({Iota({2, 3}), Iota({2, 4})}, Device::Cpu()).status();
  EXPECT_EQ(s.message(),
            "Gather: tensor 1 is Tensor(f32[2, 4] on cpu:0); every tensor must be f32 with shape [2, 3] "
            "except along dim 0");
  EXPECT_FALSE(Gather({Iota({2, 3}), *Tensor::Zeros({2, 3}, DType::kF64)}, Device::Cpu()).ok());
}

}  // namespace
}  // namespace lockstep
