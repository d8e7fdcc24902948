// ElasticWatch: what lockstep-run --fault_tolerant's agent knows of its
// workers' elastic group (collectives/elastic/elastic_group.h), read from
// the workers' store: it marks a dead worker's member gone (so the
// survivors re-form at once), numbers a replacement, and turns the group's
// epochs into the launcher's lines:
//   "worker 2 lost (killed by signal 9); group re-formed with 2 ranks in 0.21 s"
//   "worker 2 rejoined after 0.65 s"
//
//   ElasticWatch watch(workers_store, /*world_size=*/3);
//   LOCKSTEP_RETURN_IF_ERROR(watch.Lost(/*rank=*/2, /*member=*/2, "killed by signal 9"));
//   LOCKSTEP_ASSIGN_OR_RETURN(int member, watch.NewMember());  // 3: the replacement's id
//   watch.Restarted(2, member);
//   for (const std::string& line : *watch.Poll()) Say(line);   // every tick while watch.pending()
//
// Keys, under the workers' attempt prefix: "elastic/<e>/formed",
// "elastic/<e>/decision", "elastic/<e>/members" (the group's),
// "elastic/gone/<member>" (MarkGone) and the counter
// "elastic/next_member" (a replacement's id is world_size - 1 + its value).
#ifndef LOCKSTEP_TOOLS_LAUNCH_ELASTIC_WATCH_H_
#define LOCKSTEP_TOOLS_LAUNCH_ELASTIC_WATCH_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/store/store.h"

namespace lockstep {
namespace launch {

class ElasticWatch {
 public:
  using Clock = std::chrono::steady_clock;

  ElasticWatch(std::shared_ptr<Store> store, int world_size, std::string prefix = "elastic")
      : store_(std::move(store)), world_size_(world_size), prefix_(std::move(prefix)) {}

  // Worker `rank` (member `member`) ended with `what`: marked gone.
  absl::Status Lost(int rank, int member, const std::string& what);
  // A new member id, for a replacement.
  absl::StatusOr<int> NewMember();
  // Worker `rank` was started again as member `member`.
  void Restarted(int rank, int member);
  // Reads the epochs formed since the last call: the lines to print.
  absl::StatusOr<std::vector<std::string>> Poll();
  // Losses or replacements not yet seen in an epoch.
  bool pending() const { return !losses_.empty() || !rejoins_.empty(); }

 private:
  struct Loss {
    int rank;
    int member;
    std::string what;
    Clock::time_point at;
  };
  std::string Key(const std::string& what) const { return prefix_ + "/" + what; }

  std::shared_ptr<Store> store_;
  int world_size_;
  std::string prefix_;
  int64_t known_epoch_ = 0;  // Epochs up to this one were read.
  std::vector<Loss> losses_;
  std::vector<Loss> rejoins_;  // `member`: the replacement's; `at`: its predecessor's loss.
};

}  // namespace launch
}  // namespace lockstep

#endif  // LOCKSTEP_TOOLS_LAUNCH_ELASTIC_WATCH_H_
