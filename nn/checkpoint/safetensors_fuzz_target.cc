// libFuzzer entry point for the safetensors parser. With clang (one line):
//   clang++ -std=c++17 -fsanitize=fuzzer,address -I. nn/checkpoint/safetensors_fuzz_target.cc
//     nn/checkpoint/safetensors.cc core/atomic_file.cc core/tensor.cc core/storage.cc core/dtype.cc
//     core/device.cc core/cuda/cuda_runtime_none.cc -labsl_status -labsl_statusor -labsl_strings
//     -labsl_str_format_internal -labsl_int128 -o /tmp/safetensors_fuzz
//   /tmp/safetensors_fuzz -max_total_time=60
// Under gcc, safetensors_fuzz_test drives it with seeded mutations in CI.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/tensor.h"
#include "nn/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<lockstep::SafetensorsFile> parsed = lockstep::ParseSafetensors(bytes, "fuzz");
  if (!parsed.ok()) return 0;
  // A successful parse implies a well-formed prefix...
  if (size < 8) __builtin_trap();
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | data[i];
  if (header > size - 8) __builtin_trap();
  const absl::string_view section = bytes.substr(8 + header);
  // ...and tensors whose byte counts match their shapes and which, in the
  // returned order, are exactly the data section.
  size_t offset = 0;
  for (const auto& [name, tensor] : parsed->tensors) {
    absl::StatusOr<int64_t> numel = lockstep::ShapeNumel(tensor.shape());
    if (!numel.ok() || *numel != tensor.numel()) __builtin_trap();
    if (tensor.nbytes() != static_cast<size_t>(*numel) * lockstep::DTypeSize(tensor.dtype())) __builtin_trap();
    if (!tensor.device().is_cpu() || tensor.nbytes() > section.size() - offset) __builtin_trap();
    if (tensor.nbytes() > 0 && std::memcmp(tensor.raw_data(), section.data() + offset, tensor.nbytes()) != 0) {
      __builtin_trap();
    }
    offset += tensor.nbytes();
  }
  if (offset != section.size()) __builtin_trap();
  // What was read can be written (unless the names are ones the writer
  // refuses) and reads back the same.
  for (const auto& [name, tensor] : parsed->tensors) {
    if (name.empty() || name.compare(0, 2, "__") == 0) return 0;
  }
  absl::StatusOr<std::string> again = lockstep::SerializeSafetensors(parsed->tensors, parsed->metadata);
  if (!again.ok()) __builtin_trap();
  absl::StatusOr<lockstep::SafetensorsFile> reparsed = lockstep::ParseSafetensors(*again, "fuzz reparse");
  if (!reparsed.ok() || reparsed->metadata != parsed->metadata || reparsed->tensors.size() != parsed->tensors.size()) {
    __builtin_trap();
  }
  for (size_t i = 0; i < parsed->tensors.size(); ++i) {
    const lockstep::Tensor& a = parsed->tensors[i].second;
    const lockstep::Tensor& b = reparsed->tensors[i].second;
    if (parsed->tensors[i].first != reparsed->tensors[i].first || a.dtype() != b.dtype() || a.shape() != b.shape() ||
        (a.nbytes() > 0 && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) != 0)) {
      __builtin_trap();
    }
  }
  return 0;
}
