#include "tools/launch/output_pump.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace launch {
namespace {

void WriteFully(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // A closed console is not the workers' problem.
    done += static_cast<size_t>(n);
  }
}

}  // namespace

OutputPump::OutputPump(size_t tail_lines, int stdout_fd, int stderr_fd)
    : tail_lines_(tail_lines), stdout_fd_(stdout_fd), stderr_fd_(stderr_fd), wake_(eventfd(0, EFD_CLOEXEC)) {}

OutputPump::~OutputPump() { Finish(SteadyClock::now()); }

void OutputPump::Add(OutputStream stream) {
  Stream s;
  s.out = std::move(stream);
  streams_.push_back(std::move(s));
}

void OutputPump::Start() {
  thread_ = std::thread([this] { Run(); });
}

void OutputPump::Finish(Deadline deadline) {
  if (!thread_.joinable()) return;
  finish_deadline_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count());
  finishing_.store(true);
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  thread_.join();
}

void OutputPump::WaitEof(int local_rank, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  eof_cv_.wait_until(lock, deadline, [&] { return stopped_ || eofs_[local_rank] >= 2; });
}

std::string OutputPump::Tail(int local_rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tails_.find(local_rank);
  if (it == tails_.end()) return "";
  std::string text;
  for (const std::string& line : it->second) text += line;
  return text;
}

void OutputPump::Emit(Stream& s, const std::string& line) {
  if (s.out.to_console) WriteFully(s.out.is_stderr ? stderr_fd_ : stdout_fd_, absl::StrCat("[", s.out.rank, "]:", line));
  if (s.out.log_file.valid()) WriteFully(s.out.log_file.get(), line);
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<std::string>& tail = tails_[s.out.local_rank];
  tail.push_back(line);
  while (tail.size() > tail_lines_) tail.pop_front();
}

void OutputPump::Run() {
  std::vector<pollfd> fds;
  std::vector<Stream*> owners;
  char buffer[65536];
  for (;;) {
    fds.clear();
    owners.clear();
    fds.push_back(pollfd{wake_.get(), POLLIN, 0});
    for (Stream& s : streams_) {
      if (s.eof) continue;
      fds.push_back(pollfd{s.out.read_end.get(), POLLIN, 0});
      owners.push_back(&s);
    }
    if (owners.empty()) break;
    int timeout = -1;
    if (finishing_.load()) {
      const Deadline deadline{std::chrono::duration_cast<Deadline::duration>(
          std::chrono::nanoseconds(finish_deadline_ns_.load()))};
      timeout = PollTimeoutMs(deadline);  // 0 once past: drain what is there, then stop.
    }
    const int ready = ::poll(fds.data(), fds.size(), timeout);
    if (ready < 0 && errno != EINTR) break;
    bool any_data = false;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Stream& s = *owners[i - 1];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        s.eof = true;
        if (!s.partial.empty()) Emit(s, std::exchange(s.partial, "") + "\n");
        std::lock_guard<std::mutex> lock(mu_);
        ++eofs_[s.out.local_rank];
        eof_cv_.notify_all();
        continue;
      }
      any_data = true;
      s.partial.append(buffer, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
        Emit(s, s.partial.substr(start, nl + 1 - start));
      }
      s.partial.erase(0, start);
    }
    if (fds[0].revents != 0) {
      uint64_t value;
      (void)!::read(wake_.get(), &value, sizeof(value));
    }
    if (finishing_.load() && !any_data) {
      const Deadline deadline{std::chrono::duration_cast<Deadline::duration>(
          std::chrono::nanoseconds(finish_deadline_ns_.load()))};
      if (SteadyClock::now() >= deadline) break;
    }
  }
  for (Stream& s : streams_) {
    if (!s.partial.empty()) Emit(s, std::exchange(s.partial, "") + "\n");
  }
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  eof_cv_.notify_all();
}

}  // namespace launch
}  // namespace lockstep
