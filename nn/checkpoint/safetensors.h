// The Hugging Face safetensors checkpoint format: read, write, validate.
//
//   std::vector<std::pair<std::string, Tensor>> tensors = {{"fc1.weight", w}, {"fc1.bias", b}};
//   LOCKSTEP_RETURN_IF_ERROR(WriteSafetensorsFile("/ckpt/model.safetensors", tensors,
//                                                 {{"step", "1200"}}));
//   LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file,
//                             ReadSafetensorsFile("/ckpt/model.safetensors"));
//   file.tensors[0].first;     // "fc1.weight"
//   file.metadata["step"];     // "1200"
//
// The files load in PyTorch with `safetensors.torch.load_file`, or without
// the safetensors package with nn/testdata/read_safetensors.py.
//
// Layout: an 8-byte little-endian u64 N, N bytes of UTF-8 JSON (the header),
// then the data section. The header maps each tensor name to
//   {"dtype":"F32","shape":[2,3],"data_offsets":[begin,end]}
// (byte offsets into the data section) and may hold "__metadata__", an object
// of string -> string. Data is raw little-endian, row-major. Supported dtypes:
// F32, F64, F16, BF16, I32, I64, U8 (lockstep's DTypes); others are refused.
//
// Writing follows the official writer byte for byte: compact JSON with
// "__metadata__" first (when there is metadata) and then the tensors in the
// given order, the header padded with spaces to a multiple of 8 bytes, the
// data of each tensor contiguous in the same order.
//
// Reading is strict and validates everything before allocating anything
// sized by the file: the header length (at most 100 MB and within the file),
// the JSON (a small parser for exactly this schema: no floats, negatives,
// duplicate keys, unknown fields, extra nesting or trailing bytes), the
// dtypes, shapes (at most kMaxSafetensorsRank dims, no overflow), and that
// each tensor's byte range matches its dtype and shape and that the ranges
// tile the data section exactly, without overlaps or holes (the official
// library's rule). Errors name the source, the tensor, what was expected and
// what came.
#ifndef LOCKSTEP_NN_CHECKPOINT_SAFETENSORS_H_
#define LOCKSTEP_NN_CHECKPOINT_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/atomic_file.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace lockstep {

// The official library's limit on the header length.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;
// Tensors with more dimensions are refused (the format has no limit; this
// bounds what a hostile header can make the reader allocate).
inline constexpr size_t kMaxSafetensorsRank = 64;

struct SafetensorsFile {
  // CPU tensors owning their data, in file order (ascending data offset;
  // zero-byte tensors at the same offset keep their header order).
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};

// "F32" for DType::kF32, etc.
absl::string_view SafetensorsDTypeName(DType dtype);
// The inverse; an error for names lockstep does not support ("BOOL", "F8_E4M3", ...).
absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name);

// The bytes of a safetensors file holding `tensors` (in this order; CUDA
// tensors are copied to the host) and `metadata`. Refuses undefined tensors,
// empty, duplicate or "__"-prefixed names, and strings that are not UTF-8.
absl::StatusOr<std::string> SerializeSafetensors(absl::Span<const std::pair<std::string, Tensor>> tensors,
                                                 const std::map<std::string, std::string>& metadata = {});

// Parses a whole file held in memory. `source_name` (usually the path) is
// used in error messages.
absl::StatusOr<SafetensorsFile> ParseSafetensors(absl::string_view bytes, absl::string_view source_name);

// SerializeSafetensors, then WriteFileAtomically.
absl::Status WriteSafetensorsFile(const std::string& path, absl::Span<const std::pair<std::string, Tensor>> tensors,
                                  const std::map<std::string, std::string>& metadata = {},
                                  const AtomicWriteOptions& options = {});

struct SafetensorsReadOptions {
  // false: refuse `path` if it is a symbolic link (O_NOFOLLOW), for files
  // found by listing a directory (trainers/checkpoint_restore.cc). On by
  // default because Bazel runfiles and the Hugging Face cache are symlinks.
  bool follow_symlinks = true;
};

// Reads and validates `path`. Only a regular file is read: it is opened
// with O_NONBLOCK and checked with fstat first, so a FIFO, a directory or a
// device is an error at once (opening a FIFO would otherwise wait for a
// writer). The header is checked against the file size before the data is
// read, so a short file is reported as truncated without reading it, and
// memory use is the tensors' size (read straight into them).
absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path,
                                                    const SafetensorsReadOptions& options = {});

// The metadata alone: the file opened and its header read and validated as
// by ReadSafetensorsFile (against the file's size, so a truncated file is
// an error), the data not read. Whether a file would load, for the price of
// its header.
absl::StatusOr<std::map<std::string, std::string>> ReadSafetensorsMetadata(const std::string& path,
                                                                           const SafetensorsReadOptions& options = {});

}  // namespace lockstep

#endif  // LOCKSTEP_NN_CHECKPOINT_SAFETENSORS_H_
