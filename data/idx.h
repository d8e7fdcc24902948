// The IDX file format of MNIST and Fashion-MNIST, plain or gzip-compressed.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(IdxArray images,
//       ReadIdxFile("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"));
//   images.dims;   // {60000, 28, 28}
//   images.data;   // 47,040,000 bytes, host byte order
//
// Layout: two zero bytes, a type code, the number of dimensions, each
// dimension as a big-endian uint32, then the elements in big-endian order.
// Everything is validated before the payload is allocated: the magic, the
// type code, 1 to 16 dimensions, the product of the dimensions against a size
// limit, and the payload length against the data actually present (a short
// or over-long file is an error, never a short read). Errors name the file
// and what is wrong.
#ifndef LOCKSTEP_DATA_IDX_H_
#define LOCKSTEP_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

enum class IdxType : uint8_t {
  kU8 = 0x08,
  kI8 = 0x09,
  kI16 = 0x0B,
  kI32 = 0x0C,
  kF32 = 0x0D,
  kF64 = 0x0E,
};

absl::string_view IdxTypeName(IdxType type);
size_t IdxTypeSize(IdxType type);

struct IdxArray {
  IdxType type = IdxType::kU8;
  std::vector<int64_t> dims;
  // The elements in host byte order (converted from big-endian).
  std::vector<uint8_t> data;

  int64_t numel() const;
};

// Largest payload accepted by default (decompressed): 1 GiB.
inline constexpr int64_t kMaxIdxBytes = int64_t{1} << 30;

// Parses an IDX image held in memory. `name` is used in error messages.
absl::StatusOr<IdxArray> ParseIdx(absl::string_view bytes, absl::string_view name, int64_t max_bytes = kMaxIdxBytes);

// Reads and parses a file; gzip files (any name) are decompressed, with the
// decompressed size capped at `max_bytes` plus the header. The data goes
// straight into IdxArray::data (one allocation of the declared size, no
// second copy), so peak memory is what the header declares. A plain file
// shorter or longer than its header says is refused from its size, before
// anything is allocated; a gzip stream that ends early is refused there
// (only the pages it filled were touched).
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int64_t max_bytes = kMaxIdxBytes);

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_IDX_H_
