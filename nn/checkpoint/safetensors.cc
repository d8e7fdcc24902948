#include "nn/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/fd.h"
#include "core/status.h"
#include "nn/checkpoint/safetensors_header.h"

namespace lockstep {
namespace {

// Data is copied byte for byte between the file and tensors.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian: big-endian hosts need byte swapping here");

using safetensors_internal::AppendJsonString;
using safetensors_internal::CheckHeaderLength;
using safetensors_internal::Corrupt;
using safetensors_internal::Entry;
using safetensors_internal::Header;
using safetensors_internal::IsValidUtf8;
using safetensors_internal::kMetadataKey;
using safetensors_internal::kPrefixBytes;
using safetensors_internal::ParseHeader;
using safetensors_internal::Quoted;

absl::Status SerializeError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("SerializeSafetensors: ", what));
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

// Reads exactly `size` bytes; a short read means the file shrank or ended.
absl::Status ReadExactly(std::FILE* f, void* out, size_t size, const std::string& path, absl::string_view what) {
  if (size == 0 || std::fread(out, 1, size, f) == size) return absl::OkStatus();
  if (std::ferror(f)) {
    return absl::InternalError(
        absl::StrCat("safetensors ", path, ": reading ", what, " failed: ", std::strerror(errno)));
  }
  return Corrupt(path, absl::StrCat("truncated while reading ", what,
                                    " (the file shrank while being read? another process may be writing it)"));
}

const char* FileTypeName(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// An open regular file and its size.
struct OpenedFile {
  std::unique_ptr<std::FILE, FileCloser> f;
  uint64_t size = 0;
};

// Opens `path` only if it is a regular file. O_NONBLOCK because opening a
// FIFO for reading otherwise waits for a writer, possibly forever (a FIFO
// named like a checkpoint must not hang a resume); fstat then refuses
// anything but a regular file before a byte is read.
absl::StatusOr<OpenedFile> OpenRegularFile(const std::string& path, const SafetensorsReadOptions& options) {
  const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | (options.follow_symlinks ? 0 : O_NOFOLLOW);
  Fd fd(::open(path.c_str(), flags));
  if (!fd.valid()) {
    const int err = errno;
    const std::string message = absl::StrCat("safetensors ", path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message + "; check the path");
    if (err == ELOOP && !options.follow_symlinks) {
      return absl::FailedPreconditionError(
          absl::StrCat(message, " (it is a symbolic link, and this reader takes regular files only)"));
    }
    if (err == ENXIO) return absl::FailedPreconditionError(message + " (a socket? pass a .safetensors file)");
    return absl::PermissionDeniedError(message);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::InternalError(absl::StrCat("safetensors ", path, ": fstat failed: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("safetensors ", path, ": ", FileTypeName(st.st_mode),
                                                      ", not a regular file; pass the path of a .safetensors file"));
  }
  // Plain blocking reads from here on (O_NONBLOCK means nothing for a
  // regular file, but say what is meant).
  const int status_flags = ::fcntl(fd.get(), F_GETFL);
  if (status_flags < 0 || ::fcntl(fd.get(), F_SETFL, status_flags & ~O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("safetensors ", path, ": fcntl failed: ", std::strerror(errno)));
  }
  OpenedFile opened;
  opened.f.reset(::fdopen(fd.get(), "rb"));
  if (opened.f == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("safetensors ", path, ": fdopen failed: ", std::strerror(errno)));
  }
  fd.Release();  // fclose closes it now.
  opened.size = static_cast<uint64_t>(st.st_size);
  return opened;
}

// Reads and validates the header (its length and every entry against the
// file's size), leaving the stream at the data section.
absl::StatusOr<Header> ReadHeader(OpenedFile& opened, const std::string& path) {
  const uint64_t size = opened.size;
  if (size < kPrefixBytes) {
    return Corrupt(path, absl::StrCat("truncated: the file has ", size,
                                      " bytes, but a safetensors file starts with an 8-byte header length"));
  }
  char prefix[kPrefixBytes];
  LOCKSTEP_RETURN_IF_ERROR(ReadExactly(opened.f.get(), prefix, kPrefixBytes, path, "the header length"));
  LOCKSTEP_ASSIGN_OR_RETURN(uint64_t n, CheckHeaderLength(path, prefix, size - kPrefixBytes));
  std::string json(n, '\0');
  LOCKSTEP_RETURN_IF_ERROR(ReadExactly(opened.f.get(), json.data(), json.size(), path, "the header"));
  return ParseHeader(path, json, size - kPrefixBytes - n);
}

}  // namespace

absl::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF64:
      return "F64";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    case DType::kU8:
      return "U8";
    case DType::kI8:
      return "I8";
    case DType::kBool:
      return "BOOL";
  }
  return "invalid";
}

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  for (DType dtype : kAllDTypes) {
    if (SafetensorsDTypeName(dtype) == name) return dtype;
  }
  return absl::UnimplementedError(absl::StrCat("safetensors dtype ", Quoted(name),
                                               " is not supported; expected one of F32, F64, F16, "
                                               "BF16, I32, I64, U8, I8, BOOL"));
}

absl::StatusOr<std::string> SerializeSafetensors(absl::Span<const std::pair<std::string, Tensor>> tensors,
                                                 const std::map<std::string, std::string>& metadata) {
  std::map<absl::string_view, size_t> positions;
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string& name = tensors[i].first;
    const Tensor& t = tensors[i].second;
    if (name.empty()) {
      return SerializeError(absl::StrCat("tensor ", i, " has an empty name; give every tensor a unique name"));
    }
    if (absl::string_view(name).substr(0, 2) == "__") {
      return SerializeError(absl::StrCat("tensor ", i, " is named ", Quoted(name),
                                         "; names starting with \"__\" are reserved for the header "
                                         "(\"__metadata__\"); rename it"));
    }
    if (!IsValidUtf8(name)) {
      return SerializeError(absl::StrCat("tensor ", i, " has the name ", Quoted(name),
                                         ", which is not valid UTF-8 (the header is JSON)"));
    }
    const auto [it, inserted] = positions.emplace(name, i);
    if (!inserted) {
      return SerializeError(absl::StrCat("the name ", Quoted(name), " is used by tensors ", it->second, " and ", i,
                                         "; names must be unique"));
    }
    if (!t.defined()) {
      return SerializeError(
          absl::StrCat("tensor ", Quoted(name), " is undefined (a default-constructed Tensor); pass one with data"));
    }
    if (t.device().is_cpu()) {
      host.push_back(t);
    } else {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor copy, t.To(Device::Cpu()));
      host.push_back(std::move(copy));
    }
  }
  for (const auto& [key, value] : metadata) {
    if (!IsValidUtf8(key) || !IsValidUtf8(value)) {
      return SerializeError(absl::StrCat("metadata entry ", Quoted(key), " -> ", Quoted(value),
                                         " is not valid UTF-8 (the header is JSON)"));
    }
  }

  std::string header = "{";
  if (!metadata.empty()) {
    AppendJsonString(kMetadataKey, &header);
    header.append(":{");
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header.push_back(',');
      first = false;
      AppendJsonString(key, &header);
      header.push_back(':');
      AppendJsonString(value, &header);
    }
    header.push_back('}');
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = host[i];
    if (header.size() > 1) header.push_back(',');
    AppendJsonString(tensors[i].first, &header);
    absl::StrAppend(&header, ":{\"dtype\":\"", SafetensorsDTypeName(t.dtype()), "\",\"shape\":[",
                    absl::StrJoin(t.shape(), ","), "],\"data_offsets\":[", offset, ",", offset + t.nbytes(), "]}");
    offset += t.nbytes();
  }
  header.push_back('}');
  // The official writer pads with spaces so that the data section starts
  // 8-byte aligned.
  header.append((8 - header.size() % 8) % 8, ' ');
  if (header.size() > kMaxSafetensorsHeaderBytes) {
    return SerializeError(absl::StrCat("the header would have ", header.size(), " bytes, more than the ",
                                       kMaxSafetensorsHeaderBytes,
                                       " that readers accept; split the tensors over several files"));
  }

  std::string out;
  out.reserve(kPrefixBytes + header.size() + offset);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xFF));
  out.append(header);
  for (const Tensor& t : host) {
    if (t.nbytes() > 0) out.append(static_cast<const char*>(t.raw_data()), t.nbytes());
  }
  return out;
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(absl::string_view bytes, absl::string_view source_name) {
  if (bytes.size() < kPrefixBytes) {
    return Corrupt(source_name, absl::StrCat("truncated: the file has ", bytes.size(),
                                             " bytes, but a safetensors file starts with an 8-byte "
                                             "header length"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(uint64_t n, CheckHeaderLength(source_name, bytes.data(), bytes.size() - kPrefixBytes));
  const absl::string_view data = bytes.substr(kPrefixBytes + n);
  LOCKSTEP_ASSIGN_OR_RETURN(Header header, ParseHeader(source_name, bytes.substr(kPrefixBytes, n), data.size()));
  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  file.tensors.reserve(header.entries.size());
  for (Entry& e : header.entries) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(std::move(e.shape), e.dtype));
    if (t.nbytes() > 0) std::memcpy(t.raw_data(), data.data() + e.begin, t.nbytes());
    file.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return file;
}

absl::Status WriteSafetensorsFile(const std::string& path, absl::Span<const std::pair<std::string, Tensor>> tensors,
                                  const std::map<std::string, std::string>& metadata,
                                  const AtomicWriteOptions& options) {
  absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, metadata);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("WriteSafetensorsFile(", path, "): ", bytes.status().message()));
  }
  return WriteFileAtomically(path, *bytes, options);
}

absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path, const SafetensorsReadOptions& options) {
  LOCKSTEP_ASSIGN_OR_RETURN(OpenedFile opened, OpenRegularFile(path, options));
  LOCKSTEP_ASSIGN_OR_RETURN(Header header, ReadHeader(opened, path));
  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  file.tensors.reserve(header.entries.size());
  // The entries tile the data section in order, so the data reads sequentially.
  for (Entry& e : header.entries) {
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(std::move(e.shape), e.dtype));
    LOCKSTEP_RETURN_IF_ERROR(
        ReadExactly(opened.f.get(), t.raw_data(), t.nbytes(), path, absl::StrCat("tensor ", Quoted(e.name))));
    file.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return file;
}

absl::StatusOr<std::map<std::string, std::string>> ReadSafetensorsMetadata(const std::string& path,
                                                                           const SafetensorsReadOptions& options) {
  LOCKSTEP_ASSIGN_OR_RETURN(OpenedFile opened, OpenRegularFile(path, options));
  LOCKSTEP_ASSIGN_OR_RETURN(Header header, ReadHeader(opened, path));
  return std::move(header.metadata);
}

}  // namespace lockstep
