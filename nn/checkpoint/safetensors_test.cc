#include "nn/checkpoint/safetensors.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/atomic_file.h"
#include "core/cuda/cuda_runtime.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// A CPU tensor holding exactly `bytes`.
Tensor FromBytes(DType dtype, Shape shape, const std::string& bytes) {
  Tensor t = *Tensor::Empty(std::move(shape), dtype);
  EXPECT_EQ(t.nbytes(), bytes.size());
  if (!bytes.empty()) std::memcpy(t.raw_data(), bytes.data(), bytes.size());
  return t;
}

std::string Bytes(const Tensor& t) {
  return t.nbytes() == 0 ? "" : std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

// Distinct, dtype-agnostic contents (byte patterns include NaN payloads for
// the float types, which must survive bit for bit).
std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 37 + seed * 11 + 5);
  return s;
}

// The 8-byte little-endian prefix followed by `json` (not padded).
std::string WithPrefix(const std::string& json) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((uint64_t{json.size()} >> (8 * i)) & 0xFF));
  return out + json;
}

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape, int64_t begin,
                  int64_t end) {
  return absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":", shape, ",\"data_offsets\":[", begin, ",",
                      end, "]}");
}

void ExpectParseError(const std::string& bytes, const std::string& expected_message,
                      absl::StatusCode code = absl::StatusCode::kDataLoss) {
  const absl::StatusOr<SafetensorsFile> r = ParseSafetensors(bytes, "x.safetensors");
  ASSERT_FALSE(r.ok()) << "expected: " << expected_message;
  EXPECT_EQ(r.status().code(), code) << r.status();
  EXPECT_EQ(r.status().message(), expected_message);
}

void ExpectParseErrorContains(const std::string& bytes, const std::string& needle) {
  const absl::StatusOr<SafetensorsFile> r = ParseSafetensors(bytes, "x.safetensors");
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << needle;
  EXPECT_NE(r.status().message().find(needle), absl::string_view::npos) << r.status();
}

constexpr char kCorrupt[] = "; the file is corrupt or was written by a different tool";

TEST(SafetensorsTest, MatchesTheOfficialWriterByteForByte) {
  // huggingface/safetensors bindings/python/tests/test_simple.py: saving
  // {"test": torch.zeros((2, 2), dtype=torch.float32)}.
  const std::string official = std::string("@\x00\x00\x00\x00\x00\x00\x00", 8) +
                               "{\"test\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}    " +
                               std::string(16, '\0');
  const Named tensors = {{"test", *Tensor::Zeros({2, 2}, DType::kF32)}};
  const absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, {});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, official);
}

TEST(SafetensorsTest, HandConstructedFileWithMetadataScalarAndEmptyTensor) {
  const std::string json =
      "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"tab\\there \\\"q\\\" \xc3\xa9\\u0001\"},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"empty\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,8]},"
      "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}";
  ASSERT_EQ(json.size(), 228u);
  const std::string data = std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8) +  // 1.0f, -2.0f
                           std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8);   // int64 7
  const std::string expected = std::string("\xe8\x00\x00\x00\x00\x00\x00\x00", 8) + json + "    " + data;

  const Named tensors = {{"w", *Tensor::FromVector<float>({1.0f, -2.0f})},
                         {"empty", *Tensor::Empty({0}, DType::kU8)},
                         {"s", FromBytes(DType::kI64, {}, data.substr(8))}};
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "tab\there \"q\" \xc3\xa9\x01"}};
  const absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, metadata);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, expected);

  const absl::StatusOr<SafetensorsFile> file = ParseSafetensors(expected, "hand");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, metadata);
  ASSERT_EQ(file->tensors.size(), 3u);
  EXPECT_EQ(file->tensors[0].first, "w");
  EXPECT_EQ(*file->tensors[0].second.ToVector<float>(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(file->tensors[1].first, "empty");
  EXPECT_EQ(file->tensors[1].second.shape(), (Shape{0}));
  EXPECT_EQ(file->tensors[1].second.dtype(), DType::kU8);
  EXPECT_EQ(file->tensors[2].first, "s");
  EXPECT_EQ(file->tensors[2].second.shape(), Shape{});
  EXPECT_EQ(*file->tensors[2].second.ToVector<int64_t>(), std::vector<int64_t>{7});
}

TEST(SafetensorsTest, EmptyFileHasAPaddedEmptyObject) {
  const std::string expected = std::string("\x08\x00\x00\x00\x00\x00\x00\x00", 8) + "{}      ";
  EXPECT_EQ(*SerializeSafetensors({}, {}), expected);
  const absl::StatusOr<SafetensorsFile> file = ParseSafetensors(expected, "empty");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->tensors.empty());
  EXPECT_TRUE(file->metadata.empty());
}

TEST(SafetensorsTest, RoundTripsEveryDTypeAndShape) {
  Named tensors;
  int seed = 0;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{2, 3}, Shape{}, Shape{0}, Shape{3, 0, 2}, Shape{1, 1, 5}}) {
      const size_t bytes = static_cast<size_t>(*ShapeNumel(shape)) * DTypeSize(dtype);
      tensors.emplace_back(absl::StrCat("layer", seed, ".", DTypeName(dtype)),
                           FromBytes(dtype, shape, Pattern(bytes, seed)));
      ++seed;
    }
  }
  const std::map<std::string, std::string> metadata = {
      {"quote\"backslash\\slash/", "control \x01\x1f del \x7f"},
      {"unicode \xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
      {"__metadata__", ""},
      {"", "empty key"},
      {"newlines", "a\nb\r\nc\t\b\f"},
  };
  const absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, metadata);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const uint64_t header = static_cast<unsigned char>((*bytes)[0]) | static_cast<unsigned char>((*bytes)[1]) << 8;
  EXPECT_EQ(header % 8, 0u);

  const absl::StatusOr<SafetensorsFile> file = ParseSafetensors(*bytes, "round trip");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, metadata);
  ASSERT_EQ(file->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(tensors[i].first);
    EXPECT_EQ(file->tensors[i].first, tensors[i].first);
    EXPECT_EQ(file->tensors[i].second.dtype(), tensors[i].second.dtype());
    EXPECT_EQ(file->tensors[i].second.shape(), tensors[i].second.shape());
    EXPECT_EQ(file->tensors[i].second.device(), Device::Cpu());
    EXPECT_EQ(Bytes(file->tensors[i].second), Bytes(tensors[i].second));
  }
  // Serializing what was read gives the same bytes.
  EXPECT_EQ(*SerializeSafetensors(file->tensors, file->metadata), *bytes);
}

TEST(SafetensorsTest, SerializesViewsAsTheirElementsOnly) {
  const Tensor base = *Tensor::FromVector<int32_t>({1, 2, 3, 4, 5, 6}, {3, 2});
  const Named tensors = {{"rows", *base.Slice(1, 3)}};
  const SafetensorsFile file = *ParseSafetensors(*SerializeSafetensors(tensors, {}), "view");
  EXPECT_EQ(file.tensors[0].second.shape(), (Shape{2, 2}));
  EXPECT_EQ(*file.tensors[0].second.ToVector<int32_t>(), (std::vector<int32_t>{3, 4, 5, 6}));
}

TEST(SafetensorsTest, SerializesCudaTensorsFromTheHost) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const Tensor host = *Tensor::FromVector<float>({1.5f, -2.5f, 3.0f});
  const Named on_device = {{"g", *host.To(Device::Cuda(0))}};
  const Named on_host = {{"g", host}};
  EXPECT_EQ(*SerializeSafetensors(on_device, {}), *SerializeSafetensors(on_host, {}));
}

TEST(SafetensorsTest, ParsesEscapesAndSurrogatePairsInNames) {
  // "\u00e9\/\ud83d\ude00\n" is "é/😀\n".
  const std::string json = "{" + Entry("a\\u00e9\\/\\ud83d\\ude00\\n\\\"", "U8", "[1]", 0, 1) + "}";
  const absl::StatusOr<SafetensorsFile> file = ParseSafetensors(WithPrefix(json) + "z", "escapes");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors[0].first, "a\xc3\xa9/\xf0\x9f\x98\x80\n\"");
}

TEST(SafetensorsTest, OrdersTensorsByOffsetNotHeaderOrder) {
  const std::string json = "{" + Entry("second", "U8", "[2]", 1, 3) + "," + Entry("z0", "U8", "[0]", 0, 0) + "," +
                           Entry("first", "U8", "[1]", 0, 1) + "," + Entry("a0", "U8", "[0]", 0, 0) + "}";
  const absl::StatusOr<SafetensorsFile> file = ParseSafetensors(WithPrefix(json) + "abc", "order");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 4u);
  // Zero-byte tensors at the same offset keep their header order.
  EXPECT_EQ(file->tensors[0].first, "z0");
  EXPECT_EQ(file->tensors[1].first, "a0");
  EXPECT_EQ(file->tensors[2].first, "first");
  EXPECT_EQ(Bytes(file->tensors[2].second), "a");
  EXPECT_EQ(file->tensors[3].first, "second");
  EXPECT_EQ(Bytes(file->tensors[3].second), "bc");
}

TEST(SafetensorsTest, AcceptsJsonWhitespaceInsideAndAfterTheHeader) {
  const std::string json =
      "{ \"t\" :\n{\"shape\" : [ 1 , 2 ] ,\t\"data_offsets\":[ 0,2 ], \"dtype\" :\"U8\" } }\r\n\t ";
  const absl::StatusOr<SafetensorsFile> file = ParseSafetensors(WithPrefix(json) + "xy", "spaces");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors[0].second.shape(), (Shape{1, 2}));
}

// ---- validation errors --------------------------------------------------------

std::string SmallValidFile() {
  const Named tensors = {{"a", *Tensor::FromVector<float>({1.0f, 2.0f})},
                         {"b", *Tensor::FromVector<uint8_t>({9, 8, 7})}};
  return *SerializeSafetensors(tensors, {{"k", "v"}});
}

TEST(SafetensorsTest, EveryTruncationFailsCleanlyAndSaysTruncated) {
  const std::string file = SmallValidFile();
  ASSERT_TRUE(ParseSafetensors(file, "full").ok());
  for (size_t n = 0; n < file.size(); ++n) {
    SCOPED_TRACE(n);
    const absl::StatusOr<SafetensorsFile> r = ParseSafetensors(file.substr(0, n), "cut.safetensors");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find("safetensors cut.safetensors: truncated"), absl::string_view::npos)
        << r.status();
  }
  ExpectParseError(file.substr(0, 5),
                   "safetensors x.safetensors: truncated: the file has 5 bytes, but a safetensors file starts "
                   "with an 8-byte header length");
  ExpectParseError(file.substr(0, file.size() - 1),
                   "safetensors x.safetensors: truncated: tensor 'b' ends at data offset 11 but the data "
                   "section has only 10 bytes; the file was cut short (an interrupted copy or download?)");
}

TEST(SafetensorsTest, HeaderLengthBeyondTheFileOrTheLimit) {
  ExpectParseError(WithPrefix("{}").substr(0, 9),
                   "safetensors x.safetensors: truncated: the header length prefix says 2 bytes but only 1 "
                   "bytes follow it; the file was cut short or is not a safetensors file");
  ExpectParseError(std::string("\x01\xe1\xf5\x05\x00\x00\x00\x00{}", 10),  // 100,000,001
                   "safetensors x.safetensors: the header length prefix says 100000001 bytes, more than the "
                   "limit of 100000000; this is not a safetensors file (a PyTorch .pt or .bin checkpoint?) or "
                   "it is corrupt");
  ExpectParseErrorContains(std::string(8, '\xff') + "{}", "says 18446744073709551615 bytes, more than the limit");
}

TEST(SafetensorsTest, WrongByteCount) {
  const std::string json = "{" + Entry("fc1.weight", "F32", "[2,3]", 0, 12) + "}";
  ExpectParseError(WithPrefix(json) + std::string(12, '\0'),
                   std::string("safetensors x.safetensors: tensor 'fc1.weight' has data_offsets [0, 12] (12 bytes) "
                               "but dtype F32 and shape [2, 3] need 24 bytes") +
                       kCorrupt);
}

TEST(SafetensorsTest, OverlapHoleAndUncoveredBytes) {
  const std::string overlap = "{" + Entry("a", "U8", "[4]", 0, 4) + "," + Entry("b", "U8", "[2]", 2, 4) + "}";
  ExpectParseError(WithPrefix(overlap) + "abcd",
                   std::string("safetensors x.safetensors: tensor 'b' (data_offsets [2, 4]) overlaps tensor 'a' "
                               "(data_offsets [0, 4]); tensors must not share bytes") +
                       kCorrupt);
  const std::string same = "{" + Entry("a", "U8", "[2]", 0, 2) + "," + Entry("b", "U8", "[2]", 0, 2) + "}";
  ExpectParseErrorContains(WithPrefix(same) + "ab", "tensor 'b' (data_offsets [0, 2]) overlaps tensor 'a'");
  const std::string inside = "{" + Entry("a", "U8", "[4]", 0, 4) + "," + Entry("e", "U8", "[0]", 2, 2) + "}";
  ExpectParseErrorContains(WithPrefix(inside) + "abcd", "tensor 'e' (data_offsets [2, 2]) overlaps tensor 'a'");

  const std::string hole = "{" + Entry("a", "U8", "[2]", 0, 2) + "," + Entry("b", "U8", "[1]", 3, 4) + "}";
  ExpectParseError(WithPrefix(hole) + "abcd",
                   std::string("safetensors x.safetensors: data section bytes [2, 3) before tensor 'b' belong to "
                               "no tensor; the format requires the tensors to cover the data section without "
                               "holes") +
                       kCorrupt);
  const std::string late_start = "{" + Entry("a", "U8", "[1]", 1, 2) + "}";
  ExpectParseErrorContains(WithPrefix(late_start) + "ab", "data section bytes [0, 1) before tensor 'a'");
  ExpectParseError(WithPrefix("{" + Entry("a", "U8", "[1]", 0, 1) + "}") + "ab",
                   std::string("safetensors x.safetensors: the data section has 2 bytes but the tensors cover only "
                               "1; the last 1 bytes belong to no tensor") +
                       kCorrupt);
  ExpectParseErrorContains(WithPrefix("{}") + "a", "the data section has 1 bytes but the tensors cover only 0");
}

TEST(SafetensorsTest, OffsetsEndingBeforeTheyBeginOrHuge) {
  ExpectParseError(WithPrefix("{" + Entry("a", "U8", "[0]", 4, 2) + "}") + "abcd",
                   std::string("safetensors x.safetensors: tensor 'a' has data_offsets [4, 2], which end before they "
                               "begin") +
                       kCorrupt);
  ExpectParseErrorContains(
      WithPrefix("{" + Entry("a", "U8", "[9223372036854775807]", 0, 9223372036854775807) + "}") + "ab",
      "truncated: tensor 'a' ends at data offset 9223372036854775807 but the data section has only 2 bytes");
}

TEST(SafetensorsTest, UnsupportedDType) {
  ExpectParseError(
      WithPrefix("{" + Entry("mask", "I16", "[1]", 0, 2) + "}") + "ab",
      "safetensors x.safetensors: tensor 'mask' has dtype 'I16', which lockstep does not support "
      "(supported: F32, F64, F16, BF16, I32, I64, U8, I8, BOOL); convert the tensor to one of these before saving",
      absl::StatusCode::kUnimplemented);
  ExpectParseErrorContains(WithPrefix("{" + Entry("x", "f32", "[1]", 0, 4) + "}") + "abcd",
                           "tensor 'x' has dtype 'f32', which lockstep does not support");
}

TEST(SafetensorsTest, ShapeOverflowAndRank) {
  ExpectParseError(WithPrefix("{" + Entry("big", "F32", "[4294967296,4294967296]", 0, 0) + "}"),
                   std::string("safetensors x.safetensors: tensor 'big' has shape [4294967296, 4294967296], whose "
                               "element count overflows") +
                       kCorrupt);
  ExpectParseErrorContains(WithPrefix("{" + Entry("big", "F64", "[4611686018427387904]", 0, 0) + "}"),
                           "tensor 'big' has shape [4611686018427387904], whose byte count overflows");
  std::string rank64 = "[1";
  for (int i = 1; i < 64; ++i) rank64 += ",1";
  ASSERT_TRUE(ParseSafetensors(WithPrefix("{" + Entry("r", "U8", rank64 + "]", 0, 1) + "}") + "a", "r").ok());
  ExpectParseErrorContains(WithPrefix("{" + Entry("r", "U8", rank64 + ",1]", 0, 1) + "}") + "a",
                           "expected ']' after at most 64 values in the shape of tensor 'r'");
}

TEST(SafetensorsTest, DuplicateKeys) {
  const std::string entry = Entry("a", "U8", "[1]", 0, 1);
  ExpectParseError(
      WithPrefix("{" + entry + "," + entry + "}") + "a",
      std::string("safetensors x.safetensors: the header has the key 'a' twice; keys must be unique") + kCorrupt);
  ExpectParseErrorContains(WithPrefix("{\"__metadata__\":{},\"__metadata__\":{}}"),
                           "the header has the key '__metadata__' twice");
  ExpectParseError(WithPrefix("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}"),
                   std::string("safetensors x.safetensors: \"__metadata__\" has the key 'k' twice; keys must be "
                               "unique") +
                       kCorrupt);
  ExpectParseError(WithPrefix("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}") + "a",
                   std::string("safetensors x.safetensors: tensor 'a' has the field 'dtype' twice") + kCorrupt);
  // Keys are compared after unescaping.
  ExpectParseErrorContains(WithPrefix("{" + entry + ",\"\\u0061\":{}}") + "a", "the header has the key 'a' twice");
}

TEST(SafetensorsTest, EntryFields) {
  ExpectParseError(WithPrefix("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}") + "a",
                   std::string("safetensors x.safetensors: tensor 'a' has no 'data_offsets' field; expected exactly "
                               "dtype, shape and data_offsets") +
                       kCorrupt);
  ExpectParseErrorContains(WithPrefix("{\"a\":{}}"), "tensor 'a' has no 'dtype' field");
  ExpectParseError(
      WithPrefix("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"extra\":1}}") + "a",
      std::string("safetensors x.safetensors: tensor 'a' has an unexpected field 'extra'; expected exactly dtype, "
                  "shape and data_offsets") +
          kCorrupt);
  ExpectParseError(WithPrefix("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1]}}") + "a",
                   std::string("safetensors x.safetensors: tensor 'a' has 1 data_offsets; expected two, [begin, "
                               "end]") +
                       kCorrupt);
  ExpectParseErrorContains(WithPrefix("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}") + "a",
                           "expected ']' after at most 2 values in the data_offsets [begin, end] of tensor 'a'");
  ExpectParseErrorContains(WithPrefix("{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}") + "a",
                           "expected a string (the dtype of tensor 'a'), found '8,");
  ExpectParseErrorContains(WithPrefix("{\"a\":[]}"), "expected '{' to start the entry of tensor 'a', found '[]}'");
}

TEST(SafetensorsTest, NumbersMustBePlainNonNegativeIntegers) {
  const auto with_shape = [](const std::string& shape) {
    return WithPrefix("{\"a\":{\"dtype\":\"U8\",\"shape\":" + shape + ",\"data_offsets\":[0,1]}}") + "a";
  };
  ExpectParseError(with_shape("[-1]"),
                   std::string("safetensors x.safetensors: header JSON at byte 28: expected a non-negative integer "
                               "(the shape of tensor 'a'), found '-1],\"data_offset'") +
                       kCorrupt);
  ExpectParseErrorContains(with_shape("[1.0]"),
                           "expected a non-negative integer (the shape of tensor 'a') with no "
                           "fraction or exponent, found '1.0]");
  ExpectParseErrorContains(with_shape("[1e0]"), "with no fraction or exponent");
  ExpectParseErrorContains(with_shape("[01]"), "without leading zeros");
  ExpectParseErrorContains(with_shape("[9223372036854775808]"), "at most 9223372036854775807");
  ExpectParseErrorContains(with_shape("[\"1\"]"), "expected a non-negative integer");
  ExpectParseErrorContains(with_shape("[1,]"), "expected a non-negative integer");
  ExpectParseErrorContains(with_shape("[[1]]"), "expected a non-negative integer");
  ExpectParseErrorContains(with_shape("[true]"), "expected a non-negative integer");
  ExpectParseErrorContains(with_shape("1"), "expected '[' to start the shape of tensor 'a'");
}

TEST(SafetensorsTest, HeaderMustBeAnObjectWithNothingAfterIt) {
  ExpectParseError(WithPrefix("[]"),
                   std::string("safetensors x.safetensors: the header must be a JSON object starting with '{', "
                               "found '[]'") +
                       kCorrupt);
  ExpectParseErrorContains(WithPrefix(" {}"), "must be a JSON object starting with '{', found ' {}'");
  ExpectParseErrorContains(WithPrefix("\"x\""), "must be a JSON object");
  ExpectParseErrorContains(WithPrefix(""), "must be a JSON object starting with '{', found the end of the header");
  ExpectParseError(WithPrefix("{}  x"),
                   std::string("safetensors x.safetensors: unexpected bytes after the header's JSON object at header "
                               "byte 4: 'x' (only whitespace padding may follow)") +
                       kCorrupt);
  ExpectParseErrorContains(WithPrefix("{}{}"), "unexpected bytes after the header's JSON object");
  ExpectParseErrorContains(WithPrefix(std::string("{}\0", 3)),
                           "unexpected bytes after the header's JSON object at header byte 2: "
                           "'\\x00'");
  ExpectParseErrorContains(WithPrefix("{"), "expected a string (a tensor name or \"__metadata__\"), found the end");
  ExpectParseErrorContains(WithPrefix("{,}"), "expected a string");
  ExpectParseErrorContains(WithPrefix("{\"a\" 1}"), "expected ':' after the key 'a'");
  ExpectParseErrorContains(WithPrefix("{" + Entry("a", "U8", "[0]", 0, 0) + ",}"), "expected a string");
  ExpectParseErrorContains(WithPrefix("{" + Entry("a", "U8", "[0]", 0, 0)), "expected ',' or '}' after a header entry");
}

TEST(SafetensorsTest, MetadataMustMapStringsToStrings) {
  ExpectParseError(WithPrefix("{\"__metadata__\":{\"step\":12}}"),
                   std::string("safetensors x.safetensors: header JSON at byte 24: expected a string (the value of "
                               "\"__metadata__\" key 'step'; metadata values must be strings), found '12}}'") +
                       kCorrupt);
  ExpectParseErrorContains(WithPrefix("{\"__metadata__\":{\"a\":{\"b\":\"c\"}}}"), "metadata values must be strings");
  ExpectParseErrorContains(WithPrefix("{\"__metadata__\":[]}"), "expected '{' to start \"__metadata__\"");
  ExpectParseErrorContains(WithPrefix("{\"__metadata__\":\"x\"}"), "expected '{' to start \"__metadata__\"");
}

TEST(SafetensorsTest, StringsAreStrictJsonAndUtf8) {
  const auto named = [](const std::string& quoted_name) {
    return WithPrefix("{" + quoted_name + ":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}");
  };
  ASSERT_TRUE(ParseSafetensors(named("\"ok\""), "n").ok());
  ExpectParseErrorContains(named("\"\\ud83d\""), "a \\u low surrogate to complete the surrogate pair");
  ExpectParseErrorContains(named("\"\\ud83d\\u0041\""), "a \\u low surrogate (DC00 to DFFF)");
  ExpectParseErrorContains(named("\"\\ude00\""), "a character, not a lone low surrogate, found '\\ude00");
  ExpectParseErrorContains(named("\"\\u12g4\""), "four hex digits after \\u");
  ExpectParseErrorContains(named("\"\\x41\""), "after a backslash");
  ExpectParseErrorContains(named("\"a\tb\""), "control characters must be escaped");
  ExpectParseErrorContains(named("\"\xff\""), "expected valid UTF-8");
  ExpectParseErrorContains(named("\"\xc0\xaf\""), "expected valid UTF-8");          // overlong '/'
  ExpectParseErrorContains(named("\"\xed\xa0\x80\""), "expected valid UTF-8");      // encoded surrogate
  ExpectParseErrorContains(named("\"\xf4\x90\x80\x80\""), "expected valid UTF-8");  // above U+10FFFF
  ExpectParseErrorContains(named("\"\xe6\x97\""), "expected valid UTF-8");          // cut sequence
  ExpectParseErrorContains(named("'a'"), "expected a string");
  ExpectParseErrorContains(WithPrefix("{\"abc"), "expected the closing '\"' of a string");
}

// ---- serialization refusals ---------------------------------------------------

TEST(SafetensorsTest, SerializeRefusesBadNamesAndTensors) {
  const Tensor t = *Tensor::FromVector<float>({1.0f});
  const auto error = [](const Named& tensors, const std::map<std::string, std::string>& metadata = {}) {
    const absl::StatusOr<std::string> r = SerializeSafetensors(tensors, metadata);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  EXPECT_EQ(error({{"a", t}, {"b", t}, {"a", t}}),
            "SerializeSafetensors: the name 'a' is used by tensors 0 and 2; names must be unique");
  EXPECT_EQ(error({{"", t}}), "SerializeSafetensors: tensor 0 has an empty name; give every tensor a unique name");
  EXPECT_EQ(error({{"a", t}, {"__metadata__", t}}),
            "SerializeSafetensors: tensor 1 is named '__metadata__'; names starting with \"__\" are reserved "
            "for the "
            "header (\"__metadata__\"); rename it");
  EXPECT_EQ(error({{"w", Tensor()}}),
            "SerializeSafetensors: tensor 'w' is undefined (a default-constructed Tensor); pass one with data");
  EXPECT_EQ(error({{"bad\xff", t}}),
            "SerializeSafetensors: tensor 0 has the name 'bad\\xff', which is not valid UTF-8 (the header is "
            "JSON)");
  EXPECT_EQ(error({{"a", t}}, {{"k", "\xc3"}}),
            "SerializeSafetensors: metadata entry 'k' -> '\\xc3' is not valid UTF-8 (the header is JSON)");
}

// ---- files --------------------------------------------------------------------

TEST(SafetensorsTest, WriteAndReadFile) {
  const std::string path = TempPath("model.safetensors");
  const Named tensors = {{"fc.weight", *Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                         {"fc.bias", *Tensor::FromVector<double>({0.5, -0.5})},
                         {"step", FromBytes(DType::kI64, {}, std::string("\x2a\0\0\0\0\0\0\0", 8))}};
  ASSERT_TRUE(WriteSafetensorsFile(path, tensors, {{"epoch", "3"}}).ok());
  EXPECT_EQ(*ReadFileToString(path, 1 << 20), *SerializeSafetensors(tensors, {{"epoch", "3"}}));

  const absl::StatusOr<SafetensorsFile> file = ReadSafetensorsFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{{"epoch", "3"}}));
  ASSERT_EQ(file->tensors.size(), 3u);
  EXPECT_EQ(file->tensors[0].first, "fc.weight");
  EXPECT_EQ(file->tensors[0].second.shape(), (Shape{2, 3}));
  EXPECT_EQ(*file->tensors[0].second.ToVector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(*file->tensors[1].second.ToVector<double>(), (std::vector<double>{0.5, -0.5}));
  EXPECT_EQ(*file->tensors[2].second.ToVector<int64_t>(), std::vector<int64_t>{42});
}

TEST(SafetensorsTest, WriteFileReportsSerializationErrorsWithThePath) {
  const absl::Status s = WriteSafetensorsFile(TempPath("never.safetensors"), Named{{"", Tensor()}});
  EXPECT_EQ(s.message(), absl::StrCat("WriteSafetensorsFile(", TempPath("never.safetensors"),
                                      "): SerializeSafetensors: tensor 0 has an empty name; give every tensor a "
                                      "unique name"));
}

TEST(SafetensorsTest, ReadFileSaysTruncatedAtEveryCut) {
  const std::string full = SmallValidFile();
  const std::string path = TempPath("cut.safetensors");
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE(n);
    ASSERT_TRUE(WriteFileAtomically(path, full.substr(0, n)).ok());
    const absl::StatusOr<SafetensorsFile> r = ReadSafetensorsFile(path);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(r.status().message().find(absl::StrCat("safetensors ", path, ": truncated")), absl::string_view::npos)
        << r.status();
  }
  ASSERT_TRUE(WriteFileAtomically(path, full).ok());
  EXPECT_TRUE(ReadSafetensorsFile(path).ok());
  // Same validation as ParseSafetensors: one extra byte is not covered.
  ASSERT_TRUE(WriteFileAtomically(path, full + "!").ok());
  EXPECT_NE(ReadSafetensorsFile(path).status().message().find("the last 1 bytes belong to no tensor"),
            absl::string_view::npos);
}

TEST(SafetensorsTest, ReadMissingFileOrDirectory) {
  const std::string path = TempPath("missing.safetensors");
  const absl::StatusOr<SafetensorsFile> r = ReadSafetensorsFile(path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("safetensors ", path, ": cannot open: No such file or directory; check the path"));
  const absl::StatusOr<SafetensorsFile> dir = ReadSafetensorsFile(TempPath(""));
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace lockstep
