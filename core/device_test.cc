#include "core/device.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(DeviceTest, ParsesValidDevices) {
  EXPECT_EQ(*Device::Parse("cpu"), Device::Cpu());
  EXPECT_EQ(*Device::Parse("cpu:3"), Device::Cpu(3));
  EXPECT_EQ(*Device::Parse("cuda"), Device::Cuda(0));
  EXPECT_EQ(*Device::Parse("cuda:7"), Device::Cuda(7));
  EXPECT_EQ(*Device::Parse("cuda:65535"), Device::Cuda(65535));
  EXPECT_EQ(Device::Cuda(2).ToString(), "cuda:2");
  EXPECT_EQ(Device().ToString(), "cpu:0");
  EXPECT_NE(Device::Cpu(1), Device::Cpu(0));
  EXPECT_NE(Device::Cuda(0), Device::Cpu(0));
  for (const char* text : {"cpu:0", "cpu:12", "cuda:0", "cuda:31"}) {
    EXPECT_EQ(Device::Parse(text)->ToString(), text);
  }
}

TEST(DeviceTest, RejectsAnythingElseWithAClearError) {
  for (const char* text : {"", "gpu", "gpu:0", "CUDA:0", "cuda:", "cuda:-1", "cuda:1x", "cpu:+1", "cuda:65536",
                           "cuda:99999999999999999999", " cpu", "cpu:0:1", "cuda 0"}) {
    const absl::StatusOr<Device> d = Device::Parse(text);
    ASSERT_FALSE(d.ok()) << "'" << text << "' parsed as " << d->ToString();
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    // Names the input and the accepted forms.
    EXPECT_NE(d.status().message().find(std::string("'") + text + "'"), absl::string_view::npos) << d.status();
    EXPECT_NE(d.status().message().find("'cuda:N'"), absl::string_view::npos) << d.status();
  }
}

}  // namespace
}  // namespace lockstep
