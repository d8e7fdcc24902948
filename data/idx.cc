#include "data/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/fd.h"
#include "core/status.h"

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
    case IdxType::kU8:
      return "u8";
    case IdxType::kI8:
      return "i8";
    case IdxType::kI16:
      return "i16";
    case IdxType::kI32:
      return "i32";
    case IdxType::kF32:
      return "f32";
    case IdxType::kF64:
      return "f64";
  }
  return "invalid";
}

size_t IdxTypeSize(IdxType type) {
  switch (type) {
    case IdxType::kU8:
    case IdxType::kI8:
      return 1;
    case IdxType::kI16:
      return 2;
    case IdxType::kI32:
    case IdxType::kF32:
      return 4;
    case IdxType::kF64:
      return 8;
  }
  return 0;
}

int64_t IdxArray::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace {

// What the header promises: validated before any payload is read.
struct IdxHeaderInfo {
  IdxType type = IdxType::kU8;
  std::vector<int64_t> dims;
  size_t header_bytes = 0;
  int64_t payload_bytes = 0;
};

std::string DimsText(const IdxHeaderInfo& h) {
  return absl::StrCat("[", absl::StrJoin(h.dims, ", "), "] of ", IdxTypeName(h.type));
}

// Parses the header at the start of `bytes` (which may hold more, or only the
// header).
absl::StatusOr<IdxHeaderInfo> ParseHeader(absl::string_view bytes, absl::string_view name, int64_t max_bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 4) {
    return Corrupt(name, absl::StrCat("truncated header: ", bytes.size(), " bytes, an IDX header has at least 4"));
  }
  if (p[0] != 0 || p[1] != 0) {
    return Corrupt(name, absl::StrCat("bad magic: the first two bytes must be 0, found ", int{p[0]}, " and ", int{p[1]},
                                      " (a compressed file not named .gz is read fine; is this an IDX file?)"));
  }
  if (!ValidType(p[2])) {
    return Corrupt(name, absl::StrCat("unknown element type code 0x", absl::Hex(p[2], absl::kZeroPad2),
                                      "; expected 0x08 (u8), 0x09, 0x0B, 0x0C, 0x0D or 0x0E"));
  }
  IdxHeaderInfo h;
  h.type = static_cast<IdxType>(p[2]);
  const int ndims = p[3];
  if (ndims < 1 || ndims > kMaxDims) {
    return Corrupt(name, absl::StrCat("dimension count ", ndims, " is outside 1..", kMaxDims));
  }
  h.header_bytes = 4 + 4 * static_cast<size_t>(ndims);
  if (bytes.size() < h.header_bytes) {
    return Corrupt(name, absl::StrCat("truncated header: ", ndims, " dimensions need ", h.header_bytes,
                                      " header bytes, the file has ", bytes.size()));
  }
  for (int i = 0; i < ndims; ++i) h.dims.push_back(BigEndian32(p + 4 + 4 * i));
  int64_t payload = static_cast<int64_t>(IdxTypeSize(h.type));
  bool too_large = false;
  for (int64_t d : h.dims) {
    // Products stay below 2^62 because each step is checked against max_bytes.
    if (d != 0 && payload > max_bytes / d) too_large = true;
    if (too_large) break;
    payload *= d;
  }
  // A zero dimension makes the payload empty whatever the others say.
  if (too_large && std::find(h.dims.begin(), h.dims.end(), 0) == h.dims.end()) {
    return Corrupt(name, absl::StrCat("dimensions ", DimsText(h), " exceed the limit of ", max_bytes,
                                      " bytes; raise max_bytes if the file is genuine"));
  }
  h.payload_bytes = too_large ? 0 : payload;
  return h;
}

absl::Status TruncatedPayload(absl::string_view name, const IdxHeaderInfo& h, int64_t available) {
  return Corrupt(name, absl::StrCat("truncated: the header promises ", h.payload_bytes, " bytes of data, only ",
                                    available, " are present (dimensions ", DimsText(h),
                                    "); the file is incomplete: download or decompress it again"));
}

// Big-endian elements to host (little-endian) order, in place.
void ToHostOrder(IdxArray& a) {
  const size_t element_size = IdxTypeSize(a.type);
  if (element_size == 1) return;
  for (size_t i = 0; i < a.data.size(); i += element_size) {
    std::reverse(a.data.begin() + i, a.data.begin() + i + element_size);
  }
}

}  // namespace

absl::StatusOr<IdxArray> ParseIdx(absl::string_view bytes, absl::string_view name, int64_t max_bytes) {
  absl::StatusOr<IdxHeaderInfo> h = ParseHeader(bytes, name, max_bytes);
  if (!h.ok()) return h.status();
  const int64_t payload = h->payload_bytes;
  const int64_t available = static_cast<int64_t>(bytes.size() - h->header_bytes);
  if (available < payload) return TruncatedPayload(name, *h, available);
  if (available > payload) {
    return Corrupt(name, absl::StrCat(available - payload, " unexpected bytes after the ", payload,
                                      " bytes of data the header describes"));
  }
  IdxArray out;
  out.type = h->type;
  out.dims = std::move(h->dims);
  out.data.resize(static_cast<size_t>(payload));
  if (payload > 0) std::memcpy(out.data.data(), bytes.data() + h->header_bytes, static_cast<size_t>(payload));
  ToHostOrder(out);
  return out;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int64_t max_bytes) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::NotFoundError(absl::StrCat("IDX file '", path, "': cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  // The file's size bounds an uncompressed payload before it is allocated
  // (-1: not a regular file, or not known).
  const int64_t file_size = ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
  std::unique_ptr<gzFile_s, GzCloser> file(gzdopen(fd.get(), "rb"));
  if (file == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("IDX file '", path, "': cannot open: out of memory"));
  }
  fd.Release();  // gzclose closes it now.
  // Decompresses (or, for a plain file, copies) into `out` until it holds
  // `size` bytes or the stream ends: nothing past what the header allows is
  // ever inflated. Returns the bytes read.
  auto read_into = [&](char* out, size_t size) -> absl::StatusOr<size_t> {
    size_t done = 0;
    while (done < size) {
      const int n = gzread(file.get(), out + done, static_cast<unsigned>(std::min<size_t>(size - done, 1 << 30)));
      if (n < 0) {
        int err = 0;
        const char* message = gzerror(file.get(), &err);
        return absl::DataLossError(absl::StrCat("IDX file '", path, "': read failed: ", message,
                                                err == Z_DATA_ERROR ? " (corrupt gzip stream)" : ""));
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  };
  auto stream_error = [&]() -> absl::Status {
    int err = Z_OK;
    const char* message = gzerror(file.get(), &err);
    if (err != Z_OK && err != Z_STREAM_END) {
      return absl::DataLossError(
          absl::StrCat("IDX file '", path, "': ", message, " (the gzip stream is truncated or corrupt)"));
    }
    return absl::OkStatus();
  };

  // The header first: it bounds everything read after it.
  char header[4 + 4 * kMaxDims];
  absl::StatusOr<size_t> got = read_into(header, 4);
  if (got.ok() && *got == 4) {
    const size_t dims_bytes = 4 * std::min<size_t>(static_cast<unsigned char>(header[3]), kMaxDims);
    absl::StatusOr<size_t> more = read_into(header + 4, dims_bytes);
    got = more.ok() ? absl::StatusOr<size_t>(4 + *more) : more;
  }
  if (!got.ok()) return got.status();
  absl::StatusOr<IdxHeaderInfo> h = ParseHeader(absl::string_view(header, *got), path, max_bytes);
  if (!h.ok()) {
    if (absl::Status e = stream_error(); !e.ok()) return e;
    return absl::Status(h.status().code(), absl::StrCat(h.status().message(), " (read only the ", *got,
                                                        "-byte header, refusing to read further)"));
  }
  const int64_t payload = h->payload_bytes;
  // A plain file must be exactly header plus payload: checked against its
  // size before anything is allocated (gzdirect is known after the first read).
  if (file_size >= 0 && gzdirect(file.get())) {
    const int64_t available = file_size - static_cast<int64_t>(h->header_bytes);
    if (available < payload) return TruncatedPayload(path, *h, available);
    if (available > payload) {
      return Corrupt(
          path, absl::StrCat("trailing data: the file has ", available, " bytes after its ", h->header_bytes,
                             "-byte header, but dimensions ", DimsText(*h), " describe ", payload, " bytes of data"));
    }
  }
  IdxArray out;
  out.type = h->type;
  out.dims = h->dims;
  // One allocation of the declared size, filled a chunk at a time: the
  // pages a short gzip stream never reaches are never touched, and there is
  // no second copy of the payload.
  out.data.reserve(static_cast<size_t>(payload));
  constexpr size_t kChunk = 1 << 20;
  while (out.data.size() < static_cast<size_t>(payload)) {
    const size_t done = out.data.size();
    out.data.resize(done + std::min(kChunk, static_cast<size_t>(payload) - done));
    LOCKSTEP_ASSIGN_OR_RETURN(const size_t n,
                              read_into(reinterpret_cast<char*>(out.data.data()) + done, out.data.size() - done));
    if (done + n < out.data.size()) {
      if (absl::Status e = stream_error(); !e.ok()) {
        return absl::Status(e.code(), absl::StrCat(e.message(), "; ", done + n, " of the ", payload,
                                                   " bytes of data the header promises had come"));
      }
      return TruncatedPayload(path, *h, static_cast<int64_t>(done + n));
    }
  }
  // One byte more, so that trailing data is seen.
  char extra;
  LOCKSTEP_ASSIGN_OR_RETURN(const size_t n, read_into(&extra, 1));
  if (n > 0) {
    return Corrupt(
        path, absl::StrCat("trailing data: the stream holds more than the ", payload, " bytes of data that dimensions ",
                           DimsText(*h), " describe (limit ", max_bytes, "); stopped reading there, after ",
                           h->header_bytes + static_cast<size_t>(payload) + 1, " bytes"));
  }
  if (absl::Status e = stream_error(); !e.ok()) return e;
  ToHostOrder(out);
  return out;
}

}  // namespace lockstep
