#include "tools/launch/output_pump.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace launch {
namespace {

struct Pipe {
  Fd read, write;
  Pipe() {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    read = Fd(p[0]);
    write = Fd(p[1]);
  }
};

void Put(const Fd& fd, const std::string& text) {
  ASSERT_EQ(::write(fd.get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

std::string ReadAll(const Fd& fd) {
  std::string text;
  char buffer[256];
  ssize_t n;
  while ((n = ::read(fd.get(), buffer, sizeof(buffer))) > 0) text.append(buffer, static_cast<size_t>(n));
  return text;
}

// A temporary file, for a console or a log that the test reads only at the end
// (a pipe would fill and block the pump).
Fd TempFile() {
  std::string path = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/pump.XXXXXX";
  Fd fd(::mkstemp(path.data()));
  EXPECT_TRUE(fd.valid());
  ::unlink(path.c_str());
  return fd;
}

std::string ReadFile(const Fd& fd) {
  std::string text;
  char buffer[65536];
  ssize_t n;
  for (off_t at = 0; (n = ::pread(fd.get(), buffer, sizeof(buffer), at)) > 0; at += n) {
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

using Parts = std::vector<std::pair<std::string, bool>>;  // (text, continues)

Parts Split(const std::vector<std::string>& reads, bool flush = true) {
  Parts parts;
  LineSplitter splitter;
  auto sink = [&](absl::string_view text, bool continues) { parts.emplace_back(std::string(text), continues); };
  for (const std::string& r : reads) {
    splitter.Feed(r, sink);
    EXPECT_LE(splitter.pending_size(), kMaxLinePart);
  }
  if (flush) splitter.Flush(sink);
  return parts;
}

// One full part.
std::string Cap() { return std::string(kMaxLinePart, 'x'); }

TEST(LineSplitterTest, ShortLinesPassWholeAndAPendingLineWaits) {
  EXPECT_EQ(Split({"a\nbb\n", "\n", "c"}, /*flush=*/false), (Parts{{"a", false}, {"bb", false}, {"", false}}));
  EXPECT_EQ(Split({"a\nbb\n", "\n", "c"}), (Parts{{"a", false}, {"bb", false}, {"", false}, {"c", false}}));
  EXPECT_EQ(Split({"tw", "o\n"}), (Parts{{"two", false}}));
}

TEST(LineSplitterTest, ALineOfExactlyTheCapIsOneLine) {
  EXPECT_EQ(Split({Cap() + "\n"}), (Parts{{Cap(), false}}));
  // The newline comes in the next read: still one line, no empty one after it.
  EXPECT_EQ(Split({Cap(), "\n"}), (Parts{{Cap(), false}}));
  EXPECT_EQ(Split({Cap(), "\nnext\n"}), (Parts{{Cap(), false}, {"next", false}}));
  // At EOF without a newline.
  EXPECT_EQ(Split({Cap()}), (Parts{{Cap(), false}}));
  EXPECT_EQ(Split({Cap()}, /*flush=*/false), Parts{});  // It waits for the byte after it.
}

TEST(LineSplitterTest, ALongerLineIsCutIntoParts) {
  EXPECT_EQ(Split({Cap() + "y\n"}), (Parts{{Cap(), true}, {"y", false}}));
  EXPECT_EQ(Split({Cap(), "y", "\n"}), (Parts{{Cap(), true}, {"y", false}}));
  EXPECT_EQ(Split({Cap() + Cap() + "\n"}), (Parts{{Cap(), true}, {Cap(), false}}));
  EXPECT_EQ(Split({Cap() + Cap()}), (Parts{{Cap(), true}, {Cap(), false}}));
  EXPECT_EQ(Split({"ab\n" + Cap() + "z"}), (Parts{{"ab", false}, {Cap(), true}, {"z", false}}));
}

TEST(LineSplitterTest, PartsDoNotDependOnHowTheBytesWereRead) {
  // Lines at the cap's boundaries and of random lengths up to 3 caps, of
  // varied bytes, read in random pieces.
  std::mt19937 rng(7);
  std::vector<size_t> lengths = {
      0, 1, kMaxLinePart - 1, kMaxLinePart, kMaxLinePart + 1, 2 * kMaxLinePart, 2 * kMaxLinePart + 1};
  for (int i = 0; i < 30; ++i) lengths.push_back(rng() % (3 * kMaxLinePart + 3));
  std::string input;
  for (size_t line = 0; line < lengths.size(); ++line) {
    const size_t length = lengths[line];
    for (size_t i = 0; i < length; ++i) input.push_back(static_cast<char>('a' + (i + line) % 26));
    if (line % 7 != 6) input.push_back('\n');  // Some lines run on into the next.
  }
  const Parts whole = Split({input});
  std::vector<std::string> reads;
  for (size_t at = 0; at < input.size();) {
    const size_t n = std::min<size_t>(input.size() - at, 1 + rng() % (2 * kMaxLinePart));
    reads.push_back(input.substr(at, n));
    at += n;
  }
  EXPECT_TRUE(Split(reads) == whole);  // (EXPECT_EQ would print megabytes.)
  std::string rebuilt;
  for (const auto& [text, continues] : whole) {
    EXPECT_LE(text.size(), kMaxLinePart);
    if (continues) {
      EXPECT_EQ(text.size(), kMaxLinePart);
    }
    absl::StrAppend(&rebuilt, text, continues ? "" : "\n");
  }
  if (input.back() != '\n') input.push_back('\n');  // The last line, completed at EOF.
  EXPECT_EQ(rebuilt, input);
}

TEST(OutputPumpTest, PrefixesLinesKeepsTailsAndWritesLogs) {
  Pipe console_out, console_err, worker0_out, worker0_err, worker1_out, log;
  {
    OutputPump pump(/*tail_lines=*/2, console_out.write.get(), console_err.write.get());
    pump.Add({std::move(worker0_out.read), 4, 0, false, true, Fd()});
    pump.Add({std::move(worker0_err.read), 4, 0, true, true, Fd()});
    // Redirected: to the log file only.
    pump.Add({std::move(worker1_out.read), 5, 1, false, false, std::move(log.write)});
    pump.Start();
    Put(worker0_out.write, "one\ntw");
    Put(worker0_out.write, "o\nthree\npartial");
    Put(worker0_err.write, "oops\n");
    Put(worker1_out.write, "quiet\n");
    worker0_out.write.Reset();
    worker0_err.write.Reset();
    pump.WaitEof(0, DeadlineIn(std::chrono::milliseconds(30000)));
    worker1_out.write.Reset();
    pump.Finish(DeadlineIn(std::chrono::milliseconds(30000)));
    // The last two lines of local rank 0, stdout and stderr as they came
    // (the two pipes race; "partial" is completed at EOF).
    const std::string tail = pump.Tail(0);
    EXPECT_TRUE(tail == "three\npartial\n" || tail == "oops\npartial\n" || tail == "partial\noops\n") << tail;
    EXPECT_EQ(pump.Tail(1), "quiet\n");
  }
  console_out.write.Reset();
  console_err.write.Reset();
  EXPECT_EQ(ReadAll(console_out.read), "[4]:one\n[4]:two\n[4]:three\n[4]:partial\n");
  EXPECT_EQ(ReadAll(console_err.read), "[4]:oops\n");
  EXPECT_EQ(ReadAll(log.read), "quiet\n");
}

TEST(OutputPumpTest, FinishGivesUpOnAPipeThatStaysOpen) {
  Pipe console, worker;
  OutputPump pump(20, console.write.get(), console.write.get());
  pump.Add({std::move(worker.read), 0, 0, false, true, Fd()});
  pump.Start();
  Put(worker.write, "still here\n");
  pump.WaitEof(0, DeadlineIn(std::chrono::milliseconds(50)));  // No EOF comes: returns at the deadline.
  pump.Finish(DeadlineIn(std::chrono::milliseconds(50)));      // A descendant holds the write end.
  EXPECT_EQ(pump.Tail(0), "still here\n");
}

// A line without a newline for 1 MiB (the attack: the agent must not hold or
// rescan it whole), then a short one and an unterminated one, on a stream that
// goes both to the console and to a log (--tee).
TEST(OutputPumpTest, ALongLineGoesOutInPartsAndWholeToTheLog) {
  std::string line;
  for (size_t i = 0; i < (1u << 20); ++i) line.push_back(static_cast<char>('a' + i % 23));  // Parts differ.
  const std::string input = line + "tail\nend";
  Fd console = TempFile(), log = TempFile();
  Pipe worker;
  std::string tail;
  {
    OutputPump pump(/*tail_lines=*/3, console.get(), console.get());
    Fd log_copy(::dup(log.get()));
    pump.Add({std::move(worker.read), 3, 0, false, true, std::move(log_copy)});
    pump.Start();
    Put(worker.write, line);
    Put(worker.write, "tail\n");
    Put(worker.write, "end");
    worker.write.Reset();
    pump.Finish(DeadlineIn(std::chrono::milliseconds(30000)));
    tail = pump.Tail(0);
  }
  // The log: the bytes as written, no prefix, no marker, no newline added.
  EXPECT_TRUE(ReadFile(log) == input) << "log differs: " << ReadFile(log).size() << " bytes";

  const std::string text = ReadFile(console);
  ASSERT_FALSE(text.empty());
  ASSERT_EQ(text.back(), '\n');
  std::vector<std::string> lines = absl::StrSplit(text.substr(0, text.size() - 1), '\n');
  ASSERT_EQ(lines.size(), (1u << 20) / kMaxLinePart + 2);  // 16 parts, "tail", "end".
  std::string rebuilt;
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::string_view l = lines[i];
    ASSERT_TRUE(absl::ConsumePrefix(&l, "[3]:")) << "line " << i;
    const bool continues = absl::ConsumeSuffix(&l, kLineContinuesMarker);
    EXPECT_EQ(continues, i < lines.size() - 2) << "line " << i;
    EXPECT_LE(l.size(), kMaxLinePart) << "line " << i;
    absl::StrAppend(&rebuilt, l, continues ? "" : "\n");
  }
  EXPECT_TRUE(rebuilt == input + "\n") << "console differs";  // "end" is completed at EOF.
  EXPECT_EQ(lines[lines.size() - 2], "[3]:tail");

  // The tail: the last 3 console lines, each kept to its first
  // kMaxTailLineBytes (it goes into the failure record and the summary).
  const std::string part = line.substr(line.size() - kMaxLinePart);
  const std::string kept = absl::StrCat(part, kLineContinuesMarker).substr(0, kMaxTailLineBytes);
  const size_t cut = kMaxLinePart + kLineContinuesMarker.size() - kMaxTailLineBytes;
  EXPECT_LE(tail.size(), 3 * (kMaxTailLineBytes + 64));
  EXPECT_EQ(tail,
            absl::StrCat(kept, " [lockstep-run: ", cut, " more bytes of this line not kept]\n", "tail\n", "end\n"));
}

}  // namespace
}  // namespace launch
}  // namespace lockstep
