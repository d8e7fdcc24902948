#include "core/device.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

constexpr int kMaxDeviceIndex = 65535;

absl::Status ParseError(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("Device::Parse: '", text, "' is not a device (", why,
                   "); expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N' with N a device index from 0 to ", kMaxDeviceIndex));
}

}  // namespace

absl::StatusOr<Device> Device::Parse(absl::string_view text) {
  absl::string_view type_text = text;
  absl::string_view index_text;
  const size_t colon = text.find(':');
  if (colon != absl::string_view::npos) {
    type_text = text.substr(0, colon);
    index_text = text.substr(colon + 1);
  }
  DeviceType type;
  if (type_text == "cpu") {
    type = DeviceType::kCpu;
  } else if (type_text == "cuda") {
    type = DeviceType::kCuda;
  } else {
    return ParseError(text, absl::StrCat("unknown device type '", type_text, "'"));
  }
  if (colon == absl::string_view::npos) return Device(type, 0);
  if (index_text.empty()) return ParseError(text, "missing index after ':'");
  for (char c : index_text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      return ParseError(text, absl::StrCat("index '", index_text, "' is not a non-negative integer"));
    }
  }
  int index = 0;
  if (index_text.size() > 5 || !absl::SimpleAtoi(index_text, &index) || index > kMaxDeviceIndex) {
    return ParseError(text, absl::StrCat("index '", index_text, "' is too large"));
  }
  return Device(type, index);
}

std::string Device::ToString() const { return absl::StrCat(is_cpu() ? "cpu:" : "cuda:", index_); }

}  // namespace lockstep
