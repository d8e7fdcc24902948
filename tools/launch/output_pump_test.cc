#include "tools/launch/output_pump.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

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

}  // namespace
}  // namespace launch
}  // namespace lockstep
