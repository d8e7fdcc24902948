// Where a tensor lives: the host (`cpu`, `cpu:N`) or a CUDA device (`cuda:N`).
//
//   Device d = Device::Cuda(1);
//   d.ToString();                                  // "cuda:1"
//   absl::StatusOr<Device> p = Device::Parse("cpu");  // Device::Cpu()
//   Device::Parse("gpu:0");  // InvalidArgument naming the accepted forms
//
// `cpu:N` exists so that the DataParallel reference trainer can place replicas
// on several logical CPU devices; all CPU devices share host memory.
#ifndef LOCKSTEP_CORE_DEVICE_H_
#define LOCKSTEP_CORE_DEVICE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

enum class DeviceType { kCpu, kCuda };

class Device {
 public:
  // The default device is cpu:0.
  constexpr Device() = default;

  static constexpr Device Cpu(int index = 0) { return Device(DeviceType::kCpu, index); }
  static constexpr Device Cuda(int index = 0) { return Device(DeviceType::kCuda, index); }

  // Parses "cpu", "cpu:N", "cuda" (= cuda:0) and "cuda:N" with 0 <= N < 65536.
  static absl::StatusOr<Device> Parse(absl::string_view text);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::kCpu; }
  bool is_cuda() const { return type_ == DeviceType::kCuda; }

  // "cpu:0", "cuda:3".
  std::string ToString() const;

  friend bool operator==(Device a, Device b) { return a.type_ == b.type_ && a.index_ == b.index_; }
  friend bool operator!=(Device a, Device b) { return !(a == b); }

 private:
  constexpr Device(DeviceType type, int index) : type_(type), index_(index) {}

  DeviceType type_ = DeviceType::kCpu;
  int index_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_DEVICE_H_
