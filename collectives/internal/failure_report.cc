#include "collectives/internal/failure_report.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/atomic_file.h"

namespace lockstep {
namespace communicator_internal {
namespace {

// What the exchange thread collected.
struct Reports {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> texts;
  std::vector<std::string> recorders;  // Peers' flight recorders (JSON).
  bool done = false;
};

// Every failing rank posts its error and its flight recorder, and appends
// its rank to a log of failures; each reads the log in order, so it waits
// only for failures still to come, never on a rank that is not failing.
void Exchange(std::shared_ptr<Store> store, std::shared_ptr<Reports> reports, Deadline until, int rank, int size,
              const std::string& recorded, const std::string& message) {
  const auto left = [until] {
    return std::max(Milliseconds(0), std::chrono::duration_cast<Milliseconds>(until - SteadyClock::now()));
  };
  bool posted = store->Set(absl::StrCat("recorder/", rank), recorded).ok() &&
                store->Set(absl::StrCat("failure/", rank), message).ok();
  absl::StatusOr<int64_t> index = posted ? store->Add("failure_count", 1) : absl::StatusOr<int64_t>(0);
  posted = posted && index.ok() && store->Set(absl::StrCat("failure_log/", *index - 1), absl::StrCat(rank)).ok();
  for (int i = 0; posted && i < size && left() > Milliseconds(0); ++i) {
    absl::StatusOr<std::string> who = store->Get(absl::StrCat("failure_log/", i), left());
    int peer = -1;
    if (!who.ok() || !absl::SimpleAtoi(*who, &peer) || peer < 0 || peer >= size) break;
    if (peer == rank) continue;
    absl::StatusOr<std::string> text = store->Get(absl::StrCat("failure/", peer), left());
    absl::StatusOr<std::string> peer_recorded = store->Get(absl::StrCat("recorder/", peer), left());
    std::lock_guard<std::mutex> lock(reports->mu);
    if (text.ok()) reports->texts.push_back(*text);
    if (peer_recorded.ok()) reports->recorders.push_back(*peer_recorded);
  }
  std::lock_guard<std::mutex> lock(reports->mu);
  reports->done = true;
  reports->cv.notify_all();
}

}  // namespace

absl::Status ShareFailure(const absl::Status& status, const FailureReporter& reporter) {
  const FlightRecorder& recorder = *reporter.recorder;
  const std::string recorded = recorder.ToJson(reporter.rank, /*last=*/16);
  if (reporter.store == nullptr || reporter.size == 1) {
    if (!reporter.dump_dir.empty()) WriteFlightRecorderDump(reporter, {});
    return status;
  }
  // The store may hang with the rank that hosts it (a stopped process still
  // accepts connections): the exchange runs on a thread of its own, and this
  // rank takes whatever reports arrived within the window. The thread owns
  // everything it touches, so it may outlive this call (until the store's
  // own timeout) without harm.
  auto reports = std::make_shared<Reports>();
  const Deadline until = DeadlineIn(reporter.window);
  std::thread(Exchange, reporter.store, reports, until, reporter.rank, reporter.size, recorded,
              std::string(status.message()))
      .detach();
  std::unique_lock<std::mutex> lock(reports->mu);
  reports->cv.wait_until(lock, until, [&] { return reports->done; });
  const std::vector<std::string> texts = reports->texts, recorders = reports->recorders;
  lock.unlock();
  std::string message(status.message());
  if (recorder.capacity() > 0) {
    // Every rank's place, this one's and those that reported; the others
    // are in no failed operation of this group.
    std::vector<RankReport> by_rank(static_cast<size_t>(reporter.size));
    for (int r = 0; r < reporter.size; ++r) by_rank[r].rank = r;
    std::vector<std::string> all = recorders;
    all.push_back(recorded);
    for (const std::string& json : all) {
      absl::StatusOr<RankReport> report = ParseRankReport(json);
      if (report.ok() && report->rank >= 0 && report->rank < reporter.size) {
        by_rank[report->rank] = *std::move(report);
      }
    }
    absl::StrAppend(&message, ". ", AnalyzeFlightRecords(by_rank));
  }
  if (!texts.empty()) absl::StrAppend(&message, ". Other ranks reported: ", absl::StrJoin(texts, " | "));
  if (!reporter.dump_dir.empty()) WriteFlightRecorderDump(reporter, recorders);
  return absl::Status(status.code(), message);
}

void WriteFlightRecorderDump(const FailureReporter& reporter, const std::vector<std::string>& peers) {
  const std::string path = absl::StrCat(reporter.dump_dir, "/flight_recorder_rank", reporter.rank, ".json");
  const std::string json = absl::StrCat("{\"rank\": ", reporter.rank, ", \"size\": ", reporter.size,
                                        ", \"recorder\": ", reporter.recorder->ToJson(reporter.rank), ", \"peers\": [",
                                        absl::StrJoin(peers, ", "), "]}\n");
  // Written aside under an unguessable name that is never a planted file or
  // symlink, then renamed: a reader never sees half a file, and a local user
  // cannot redirect the write.
  const absl::Status written = WriteFileAtomically(path, json);
  if (!written.ok()) {
    std::fprintf(stderr, "[lockstep] rank %d: could not write the flight recorder to %s: %s\n", reporter.rank,
                 path.c_str(), std::string(written.message()).c_str());
    return;
  }
  std::fprintf(stderr, "[lockstep] rank %d: flight recorder written to %s\n", reporter.rank, path.c_str());
}

}  // namespace communicator_internal
}  // namespace lockstep
