#include "nn/checkpoint/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {
namespace safetensors_internal {

absl::Status Corrupt(absl::string_view source, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("safetensors ", source, ": ", what));
}

static std::string OffsetsToString(const Entry& e) { return absl::StrCat("[", e.begin, ", ", e.end, "]"); }

static uint64_t LoadLittleEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Length (1 to 4) of the well-formed UTF-8 sequence at `p`, or 0: overlong
// forms, surrogates and code points above U+10FFFF are malformed, as in JSON.
static size_t Utf8SequenceLength(const unsigned char* p, size_t available) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  size_t length;
  uint32_t smallest;
  if ((c & 0xE0) == 0xC0) {
    length = 2;
    smallest = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    length = 3;
    smallest = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    length = 4;
    smallest = 0x10000;
  } else {
    return 0;
  }
  if (available < length) return 0;
  uint32_t code_point = c & (0x7F >> length);  // The lead byte's payload bits.
  for (size_t i = 1; i < length; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (p[i] & 0x3F);
  }
  if (code_point < smallest || code_point > 0x10FFFF) return 0;
  if (code_point >= 0xD800 && code_point <= 0xDFFF) return 0;
  return length;
}

bool IsValidUtf8(absl::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(p + i, s.size() - i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// A name for messages: UTF-8 shown as is, control characters and malformed
// bytes escaped.
std::string Quoted(absl::string_view s) {
  if (!IsValidUtf8(s)) return absl::StrCat("'", absl::CHexEscape(s), "'");
  std::string out = "'";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7F) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  out.push_back('\'');
  return out;
}

static void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// A JSON string exactly as serde_json (the official writer) escapes it:
// quote, backslash and control characters only; \b \t \n \f \r short, other
// controls as lower-case \u00XX; everything else (UTF-8) raw.
void AppendJsonString(absl::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\r':
        out->append("\\r");
        break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xF]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

namespace {

// A strict recursive-descent reader for exactly the safetensors header
// schema. Each value is parsed straight into its final form (no generic JSON
// tree), so memory stays proportional to the header text, which has already
// been bounded.
class HeaderReader {
 public:
  HeaderReader(absl::string_view json, absl::string_view source) : json_(json), source_(source) {}

  absl::StatusOr<Header> Read() {
    Header header;
    if (json_.empty() || json_[0] != '{') {
      return Corrupt(source_, absl::StrCat("the header must be a JSON object starting with '{', found ", Found(), "; ",
                                           kCorruptHint));
    }
    ++pos_;
    std::set<std::string> seen;
    if (!ConsumeIf('}')) {
      do {
        LOCKSTEP_ASSIGN_OR_RETURN(std::string key, ReadString("a tensor name or \"__metadata__\""));
        if (!seen.insert(key).second) {
          return Corrupt(source_, absl::StrCat("the header has the key ", Quoted(key), " twice; keys must be unique; ",
                                               kCorruptHint));
        }
        LOCKSTEP_RETURN_IF_ERROR(Expect(':', absl::StrCat("':' after the key ", Quoted(key))));
        if (key == kMetadataKey) {
          LOCKSTEP_RETURN_IF_ERROR(ReadMetadata(&header.metadata));
        } else {
          LOCKSTEP_ASSIGN_OR_RETURN(Entry entry, ReadEntry(std::move(key)));
          header.entries.push_back(std::move(entry));
        }
      } while (ConsumeIf(','));
      LOCKSTEP_RETURN_IF_ERROR(Expect('}', "',' or '}' after a header entry"));
    }
    SkipWhitespace();
    if (pos_ != json_.size()) {
      return Corrupt(source_, absl::StrCat("unexpected bytes after the header's JSON object at header byte ", pos_,
                                           ": ", Found(), " (only whitespace padding may follow); ", kCorruptHint));
    }
    return header;
  }

 private:
  // The text at the current position, for "found ..." in messages.
  std::string Found() const {
    if (pos_ >= json_.size()) return "the end of the header";
    return Quoted(json_.substr(pos_, 16));
  }

  absl::Status SyntaxError(absl::string_view expected) const {
    return Corrupt(source_, absl::StrCat("header JSON at byte ", pos_, ": expected ", expected, ", found ", Found(),
                                         "; ", kCorruptHint));
  }

  void SkipWhitespace() {
    while (pos_ < json_.size() &&
           (json_[pos_] == ' ' || json_[pos_] == '\t' || json_[pos_] == '\n' || json_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool ConsumeIf(char c) {
    SkipWhitespace();
    if (pos_ < json_.size() && json_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  absl::Status Expect(char c, absl::string_view expected) {
    if (!ConsumeIf(c)) return SyntaxError(expected);
    return absl::OkStatus();
  }

  // Four hex digits of a \u escape at pos_.
  absl::StatusOr<uint32_t> ReadHex4() {
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = pos_ < json_.size() ? json_[pos_] : '\0';
      int digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else {
        return SyntaxError("four hex digits after \\u");
      }
      value = value * 16 + static_cast<uint32_t>(digit);
      ++pos_;
    }
    return value;
  }

  absl::StatusOr<std::string> ReadString(absl::string_view what) {
    SkipWhitespace();
    if (pos_ >= json_.size() || json_[pos_] != '"') return SyntaxError(absl::StrCat("a string (", what, ")"));
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= json_.size()) return SyntaxError(absl::StrCat("the closing '\"' of a string (", what, ")"));
      const auto c = static_cast<unsigned char>(json_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) return SyntaxError("a printable character (control characters must be escaped)");
      if (c >= 0x80) {
        const size_t n =
            Utf8SequenceLength(reinterpret_cast<const unsigned char*>(json_.data()) + pos_, json_.size() - pos_);
        if (n == 0) return SyntaxError("valid UTF-8");
        out.append(json_.data() + pos_, n);
        pos_ += n;
        continue;
      }
      ++pos_;
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        continue;
      }
      const char escape = pos_ < json_.size() ? json_[pos_] : '\0';
      switch (escape) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          ++pos_;
          LOCKSTEP_ASSIGN_OR_RETURN(uint32_t cp, ReadHex4());
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            pos_ -= 6;
            return SyntaxError("a character, not a lone low surrogate");
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (json_.substr(pos_, 2) != "\\u") {
              return SyntaxError("a \\u low surrogate to complete the surrogate pair");
            }
            pos_ += 2;
            LOCKSTEP_ASSIGN_OR_RETURN(uint32_t low, ReadHex4());
            if (low < 0xDC00 || low > 0xDFFF) {
              pos_ -= 6;
              return SyntaxError("a \\u low surrogate (DC00 to DFFF) to complete the surrogate pair");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, &out);
          continue;  // pos_ is past the escape already.
        }
        default:
          return SyntaxError("one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u after a backslash");
      }
      ++pos_;
    }
  }

  // A JSON integer in 0..INT64_MAX: no sign, fraction, exponent or leading zeros.
  absl::StatusOr<int64_t> ReadInteger(absl::string_view what) {
    SkipWhitespace();
    const std::string expected = absl::StrCat("a non-negative integer (", what, ")");
    if (pos_ >= json_.size() || json_[pos_] < '0' || json_[pos_] > '9') return SyntaxError(expected);
    if (json_[pos_] == '0' && pos_ + 1 < json_.size() && json_[pos_ + 1] >= '0' && json_[pos_ + 1] <= '9') {
      return SyntaxError(absl::StrCat(expected, " without leading zeros"));
    }
    const size_t start = pos_;
    int64_t value = 0;
    while (pos_ < json_.size() && json_[pos_] >= '0' && json_[pos_] <= '9') {
      const int digit = json_[pos_] - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        pos_ = start;
        return SyntaxError(absl::StrCat(expected, " at most ", std::numeric_limits<int64_t>::max()));
      }
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ < json_.size() && (json_[pos_] == '.' || json_[pos_] == 'e' || json_[pos_] == 'E')) {
      pos_ = start;
      return SyntaxError(absl::StrCat(expected, " with no fraction or exponent"));
    }
    return value;
  }

  absl::StatusOr<std::vector<int64_t>> ReadIntegerArray(absl::string_view what, size_t max_count) {
    LOCKSTEP_RETURN_IF_ERROR(Expect('[', absl::StrCat("'[' to start ", what)));
    std::vector<int64_t> values;
    if (ConsumeIf(']')) return values;
    do {
      if (values.size() == max_count) {
        return SyntaxError(absl::StrCat("']' after at most ", max_count, " values in ", what));
      }
      LOCKSTEP_ASSIGN_OR_RETURN(int64_t v, ReadInteger(what));
      values.push_back(v);
    } while (ConsumeIf(','));
    LOCKSTEP_RETURN_IF_ERROR(Expect(']', absl::StrCat("',' or ']' in ", what)));
    return values;
  }

  absl::Status ReadMetadata(std::map<std::string, std::string>* metadata) {
    LOCKSTEP_RETURN_IF_ERROR(Expect('{', "'{' to start \"__metadata__\" (an object of string keys and string values)"));
    if (ConsumeIf('}')) return absl::OkStatus();
    do {
      LOCKSTEP_ASSIGN_OR_RETURN(std::string key, ReadString("a \"__metadata__\" key"));
      LOCKSTEP_RETURN_IF_ERROR(Expect(':', absl::StrCat("':' after the \"__metadata__\" key ", Quoted(key))));
      LOCKSTEP_ASSIGN_OR_RETURN(std::string value,
                                ReadString(absl::StrCat("the value of \"__metadata__\" key ", Quoted(key),
                                                        "; metadata values must be strings")));
      if (!metadata->emplace(key, std::move(value)).second) {
        return Corrupt(source_, absl::StrCat("\"__metadata__\" has the key ", Quoted(key),
                                             " twice; keys must be unique; ", kCorruptHint));
      }
    } while (ConsumeIf(','));
    return Expect('}', "',' or '}' in \"__metadata__\"");
  }

  absl::StatusOr<Entry> ReadEntry(std::string name) {
    Entry entry;
    entry.name = std::move(name);
    const std::string tensor = absl::StrCat("tensor ", Quoted(entry.name));
    LOCKSTEP_RETURN_IF_ERROR(Expect('{', absl::StrCat("'{' to start the entry of ", tensor)));
    bool has_dtype = false, has_shape = false, has_offsets = false;
    if (!ConsumeIf('}')) {
      do {
        LOCKSTEP_ASSIGN_OR_RETURN(std::string field, ReadString(absl::StrCat("a field name of ", tensor)));
        bool* seen = field == "dtype"          ? &has_dtype
                     : field == "shape"        ? &has_shape
                     : field == "data_offsets" ? &has_offsets
                                               : nullptr;
        if (seen == nullptr) {
          return Corrupt(source_, absl::StrCat(tensor, " has an unexpected field ", Quoted(field),
                                               "; expected exactly dtype, shape and data_offsets; ", kCorruptHint));
        }
        if (*seen) {
          return Corrupt(source_, absl::StrCat(tensor, " has the field ", Quoted(field), " twice; ", kCorruptHint));
        }
        *seen = true;
        LOCKSTEP_RETURN_IF_ERROR(Expect(':', absl::StrCat("':' after ", Quoted(field), " of ", tensor)));
        if (field == "dtype") {
          LOCKSTEP_ASSIGN_OR_RETURN(std::string dtype, ReadString(absl::StrCat("the dtype of ", tensor)));
          absl::StatusOr<DType> parsed = ParseSafetensorsDType(dtype);
          if (!parsed.ok()) {
            return absl::UnimplementedError(absl::StrCat(
                "safetensors ", source_, ": ", tensor, " has dtype ", Quoted(dtype),
                ", which lockstep does not support (supported: F32, F64, F16, BF16, I32, I64, U8, I8, BOOL); "
                "convert the tensor to one of these before saving"));
          }
          entry.dtype = *parsed;
        } else if (field == "shape") {
          LOCKSTEP_ASSIGN_OR_RETURN(entry.shape,
                                    ReadIntegerArray(absl::StrCat("the shape of ", tensor), kMaxSafetensorsRank));
        } else {
          const std::string what = absl::StrCat("the data_offsets [begin, end] of ", tensor);
          LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int64_t> offsets, ReadIntegerArray(what, 2));
          if (offsets.size() != 2) {
            return Corrupt(source_, absl::StrCat(tensor, " has ", offsets.size(),
                                                 " data_offsets; expected two, [begin, end]; ", kCorruptHint));
          }
          entry.begin = offsets[0];
          entry.end = offsets[1];
        }
      } while (ConsumeIf(','));
      LOCKSTEP_RETURN_IF_ERROR(Expect('}', absl::StrCat("',' or '}' in the entry of ", tensor)));
    }
    const char* missing = !has_dtype ? "dtype" : !has_shape ? "shape" : !has_offsets ? "data_offsets" : nullptr;
    if (missing != nullptr) {
      return Corrupt(source_, absl::StrCat(tensor, " has no '", missing,
                                           "' field; expected exactly dtype, shape and data_offsets; ", kCorruptHint));
    }
    return entry;
  }

  absl::string_view json_;
  absl::string_view source_;
  size_t pos_ = 0;
};

}  // namespace

// Checks each entry's byte count against its dtype and shape, then that the
// entries, in offset order, tile [0, data_size) exactly; sorts them so.
static absl::Status ValidateLayout(absl::string_view source, uint64_t data_size, std::vector<Entry>* entries) {
  for (const Entry& e : *entries) {
    const std::string tensor = absl::StrCat("tensor ", Quoted(e.name));
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel)) {
        return Corrupt(source, absl::StrCat(tensor, " has shape ", ShapeToString(e.shape),
                                            ", whose element count overflows; ", kCorruptHint));
      }
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(e.dtype)), &nbytes) ||
        nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Corrupt(source, absl::StrCat(tensor, " has shape ", ShapeToString(e.shape),
                                          ", whose byte count overflows; ", kCorruptHint));
    }
    if (e.end < e.begin) {
      return Corrupt(source, absl::StrCat(tensor, " has data_offsets ", OffsetsToString(e),
                                          ", which end before they begin; ", kCorruptHint));
    }
    const uint64_t have = static_cast<uint64_t>(e.end - e.begin);
    if (have != nbytes) {
      return Corrupt(source, absl::StrCat(tensor, " has data_offsets ", OffsetsToString(e), " (", have,
                                          " bytes) but dtype ", SafetensorsDTypeName(e.dtype), " and shape ",
                                          ShapeToString(e.shape), " need ", nbytes, " bytes; ", kCorruptHint));
    }
  }
  // Stable: zero-byte tensors sharing an offset keep their header order.
  std::stable_sort(entries->begin(), entries->end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : *entries) {
    const uint64_t begin = static_cast<uint64_t>(e.begin);
    if (begin < covered) {
      return Corrupt(
          source, absl::StrCat("tensor ", Quoted(e.name), " (data_offsets ", OffsetsToString(e), ") overlaps tensor ",
                               Quoted(previous->name), " (data_offsets ", OffsetsToString(*previous),
                               "); tensors must not share bytes; ", kCorruptHint));
    }
    if (begin > covered) {
      return Corrupt(source,
                     absl::StrCat("data section bytes [", covered, ", ", begin, ") before tensor ", Quoted(e.name),
                                  " belong to no tensor; the format requires the "
                                  "tensors to cover the data section without holes; ",
                                  kCorruptHint));
    }
    covered = static_cast<uint64_t>(e.end);
    previous = &e;
  }
  if (covered > data_size) {
    return Corrupt(source, absl::StrCat("truncated: tensor ", Quoted(previous->name), " ends at data offset ", covered,
                                        " but the data section has only ", data_size,
                                        " bytes; the file was cut short (an interrupted copy or download?)"));
  }
  if (covered < data_size) {
    return Corrupt(source,
                   absl::StrCat("the data section has ", data_size, " bytes but the tensors cover only ", covered,
                                "; the last ", data_size - covered, " bytes belong to no tensor; ", kCorruptHint));
  }
  return absl::OkStatus();
}

// The header length from the prefix, checked against the limit and the
// `available` bytes after the prefix.
absl::StatusOr<uint64_t> CheckHeaderLength(absl::string_view source, const char* prefix, uint64_t available) {
  const uint64_t n = LoadLittleEndian64(prefix);
  if (n > kMaxSafetensorsHeaderBytes) {
    return Corrupt(source, absl::StrCat("the header length prefix says ", n, " bytes, more than the limit of ",
                                        kMaxSafetensorsHeaderBytes,
                                        "; this is not a safetensors file (a PyTorch .pt or .bin checkpoint?) "
                                        "or it is corrupt"));
  }
  if (n > available) {
    return Corrupt(source, absl::StrCat("truncated: the header length prefix says ", n, " bytes but only ", available,
                                        " bytes follow it; the file was cut short or is not a safetensors file"));
  }
  return n;
}

absl::StatusOr<Header> ParseHeader(absl::string_view source, absl::string_view json, uint64_t data_size) {
  LOCKSTEP_ASSIGN_OR_RETURN(Header header, HeaderReader(json, source).Read());
  LOCKSTEP_RETURN_IF_ERROR(ValidateLayout(source, data_size, &header.entries));
  return header;
}

}  // namespace safetensors_internal
}  // namespace lockstep
