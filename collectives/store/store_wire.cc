#include "collectives/store/store_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace store_wire {
namespace {

class Reader {
 public:
  Reader(absl::string_view data, const char* what) : data_(data), what_(what) {}

  bool U8(uint8_t* v) {
    if (data_.size() < 1) return Fail("u8");
    *v = static_cast<uint8_t>(data_[0]);
    data_.remove_prefix(1);
    return true;
  }
  bool U32(uint32_t* v) {
    if (data_.size() < 4) return Fail("u32");
    std::memcpy(v, data_.data(), 4);  // Little-endian hosts only (x86-64, arm64).
    data_.remove_prefix(4);
    return true;
  }
  bool I64(int64_t* v) {
    if (data_.size() < 8) return Fail("i64");
    std::memcpy(v, data_.data(), 8);
    data_.remove_prefix(8);
    return true;
  }
  bool String(std::string* s, uint32_t max, const char* field) {
    uint32_t n;
    if (!U32(&n)) return false;
    if (n > max) {
      error_ = absl::StrCat(what_, ": ", field, " of ", n, " bytes exceeds the limit of ", max);
      return false;
    }
    if (n > data_.size()) {
      error_ =
          absl::StrCat(what_, ": ", field, " claims ", n, " bytes but only ", data_.size(), " remain in the frame");
      return false;
    }
    s->assign(data_.data(), n);
    data_.remove_prefix(n);
    return true;
  }
  absl::Status Finish() {
    if (!error_.empty()) return absl::InvalidArgumentError(error_);
    if (!data_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what_, ": ", data_.size(), " unexpected trailing bytes"));
    }
    return absl::OkStatus();
  }

 private:
  bool Fail(const char* field) {
    error_ = absl::StrCat(what_, ": truncated, no room for a ", field);
    return false;
  }

  absl::string_view data_;
  const char* what_;
  std::string error_;
};

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void PutI64(std::string* out, int64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }
void PutString(std::string* out, absl::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}

}  // namespace

const char* OpName(Op op) {
  switch (op) {
    case Op::kHello:
      return "HELLO";
    case Op::kSet:
      return "SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kWait:
      return "WAIT";
    case Op::kCheck:
      return "CHECK";
    case Op::kDelete:
      return "DELETE";
    case Op::kNumKeys:
      return "NUM_KEYS";
    case Op::kMultiGet:
      return "MULTI_GET";
    case Op::kResponse:
      return "RESPONSE";
  }
  return "INVALID";
}

absl::StatusOr<FrameHeader> ParseHeader(absl::string_view bytes) {
  if (bytes.size() != kHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store frame header: ", bytes.size(), " bytes, expected ", kHeaderBytes));
  }
  uint32_t magic, body;
  std::memcpy(&magic, bytes.data(), 4);
  std::memcpy(&body, bytes.data() + 8, 4);
  const uint8_t version = static_cast<uint8_t>(bytes[4]);
  const uint8_t op = static_cast<uint8_t>(bytes[5]);
  if (magic != kMagic) {
    return absl::InvalidArgumentError(absl::StrCat("store frame: bad magic 0x", absl::Hex(magic),
                                                   " (not a lockstep store client, or a mismatched protocol)"));
  }
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrCat("store frame: protocol version ", int{version},
                                                   ", this build speaks ", int{kVersion},
                                                   "; use the same lockstep version on every node"));
  }
  if (bytes[6] != 0 || bytes[7] != 0) return absl::InvalidArgumentError("store frame: reserved bytes are not zero");
  if (!((op >= 1 && op <= 10) || op == 0x80)) {
    return absl::InvalidArgumentError(absl::StrCat("store frame: unknown op ", int{op}));
  }
  if (body > kMaxBodyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("store frame: body of ", body, " bytes exceeds the limit of ", kMaxBodyBytes));
  }
  return FrameHeader{static_cast<Op>(op), body};
}

std::string EncodeFrame(Op op, absl::string_view body) {
  std::string out;
  out.reserve(kHeaderBytes + body.size());
  PutU32(&out, kMagic);
  out.push_back(static_cast<char>(kVersion));
  out.push_back(static_cast<char>(op));
  out.push_back(0);
  out.push_back(0);
  PutU32(&out, static_cast<uint32_t>(body.size()));
  out.append(body.data(), body.size());
  return out;
}

absl::StatusOr<Request> ParseRequest(Op op, absl::string_view body) {
  Request r;
  r.op = op;
  Reader in(body, OpName(op));
  std::string key;
  switch (op) {
    case Op::kHello:
      in.String(&r.value, kMaxTokenBytes, "token");
      break;
    case Op::kSet:
      if (in.String(&key, kMaxKeyBytes, "key")) in.String(&r.value, kMaxValueBytes, "value");
      r.keys.push_back(key);
      break;
    case Op::kGet:
      if (in.String(&key, kMaxKeyBytes, "key")) in.I64(&r.integer);
      r.keys.push_back(key);
      break;
    case Op::kAdd:
      if (in.String(&key, kMaxKeyBytes, "key")) in.I64(&r.integer);
      r.keys.push_back(key);
      break;
    case Op::kCompareSet:
      if (in.String(&key, kMaxKeyBytes, "key") && in.String(&r.value, kMaxValueBytes, "expected")) {
        in.String(&r.desired, kMaxValueBytes, "desired");
      }
      r.keys.push_back(key);
      break;
    case Op::kWait:
    case Op::kMultiGet:
    case Op::kCheck: {
      uint32_t count = 0;
      if (!in.U32(&count)) break;
      if (count > kMaxKeys || count > body.size() / 4) {
        return absl::InvalidArgumentError(
            absl::StrCat(OpName(op), ": ", count, " keys is more than the frame can hold"));
      }
      r.keys.resize(count);
      bool ok = true;
      for (uint32_t i = 0; i < count && ok; ++i) ok = in.String(&r.keys[i], kMaxKeyBytes, "key");
      if (ok && op != Op::kCheck) in.I64(&r.integer);
      break;
    }
    case Op::kDelete:
      in.String(&key, kMaxKeyBytes, "key");
      r.keys.push_back(key);
      break;
    case Op::kNumKeys:
      break;
    case Op::kResponse:
      return absl::InvalidArgumentError("a RESPONSE frame is not a request");
  }
  absl::Status s = in.Finish();
  if (!s.ok()) return s;
  if ((op == Op::kGet || op == Op::kWait || op == Op::kMultiGet) && r.integer < 0) {
    return absl::InvalidArgumentError(absl::StrCat(OpName(op), ": negative timeout"));
  }
  return r;
}

std::string EncodeRequest(const Request& r) {
  std::string body;
  switch (r.op) {
    case Op::kHello:
      PutString(&body, r.value);
      break;
    case Op::kSet:
      PutString(&body, r.keys.at(0));
      PutString(&body, r.value);
      break;
    case Op::kGet:
    case Op::kAdd:
      PutString(&body, r.keys.at(0));
      PutI64(&body, r.integer);
      break;
    case Op::kCompareSet:
      PutString(&body, r.keys.at(0));
      PutString(&body, r.value);
      PutString(&body, r.desired);
      break;
    case Op::kWait:
    case Op::kMultiGet:
    case Op::kCheck:
      PutU32(&body, static_cast<uint32_t>(r.keys.size()));
      for (const std::string& k : r.keys) PutString(&body, k);
      if (r.op != Op::kCheck) PutI64(&body, r.integer);
      break;
    case Op::kDelete:
      PutString(&body, r.keys.at(0));
      break;
    case Op::kNumKeys:
    case Op::kResponse:
      break;
  }
  return EncodeFrame(r.op, body);
}

absl::StatusOr<Response> ParseResponse(absl::string_view body) {
  Reader in(body, "RESPONSE");
  Response r;
  uint8_t code = 0;
  if (in.U8(&code) && in.String(&r.value, kMaxValueBytes, "value")) in.I64(&r.integer);
  absl::Status s = in.Finish();
  if (!s.ok()) return s;
  if (code > static_cast<uint8_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::InvalidArgumentError(absl::StrCat("RESPONSE: unknown status code ", int{code}));
  }
  r.code = static_cast<absl::StatusCode>(code);
  return r;
}

std::string EncodeResponse(const Response& r) {
  std::string body;
  body.push_back(static_cast<char>(r.code));
  PutString(&body, r.value);
  PutI64(&body, r.integer);
  return EncodeFrame(Op::kResponse, body);
}

std::string PackValues(const std::vector<std::string>& values) {
  std::vector<const std::string*> in_place;
  in_place.reserve(values.size());
  for (const std::string& v : values) in_place.push_back(&v);
  return PackValues(in_place);
}

std::string PackValues(const std::vector<const std::string*>& values) {
  size_t bytes = 0;
  for (const std::string* v : values) bytes += 4 + v->size();
  std::string packed;
  packed.reserve(bytes);
  for (const std::string* v : values) PutString(&packed, *v);
  return packed;
}

absl::StatusOr<std::vector<std::string>> UnpackValues(absl::string_view packed, size_t count) {
  Reader in(packed, "MULTI_GET reply");
  std::vector<std::string> values(count);
  bool ok = true;
  for (size_t i = 0; i < count && ok; ++i) ok = in.String(&values[i], kMaxValueBytes, "value");
  absl::Status s = in.Finish();
  if (!s.ok()) return s;
  return values;
}

}  // namespace store_wire
}  // namespace lockstep
