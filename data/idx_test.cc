#include "data/idx.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/idx_dataset.h"
#include "data/testing/idx_bytes.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using testing::IdxHeader;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string WritePlain(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string WriteGz(const std::string& name, const std::string& bytes) {
  const std::string path = TempPath(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void ExpectError(const absl::StatusOr<IdxArray>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(r.status().message().find(needle), absl::string_view::npos) << r.status();
}

TEST(IdxTest, ParsesEveryTypeInHostOrder) {
  const IdxArray u8 = *ParseIdx(IdxHeader(0x08, {2, 3}) + "abcdef", "u8");
  EXPECT_EQ(u8.dims, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::string(u8.data.begin(), u8.data.end()), "abcdef");
  const IdxArray i32 = *ParseIdx(IdxHeader(0x0C, {2}) + std::string("\x00\x00\x01\x02\xff\xff\xff\xfe", 8), "i32");
  int32_t v[2];
  std::memcpy(v, i32.data.data(), 8);
  EXPECT_EQ(v[0], 0x0102);
  EXPECT_EQ(v[1], -2);
  const IdxArray f32 = *ParseIdx(IdxHeader(0x0D, {1}) + std::string("\x3f\xc0\x00\x00", 4), "f32");
  float f;
  std::memcpy(&f, f32.data.data(), 4);
  EXPECT_EQ(f, 1.5f);
  const IdxArray f64 = *ParseIdx(IdxHeader(0x0E, {1}) + std::string("\xc0\x04\x00\x00\x00\x00\x00\x00", 8), "f64");
  double d;
  std::memcpy(&d, f64.data.data(), 8);
  EXPECT_EQ(d, -2.5);
  EXPECT_EQ(ParseIdx(IdxHeader(0x0B, {0, 5}), "empty")->numel(), 0);
}

TEST(IdxTest, CorruptHeadersAreClearErrors) {
  ExpectError(ParseIdx("", "x"), "truncated header: 0 bytes");
  ExpectError(ParseIdx(std::string("\x00\x00\x08", 3), "x"), "truncated header");
  ExpectError(ParseIdx(std::string("\x01\x00\x08\x01\x00\x00\x00\x00", 8), "x"), "bad magic");
  ExpectError(ParseIdx(IdxHeader(0x07, {1}) + "a", "x"), "unknown element type code 0x07");
  ExpectError(ParseIdx(IdxHeader(0x08, {}), "x"), "dimension count 0");
  ExpectError(ParseIdx(IdxHeader(0x08, std::vector<uint32_t>(17, 1)) + "a", "x"), "dimension count 17");
  ExpectError(ParseIdx(IdxHeader(0x08, {2, 2}).substr(0, 10), "x"), "2 dimensions need 12 header bytes");
  ExpectError(ParseIdx(IdxHeader(0x08, {0xffffffffu, 0xffffffffu}), "x"), "exceed the limit");
  ExpectError(ParseIdx(IdxHeader(0x0E, {1u << 28}), "x"), "exceed the limit");
}

TEST(IdxTest, PayloadMustMatchTheHeaderExactly) {
  ExpectError(ParseIdx(IdxHeader(0x08, {2, 3}) + "abcde", "short.idx"),
              "IDX file 'short.idx': truncated: the header promises 6 bytes of data, only 5 are present");
  ExpectError(ParseIdx(IdxHeader(0x08, {2, 3}) + "abcdefg", "long.idx"), "1 unexpected bytes after");
  ExpectError(ParseIdx(IdxHeader(0x0C, {2}) + "1234567", "x"), "promises 8 bytes");
}

TEST(IdxTest, ReadsPlainAndGzipFiles) {
  const std::string bytes = IdxHeader(0x08, {4, 2, 2}) + std::string(16, '\x05');
  const IdxArray plain = *ReadIdxFile(WritePlain("a.idx", bytes));
  const IdxArray gz = *ReadIdxFile(WriteGz("a.idx.gz", bytes));
  EXPECT_EQ(plain.dims, (std::vector<int64_t>{4, 2, 2}));
  EXPECT_EQ(plain.data, gz.data);
  EXPECT_EQ(gz.dims, plain.dims);
}

TEST(IdxTest, TruncatedOrCorruptFilesAreErrorsNamingTheFile) {
  const std::string bytes = IdxHeader(0x08, {1000}) + std::string(1000, '\x11');
  const std::string truncated = WritePlain("t.idx", bytes.substr(0, 500));
  ExpectError(ReadIdxFile(truncated), truncated + "': truncated");

  const std::string gz = ReadAll(WriteGz("full.gz", bytes));
  const std::string cut = WritePlain("cut.gz", gz.substr(0, gz.size() / 2));
  absl::StatusOr<IdxArray> r = ReadIdxFile(cut);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(cut), absl::string_view::npos) << r.status();

  std::string bad = gz;
  bad[bad.size() / 2] ^= 0x55;  // Corrupt the deflate stream.
  bad[bad.size() / 2 + 1] ^= 0x33;
  const std::string corrupt = WritePlain("corrupt.gz", bad);
  r = ReadIdxFile(corrupt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(corrupt), absl::string_view::npos) << r.status();

  r = ReadIdxFile(TempPath("does-not-exist.idx"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("does-not-exist.idx': cannot open"), absl::string_view::npos);
}

TEST(IdxTest, DecompressedSizeIsCapped) {
  const std::string bytes = IdxHeader(0x08, {1 << 20}) + std::string(1 << 20, '\0');
  const std::string path = WriteGz("bomb.gz", bytes);
  ExpectError(ReadIdxFile(path, /*max_bytes=*/1 << 16), "refusing to read further");
  EXPECT_TRUE(ReadIdxFile(path).ok());
}

// A gzip whose stream is cut after `keep` compressed bytes: reading past
// what survives is an error about the stream, so an error about the header
// shows that the reader stopped before.
std::string CutGz(const std::string& name, const std::string& bytes, size_t keep) {
  const std::string full = ReadAll(WriteGz(name + ".full", bytes));
  EXPECT_GT(full.size(), keep);
  return WritePlain(name, full.substr(0, keep));
}

// A tiny header claiming far more than the limit is refused after the header:
// nothing of the (here 8 MiB, cut short) stream behind it is inflated.
TEST(IdxTest, GzipBombIsRefusedAtTheHeader) {
  const std::string bytes = IdxHeader(0x08, {1u << 15, 1u << 15}) + std::string(8 << 20, '\0');
  const std::string path = CutGz("bomb-header.gz", bytes, 2000);
  const absl::StatusOr<IdxArray> r = ReadIdxFile(path, /*max_bytes=*/1 << 20);
  ExpectError(r,
              absl::StrCat("IDX file '", path, "': dimensions [32768, 32768] of u8 exceed the limit of 1048576 bytes"));
  ExpectError(r, "read only the 12-byte header, refusing to read further");
  // Within the default limit the same header is accepted and the cut stream is the error.
  ExpectError(ReadIdxFile(path), "unexpected end of file");
}

// Small dims, a stream that inflates to far more: reading stops one byte
// past what the header describes and reports trailing data (the cut-short
// stream behind it is never reached).
TEST(IdxTest, StreamLongerThanTheHeaderSaysStopsAfterOneByte) {
  const std::string bytes = IdxHeader(0x08, {4, 4}) + std::string(8 << 20, '\x01');
  const std::string path = CutGz("bomb-trailing.gz", bytes, 4000);
  ExpectError(ReadIdxFile(path),
              absl::StrCat("IDX file '", path,
                           "': trailing data: the stream holds more than the 16 bytes of data that dimensions [4, 4] "
                           "of u8 describe (limit 1073741824); stopped reading there, after 29 bytes"));
  // The same for a plain (uncompressed) file.
  ExpectError(ReadIdxFile(WritePlain("trailing.idx", IdxHeader(0x08, {2}) + "abc")), "trailing data");
  EXPECT_TRUE(ReadIdxFile(WritePlain("exact.idx", IdxHeader(0x08, {2}) + "ab")).ok());
}

// Writes `header` then `payload_bytes` of a repeating pattern, 1 MiB at a
// time, so that the writer itself never holds the payload (the children
// below inherit this process's resident memory).
std::string WriteLarge(const std::string& name, const std::string& header, int64_t payload_bytes, bool gzip) {
  const std::string path = TempPath(name);
  std::string chunk(1 << 20, '\0');
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>(i * 7 % 251);
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb1");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, header.data(), static_cast<unsigned>(header.size())), static_cast<int>(header.size()));
    for (int64_t left = payload_bytes; left > 0; left -= static_cast<int64_t>(chunk.size())) {
      const unsigned n = static_cast<unsigned>(std::min<int64_t>(left, static_cast<int64_t>(chunk.size())));
      EXPECT_EQ(gzwrite(f, chunk.data(), n), static_cast<int>(n));
    }
    EXPECT_EQ(gzclose(f), Z_OK);
  } else {
    std::ofstream out(path, std::ios::binary);
    out << header;
    for (int64_t left = payload_bytes; left > 0; left -= static_cast<int64_t>(chunk.size())) {
      out.write(chunk.data(), std::min<int64_t>(left, static_cast<int64_t>(chunk.size())));
    }
    EXPECT_TRUE(out.good());
  }
  return path;
}

struct ChildRead {
  int64_t before_kib = 0;  // ru_maxrss before reading (what fork inherited)
  int64_t peak_kib = 0;    // ru_maxrss after
  bool ok = false;
  int64_t bytes = 0;        // data.size() when ok
  bool pattern_ok = false;  // the first and last bytes are WriteLarge's
  char message[512] = {};   // the error when not ok
};

int64_t MaxRssKib() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;  // KiB on Linux
}

// ReadIdxFile(path) in a forked child, so that its peak RSS is the read's
// alone (plus what the child inherited, measured before the read).
ChildRead ReadInChild(const std::string& path) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  EXPECT_GE(child, 0);
  if (child == 0) {
    ::alarm(60);  // Deadline: a hung child dies by SIGALRM and fails the test.
    close(fds[0]);
    ChildRead r;
    r.before_kib = MaxRssKib();
    {
      absl::StatusOr<IdxArray> a = ReadIdxFile(path);
      r.peak_kib = MaxRssKib();
      r.ok = a.ok();
      if (a.ok()) {
        r.bytes = static_cast<int64_t>(a->data.size());
        const size_t last = a->data.size() - 1;
        r.pattern_ok =
            !a->data.empty() && a->data[0] == 0 && a->data[last] == static_cast<uint8_t>(last % (1 << 20) * 7 % 251);
      } else {
        std::snprintf(r.message, sizeof(r.message), "%s", std::string(a.status().message()).c_str());
      }
    }
    const bool written = write(fds[1], &r, sizeof(r)) == static_cast<ssize_t>(sizeof(r));
    std::_Exit(written ? 0 : 1);
  }
  close(fds[1]);
  ChildRead r;
  size_t got = 0;
  while (got < sizeof(r)) {
    const ssize_t n = read(fds[0], reinterpret_cast<char*>(&r) + got, sizeof(r) - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the reader child failed, status " << status;
  EXPECT_EQ(got, sizeof(r)) << "the reader child reported nothing";
  return r;
}

constexpr int64_t kMiB = 1 << 20;
// The read's own buffers besides the payload (zlib's window, a chunk).
constexpr int64_t kAllowanceKib = 16 << 10;

// What an allocation of `bytes` adds to the RSS besides the pages used:
// AddressSanitizer writes a shadow byte for every 8 bytes allocated.
int64_t ShadowKib(int64_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  return bytes / 8 >> 10;
#else
  return 0;
#endif
}

// The array is read straight into its final buffer: peak memory is what
// the header declares, not twice that (a whole-file buffer, then a copy).
TEST(IdxTest, PeakMemoryIsTheDeclaredSize) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer's shadow memory makes the RSS incomparable";
#endif
  const int64_t declared = 256 * kMiB;
  const std::string header = IdxHeader(0x08, {256, 1024, 1024});
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string path = WriteLarge(gzip ? "large.idx.gz" : "large.idx", header, declared, gzip);
    const ChildRead r = ReadInChild(path);
    std::remove(path.c_str());
    ASSERT_TRUE(r.ok) << r.message;
    EXPECT_EQ(r.bytes, declared);
    EXPECT_TRUE(r.pattern_ok);
    std::printf("%s: peak RSS %lld KiB, %lld KiB before the read, %lld KiB declared\n", gzip ? "gzip" : "plain",
                static_cast<long long>(r.peak_kib), static_cast<long long>(r.before_kib),
                static_cast<long long>(declared >> 10));
    EXPECT_LE(r.peak_kib, r.before_kib + (declared >> 10) + kAllowanceKib + ShadowKib(declared))
        << "peak RSS " << r.peak_kib << " KiB for " << (declared >> 10) << " KiB declared, " << r.before_kib
        << " KiB before the read";
  }
}

// A 1 MiB file whose header declares 1 GiB (the default limit): refused,
// naming the file, what was declared and what came, without allocating
// anything near 1 GiB.
TEST(IdxTest, FileShorterThanItsHeaderIsRefusedCheaply) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer's shadow memory makes the RSS incomparable";
#endif
  const std::string header = IdxHeader(0x08, {1024, 1024, 1024});
  for (bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string path = WriteLarge(gzip ? "short.idx.gz" : "short.idx", header, kMiB, gzip);
    const ChildRead r = ReadInChild(path);
    ASSERT_FALSE(r.ok);
    const std::string message = r.message;
    EXPECT_NE(message.find(absl::StrCat("IDX file '", path,
                                        "': truncated: the header promises 1073741824 bytes of data, "
                                        "only 1048576 are present")),
              std::string::npos)
        << message;
    std::printf("%s: peak RSS %lld KiB, %lld KiB before the read\n", gzip ? "gzip" : "plain",
                static_cast<long long>(r.peak_kib), static_cast<long long>(r.before_kib));
    // The gzip reader allocates the declared size once (it cannot know the
    // length before inflating) but touches only what the stream fills.
    EXPECT_LE(r.peak_kib, r.before_kib + kAllowanceKib + (kMiB >> 10) + (gzip ? ShadowKib(1 << 30) : 0));
  }
}

TEST(IdxDatasetTest, ValidatesImagesAgainstLabels) {
  const std::string images = IdxHeader(0x08, {3, 2, 2}) + std::string(12, '\xff');
  const std::string labels = IdxHeader(0x08, {3}) + std::string("\x00\x01\x02", 3);
  auto ok = IdxDataset::Load(WritePlain("i.idx", images), WritePlain("l.idx", labels), 3);
  ASSERT_TRUE(ok.ok()) << ok.status();
  std::vector<float> x(4);
  int64_t y;
  ASSERT_TRUE((*ok)->Get(2, absl::MakeSpan(x), &y).ok());
  EXPECT_EQ(y, 2);
  EXPECT_EQ(x, std::vector<float>(4, 1.0f));
  EXPECT_FALSE((*ok)->Get(3, absl::MakeSpan(x), &y).ok());
  EXPECT_FALSE((*ok)->Get(0, absl::MakeSpan(x).subspan(1), &y).ok());

  auto count = IdxDataset::Load(WritePlain("i.idx", images),
                                WritePlain("l2.idx", IdxHeader(0x08, {2}) + std::string("\x00\x01", 2)), 3);
  EXPECT_NE(count.status().message().find("3 images but 2 labels"), absl::string_view::npos) << count.status();
  auto range = IdxDataset::Load(WritePlain("i.idx", images), WritePlain("l.idx", labels), 2);
  EXPECT_NE(range.status().message().find("label 2 is 2, outside [0, 2)"), absl::string_view::npos) << range.status();
  auto dims = IdxDataset::Load(WritePlain("l.idx", labels), WritePlain("l.idx", labels), 3);
  EXPECT_NE(dims.status().message().find("images must be u8 with 3 dimensions"), absl::string_view::npos);
  auto missing = LoadFashionMnist(TempPath("no-such-dir"), Split::kTrain);
  EXPECT_NE(missing.status().message().find("dataset-fashion-mnist"), absl::string_view::npos);
}

}  // namespace
}  // namespace lockstep
