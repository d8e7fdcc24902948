#include "core/tensor.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

Tensor Iota(int64_t n, Shape shape = {}) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return *Tensor::FromVector<float>(v, shape);
}

TEST(TensorTest, EmptyHasShapeDtypeDeviceAndAlignedMemory) {
  const Tensor t = *Tensor::Empty({2, 3, 5}, DType::kBF16);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.numel(), 30);
  EXPECT_EQ(t.nbytes(), 60u);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.dtype(), DType::kBF16);
  EXPECT_EQ(t.device(), Device::Cpu());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kHostAlignment, 0u);
  EXPECT_EQ(t.DebugString(), "Tensor(bf16[2, 3, 5] on cpu:0)");
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(Tensor().DebugString(), "Tensor(undefined)");
}

TEST(TensorTest, ScalarsAndEmptyTensors) {
  const Tensor scalar = *Tensor::Empty({}, DType::kF64);
  EXPECT_EQ(scalar.numel(), 1);
  const Tensor none = *Tensor::Zeros({0, 4}, DType::kF32);
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.nbytes(), 0u);
  EXPECT_TRUE(none.ToVector<float>()->empty());
}

TEST(TensorTest, BadShapesAreErrors) {
  const absl::StatusOr<Tensor> negative = Tensor::Empty({2, -1}, DType::kF32);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("negative"), absl::string_view::npos);
  EXPECT_FALSE(Tensor::Empty({int64_t{1} << 40, int64_t{1} << 40}, DType::kF32).ok());
  const absl::StatusOr<Tensor> mismatch = Tensor::FromVector<float>({1, 2, 3}, {2, 2});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("4 elements but 3 values"), absl::string_view::npos) << mismatch.status();
}

TEST(TensorTest, ZerosAreZero) {
  const Tensor z = *Tensor::Zeros({3, 7}, DType::kI64, Device::Cpu(2));
  EXPECT_EQ(z.device(), Device::Cpu(2));
  const std::vector<int64_t> values = *z.ToVector<int64_t>();
  EXPECT_EQ(values, std::vector<int64_t>(21, 0));
}

TEST(TensorTest, SliceIsAViewOfRows) {
  Tensor t = Iota(12, {4, 3});
  Tensor rows = *t.Slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_TRUE(rows.SharesStorageWith(t));
  EXPECT_EQ(rows.storage_offset(), 3 * sizeof(float));
  EXPECT_EQ(*rows.ToVector<float>(), (std::vector<float>{3, 4, 5, 6, 7, 8}));
  rows.data<float>()[0] = 100;  // Writes through to the original.
  EXPECT_EQ(t.data<float>()[3], 100);
  EXPECT_EQ(t.Slice(4, 4)->numel(), 0);
  // A slice of a slice.
  EXPECT_EQ(*rows.Slice(1, 2)->ToVector<float>(), (std::vector<float>{6, 7, 8}));
}

TEST(TensorTest, SliceOutOfRangeIsAnError) {
  const Tensor t = Iota(12, {4, 3});
  for (auto [start, end] : std::vector<std::pair<int64_t, int64_t>>{{-1, 2}, {3, 2}, {0, 5}, {5, 5}}) {
    const absl::StatusOr<Tensor> s = t.Slice(start, end);
    ASSERT_FALSE(s.ok()) << start << ", " << end;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_NE(s.status().message().find("<= 4"), absl::string_view::npos) << s.status();
  }
  EXPECT_FALSE(Tensor::Empty({}, DType::kF32)->Slice(0, 1).ok());
  EXPECT_FALSE(Tensor().Slice(0, 0).ok());
}

TEST(TensorTest, FlatIsAViewOfAnElementRange) {
  Tensor t = Iota(12, {4, 3});
  Tensor flat = *t.Flat(5, 4);
  EXPECT_EQ(flat.shape(), (Shape{4}));
  EXPECT_EQ(*flat.ToVector<float>(), (std::vector<float>{5, 6, 7, 8}));
  flat.data<float>()[3] = -1;
  EXPECT_EQ(t.data<float>()[8], -1);
  // A flat view of a slice is offset from the slice, not the storage start.
  Tensor inner = *t.Slice(2, 4)->Flat(1, 2);
  EXPECT_EQ(*inner.ToVector<float>(), (std::vector<float>{7, -1}));
  EXPECT_TRUE(t.Flat(12, 0).ok());
  for (auto [offset, count] : std::vector<std::pair<int64_t, int64_t>>{{-1, 1}, {0, 13}, {12, 1}, {5, -1}, {13, 0}}) {
    const absl::StatusOr<Tensor> f = t.Flat(offset, count);
    ASSERT_FALSE(f.ok()) << offset << ", " << count;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kOutOfRange);
  }
}

TEST(TensorTest, ViewAsReinterpretsBytes) {
  Tensor bytes = *Tensor::Zeros({16}, DType::kU8);
  Tensor floats = *bytes.ViewAs(DType::kF32);
  EXPECT_EQ(floats.numel(), 4);
  EXPECT_TRUE(floats.SharesStorageWith(bytes));
  floats.data<float>()[1] = 1.0f;  // 0x3f800000, little-endian.
  EXPECT_EQ(bytes.data<uint8_t>()[7], 0x3f);
  EXPECT_FALSE(bytes.Flat(0, 6)->ViewAs(DType::kF32).ok());  // 6 bytes.
  EXPECT_FALSE(bytes.Flat(2, 8)->ViewAs(DType::kF32).ok());  // Misaligned.
}

TEST(TensorTest, OverlapDetection) {
  const Tensor t = Iota(10);
  EXPECT_TRUE(t.Flat(0, 5)->Overlaps(*t.Flat(4, 2)));
  EXPECT_FALSE(t.Flat(0, 5)->Overlaps(*t.Flat(5, 5)));
  EXPECT_FALSE(t.Overlaps(Iota(10)));
}

TEST(TensorTest, Reshape) {
  const Tensor t = Iota(12);
  EXPECT_EQ(t.Reshape({3, 4})->shape(), (Shape{3, 4}));
  EXPECT_EQ(t.Reshape({2, -1, 3})->shape(), (Shape{2, 2, 3}));
  EXPECT_TRUE(t.Reshape({3, 4})->SharesStorageWith(t));
  EXPECT_FALSE(t.Reshape({5, 3}).ok());
  EXPECT_FALSE(t.Reshape({-1, -1}).ok());
  EXPECT_FALSE(t.Reshape({5, -1}).ok());
  EXPECT_FALSE(t.Reshape({-2, 6}).ok());
}

TEST(TensorTest, CopyFromCopiesDataAcrossShapesAndDevices) {
  const Tensor src = Iota(6, {2, 3});
  Tensor dst = *Tensor::Empty({6}, DType::kF32, Device::Cpu(1));
  ASSERT_TRUE(dst.CopyFrom(src).ok());
  EXPECT_EQ(*dst.ToVector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_FALSE(dst.SharesStorageWith(src));
  // Into a view.
  Tensor big = *Tensor::Zeros({10}, DType::kF32);
  Tensor window = *big.Flat(2, 6);
  ASSERT_TRUE(window.CopyFrom(src).ok());
  EXPECT_EQ(*big.ToVector<float>(), (std::vector<float>{0, 0, 0, 1, 2, 3, 4, 5, 0, 0}));
  const Tensor clone = *src.Clone();
  EXPECT_FALSE(clone.SharesStorageWith(src));
  EXPECT_EQ(*clone.ToVector<float>(), *src.ToVector<float>());
  EXPECT_EQ((*src.To(Device::Cpu(3))).device(), Device::Cpu(3));
}

TEST(TensorTest, CopyBetweenDifferentSizesOrDtypesIsAnErrorAndChangesNothing) {
  Tensor dst = *Tensor::Zeros({4}, DType::kF32);
  const absl::Status size = dst.CopyFrom(Iota(5));
  EXPECT_EQ(size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(size.message().find("5 elements"), absl::string_view::npos) << size;
  EXPECT_NE(size.message().find("has 4"), absl::string_view::npos) << size;
  const absl::Status dtype = dst.CopyFrom(*Tensor::Zeros({4}, DType::kF16));
  EXPECT_NE(dtype.message().find("dtype"), absl::string_view::npos) << dtype;
  EXPECT_EQ(*dst.ToVector<float>(), std::vector<float>(4, 0.0f));
  Tensor t = Iota(8);
  Tensor a = *t.Flat(0, 4);
  EXPECT_FALSE(a.CopyFrom(*t.Flat(2, 4)).ok());  // Partial overlap.
  EXPECT_FALSE(Tensor().CopyFrom(t).ok());
}

TEST(TensorTest, ToVectorChecksTheDtype) {
  const absl::StatusOr<std::vector<double>> wrong = Iota(3).ToVector<double>();
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("f64 elements of a f32 tensor"), absl::string_view::npos);
}

TEST(TensorDeathTest, TypedAccessWithTheWrongTypeAborts) {
  const Tensor t = Iota(3);
  EXPECT_DEATH(t.data<int32_t>(), "data<i32>\\(\\) called on Tensor\\(f32\\[3\\]");
}

TEST(TensorTest, PinnedRequestFallsBackWithoutAGpu) {
  const Tensor t = *Tensor::Empty({1024}, DType::kF32, Device::Cpu(), /*pinned=*/true);
  EXPECT_EQ(t.is_pinned(), cuda::DeviceCount() > 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kHostAlignment, 0u);
}

// Memory another library owns: a view of it shares the bytes (no copy), and
// the owner is released when the last view goes, never by the Storage.
TEST(TensorTest, FromWrappedStorageSharesForeignMemoryAndReleasesItsOwner) {
  bool released = false;
  auto* foreign = new std::vector<float>{1, 2, 3, 4, 5, 6};
  std::shared_ptr<const void> owner(foreign, [&released](const void* p) {
    released = true;
    delete static_cast<const std::vector<float>*>(p);
  });
  absl::StatusOr<std::shared_ptr<Storage>> storage =
      Storage::Wrap(foreign->data(), foreign->size() * sizeof(float), Device::Cpu(), std::move(owner));
  ASSERT_TRUE(storage.ok()) << storage.status();
  EXPECT_TRUE((*storage)->wrapped());
  EXPECT_FALSE((*storage)->pinned());
  absl::StatusOr<Tensor> t = Tensor::FromStorage(*storage, 2 * sizeof(float), {2, 2}, DType::kF32);
  storage->reset();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->data<float>(), foreign->data() + 2);
  EXPECT_EQ(*t->ToVector<float>(), (std::vector<float>{3, 4, 5, 6}));
  t->data<float>()[0] = 30;  // Writes the foreign memory.
  EXPECT_EQ((*foreign)[2], 30);
  absl::StatusOr<Tensor> view = t->Flat(1, 2);
  ASSERT_TRUE(view.ok());
  *t = Tensor();
  EXPECT_FALSE(released);  // `view` still holds it.
  *view = Tensor();
  EXPECT_TRUE(released);
}

TEST(TensorTest, FromStorageRefusesWhatDoesNotFitOrIsMisaligned) {
  absl::StatusOr<std::shared_ptr<Storage>> s = Storage::Allocate(64, Device::Cpu());
  ASSERT_TRUE(s.ok());
  absl::StatusOr<Tensor> too_big = Tensor::FromStorage(*s, 8, {15}, DType::kF32);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("does not fit a storage of 64 bytes"), std::string::npos)
      << too_big.status();
  absl::StatusOr<Tensor> misaligned = Tensor::FromStorage(*s, 2, {2}, DType::kF32);
  EXPECT_EQ(misaligned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(misaligned.status().message().find("not aligned"), std::string::npos) << misaligned.status();
  EXPECT_TRUE(Tensor::FromStorage(*s, 60, {1}, DType::kF32).ok());
  EXPECT_TRUE(Tensor::FromStorage(*s, 64, {0}, DType::kF32).ok());
  EXPECT_FALSE(Tensor::FromStorage(nullptr, 0, {0}, DType::kF32).ok());
  EXPECT_FALSE(Storage::Wrap(nullptr, 8, Device::Cpu(), std::make_shared<int>(0)).ok());
  EXPECT_FALSE(Storage::Wrap(s->get()->data(), 8, Device::Cpu(), nullptr).ok());
}

}  // namespace
}  // namespace lockstep
