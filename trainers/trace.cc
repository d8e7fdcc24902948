#include "trainers/trace.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/atomic_file.h"

namespace lockstep {
namespace {

// Event names are ours ("forward", "allreduce bucket 3"), but escape anyway
// so that the file stays valid JSON whatever a caller passes.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

TraceRecorder::TraceRecorder(int rank, size_t max_events)
    : rank_(rank), max_events_(max_events), origin_(Clock::now()) {}

void TraceRecorder::Complete(std::string name, const char* category, Clock::time_point start, Clock::time_point end,
                             int tid, std::vector<std::pair<std::string, int64_t>> args) {
  using Us = std::chrono::duration<double, std::micro>;
  Event e{std::move(name), category, Us(start - origin_).count(), Us(end - start).count(), tid, std::move(args)};
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(e));
}

size_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

size_t TraceRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

std::string TraceRecorder::ToJson() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "{\"traceEvents\":[\n";
  // Names for the rows in the viewer.
  absl::StrAppendFormat(&out,
                        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
                        "\"args\":{\"name\":\"rank %d\"}},\n"
                        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                        "\"args\":{\"name\":\"train\"}},\n"
                        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                        "\"args\":{\"name\":\"communication\"}}",
                        rank_, rank_, rank_, kTrainThread, rank_, kCommThread);
  for (const Event& e : events_) {
    absl::StrAppendFormat(&out,
                          ",\n{\"name\":%s,\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
                          "\"pid\":%d,\"tid\":%d",
                          JsonString(e.name), e.category, e.ts_us, e.dur_us, rank_, e.tid);
    if (!e.args.empty()) {
      out += ",\"args\":{";
      for (size_t i = 0; i < e.args.size(); ++i) {
        absl::StrAppend(&out, i ? "," : "", JsonString(e.args[i].first), ":", e.args[i].second);
      }
      out += "}";
    }
    out += "}";
  }
  absl::StrAppendFormat(&out, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":%d}}\n", dropped_);
  return out;
}

absl::Status TraceRecorder::WriteFile(const std::string& path) const { return WriteFileAtomically(path, ToJson()); }

}  // namespace lockstep
