#include "tools/launch/output_pump.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace launch {
namespace {

// A closed console is not the workers' problem: write errors are ignored.
void WriteOut(int fd, absl::string_view text) { (void)WriteFully(fd, text); }

}  // namespace

void LineSplitter::Feed(absl::string_view bytes, Sink emit) {
  const char* p = bytes.data();
  const char* const end = p + bytes.size();
  while (p < end) {
    if (pending_.size() == kMaxLinePart) {
      // A full part waits for its next byte: a '\n' ends the line there.
      const bool newline = *p == '\n';
      emit(pending_, /*continues=*/!newline);
      pending_.clear();
      if (!newline) pending_.push_back(*p);
      ++p;
      continue;
    }
    // Only the new bytes are searched, never more than the part has room for.
    const size_t span = std::min(kMaxLinePart - pending_.size(), static_cast<size_t>(end - p));
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', span));
    if (nl == nullptr) {
      if (pending_.capacity() < kMaxLinePart) pending_.reserve(kMaxLinePart);  // One allocation, not doubling past it.
      pending_.append(p, span);
      p += span;
      continue;
    }
    if (pending_.empty()) {
      emit(absl::string_view(p, static_cast<size_t>(nl - p)), false);  // The common case: no copy.
    } else {
      pending_.append(p, static_cast<size_t>(nl - p));
      emit(pending_, false);
      pending_.clear();
    }
    p = nl + 1;
  }
}

void LineSplitter::Flush(Sink emit) {
  if (pending_.empty()) return;
  emit(pending_, false);
  pending_.clear();
}

OutputPump::OutputPump(size_t tail_lines, int stdout_fd, int stderr_fd)
    : tail_lines_(tail_lines), stdout_fd_(stdout_fd), stderr_fd_(stderr_fd), wake_(eventfd(0, EFD_CLOEXEC)) {}

OutputPump::~OutputPump() { Finish(SteadyClock::now()); }

void OutputPump::AddLate(OutputStream stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++added_[stream.local_rank];
    late_.push_back(std::move(stream));
  }
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
}

void OutputPump::Add(OutputStream stream) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++added_[stream.local_rank];
  }
  Stream s;
  s.out = std::move(stream);
  streams_.push_back(std::move(s));
}

void OutputPump::Start() {
  thread_ = std::thread([this] { Run(); });
}

void OutputPump::Finish(Deadline deadline) {
  if (!thread_.joinable()) return;
  finish_deadline_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.time_since_epoch()).count());
  finishing_.store(true);
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  thread_.join();
}

void OutputPump::WaitEof(int local_rank, Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  eof_cv_.wait_until(lock, deadline, [&] { return stopped_ || eofs_[local_rank] >= added_[local_rank]; });
}

std::string OutputPump::Tail(int local_rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tails_.find(local_rank);
  if (it == tails_.end()) return "";
  std::string text;
  for (const std::string& line : it->second) text += line;
  return text;
}

void OutputPump::Emit(Stream& s, absl::string_view text, bool continues) {
  // The line as the tail keeps it; the console's is the same with the prefix.
  std::string line = continues ? absl::StrCat(text, kLineContinuesMarker, "\n") : absl::StrCat(text, "\n");
  if (s.out.to_console) WriteOut(s.out.is_stderr ? stderr_fd_ : stdout_fd_, absl::StrCat("[", s.out.rank, "]:", line));
  // The tail travels in the failure record and the summary: a long part is
  // kept only in its beginning.
  if (line.size() > kMaxTailLineBytes) {
    const size_t cut = line.size() - 1 - kMaxTailLineBytes;
    line.resize(kMaxTailLineBytes);
    absl::StrAppend(&line, " [lockstep-run: ", cut, " more bytes of this line not kept]\n");
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<std::string>& tail = tails_[s.out.local_rank];
  tail.push_back(std::move(line));
  while (tail.size() > tail_lines_) tail.pop_front();
}

void OutputPump::Run() {
  std::vector<pollfd> fds;
  std::vector<Stream*> owners;
  char buffer[65536];
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (OutputStream& out : late_) {
        Stream s;
        s.out = std::move(out);
        streams_.push_back(std::move(s));
      }
      late_.clear();
    }
    fds.clear();
    owners.clear();
    fds.push_back(pollfd{wake_.get(), POLLIN, 0});
    for (Stream& s : streams_) {
      if (s.eof) continue;
      fds.push_back(pollfd{s.out.read_end.get(), POLLIN, 0});
      owners.push_back(&s);
    }
    if (owners.empty() && (!late_adds_ || finishing_.load())) break;
    int timeout = -1;
    if (finishing_.load()) {
      const Deadline deadline{
          std::chrono::duration_cast<Deadline::duration>(std::chrono::nanoseconds(finish_deadline_ns_.load()))};
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
        s.lines.Flush([&](absl::string_view text, bool continues) { Emit(s, text, continues); });
        std::lock_guard<std::mutex> lock(mu_);
        ++eofs_[s.out.local_rank];
        eof_cv_.notify_all();
        continue;
      }
      any_data = true;
      const absl::string_view bytes(buffer, static_cast<size_t>(n));
      // The log is the faithful copy: the bytes as read, whatever the lines.
      if (s.out.log_file.valid()) WriteOut(s.out.log_file.get(), bytes);
      s.lines.Feed(bytes, [&](absl::string_view text, bool continues) { Emit(s, text, continues); });
    }
    if (fds[0].revents != 0) {
      uint64_t value;
      (void)!::read(wake_.get(), &value, sizeof(value));
    }
    if (finishing_.load() && !any_data) {
      const Deadline deadline{
          std::chrono::duration_cast<Deadline::duration>(std::chrono::nanoseconds(finish_deadline_ns_.load()))};
      if (SteadyClock::now() >= deadline) break;
    }
  }
  for (Stream& s : streams_) {
    s.lines.Flush([&](absl::string_view text, bool continues) { Emit(s, text, continues); });
  }
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  eof_cv_.notify_all();
}

}  // namespace launch
}  // namespace lockstep
