#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

constexpr int kMaxDims = 16;

absl::Status Corrupt(absl::string_view name, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("IDX file '", name, "': ", what));
}

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

bool ValidType(uint8_t code) {
  switch (static_cast<IdxType>(code)) {
    case IdxType::kU8:
    case IdxType::kI8:
    case IdxType::kI16:
    case IdxType::kI32:
    case IdxType::kF32:
    case IdxType::kF64:
      return true;
  }
  return false;
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

}  // namespace

absl::string_view IdxTypeName(IdxType type) {
  switch (type) {
    case IdxType::kU8: return "u8";
    case IdxType::kI8: return "i8";
    case IdxType::kI16: return "i16";
    case IdxType::kI32: return "i32";
    case IdxType::kF32: return "f32";
    case IdxType::kF64: return "f64";
  }
  return "invalid";
}

size_t IdxTypeSize(IdxType type) {
  switch (type) {
    case IdxType::kU8:
    case IdxType::kI8: return 1;
    case IdxType::kI16: return 2;
    case IdxType::kI32:
    case IdxType::kF32: return 4;
    case IdxType::kF64: return 8;
  }
  return 0;
}

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

absl::StatusOr<IdxArray> ParseIdx(absl::string_view bytes, absl::string_view name,
                                  int64_t max_bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4) {
    return Corrupt(name, absl::StrCat("truncated header: ", bytes.size(),
                                      " bytes, an IDX header has at least 4"));
  }
  if (p[0] != 0 || p[1] != 0) {
    return Corrupt(name, absl::StrCat("bad magic: the first two bytes must be 0, found ",
                                      int{p[0]}, " and ", int{p[1]},
                                      " (a compressed file not named .gz is read fine; is this an IDX file?)"));
  }
  if (!ValidType(p[2])) {
    return Corrupt(name, absl::StrCat("unknown element type code 0x", absl::Hex(p[2], absl::kZeroPad2),
                                      "; expected 0x08 (u8), 0x09, 0x0B, 0x0C, 0x0D or 0x0E"));
  }
  IdxArray out;
  out.type = static_cast<IdxType>(p[2]);
  const int ndims = p[3];
  if (ndims < 1 || ndims > kMaxDims) {
    return Corrupt(name, absl::StrCat("dimension count ", ndims, " is outside 1..", kMaxDims));
  }
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  if (bytes.size() < header) {
    return Corrupt(name, absl::StrCat("truncated header: ", ndims, " dimensions need ", header,
                                      " header bytes, the file has ", bytes.size()));
  }
  const int64_t element_size = static_cast<int64_t>(IdxTypeSize(out.type));
  int64_t payload = element_size;
  for (int i = 0; i < ndims; ++i) {
    const int64_t d = BigEndian32(p + 4 + 4 * i);
    out.dims.push_back(d);
    // Products stay below 2^62 because each step is checked against max_bytes.
    if (d != 0 && payload > max_bytes / d) {
      return Corrupt(name, absl::StrCat("dimensions [", absl::StrJoin(out.dims, ", "),
                                        "...] of ", IdxTypeName(out.type),
                                        " exceed the limit of ", max_bytes, " bytes"));
    }
    payload *= d;
  }
  const int64_t available = static_cast<int64_t>(bytes.size() - header);
  if (available < payload) {
    return Corrupt(name, absl::StrCat("truncated: the header promises ", payload,
                                      " bytes of data, only ", available, " are present"));
  }
  if (available > payload) {
    return Corrupt(name, absl::StrCat(available - payload, " unexpected bytes after the ",
                                      payload, " bytes of data the header describes"));
  }
  out.data.resize(static_cast<size_t>(payload));
  if (payload > 0) std::memcpy(out.data.data(), p + header, static_cast<size_t>(payload));
  // Big-endian elements to host (little-endian) order.
  if (element_size > 1) {
    for (size_t i = 0; i < out.data.size(); i += element_size) {
      std::reverse(out.data.begin() + i, out.data.begin() + i + element_size);
    }
  }
  return out;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int64_t max_bytes) {
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("IDX file '", path, "': cannot open: ",
                                            errno ? std::strerror(errno) : "out of memory"));
  }
  // Header plus payload plus one byte, so that trailing garbage is seen.
  const int64_t cap = max_bytes + 4 + 4 * kMaxDims + 1;
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    const int n = gzread(file.get(), buffer, sizeof(buffer));
    if (n < 0) {
      int err = 0;
      const char* message = gzerror(file.get(), &err);
      return absl::DataLossError(
          absl::StrCat("IDX file '", path, "': read failed: ", message,
                       err == Z_DATA_ERROR ? " (corrupt gzip stream)" : ""));
    }
    if (n == 0) break;
    if (static_cast<int64_t>(bytes.size()) + n > cap) {
      return absl::DataLossError(absl::StrCat("IDX file '", path, "': more than ", cap,
                                              " bytes (decompressed); refusing to read further"));
    }
    bytes.append(buffer, static_cast<size_t>(n));
  }
  int err = Z_OK;
  const char* message = gzerror(file.get(), &err);
  if (err != Z_OK && err != Z_STREAM_END) {
    return absl::DataLossError(absl::StrCat("IDX file '", path, "': ", message,
                                            " (the gzip stream is truncated or corrupt)"));
  }
  return ParseIdx(bytes, path, max_bytes);
}

}  // namespace lockstep
