// Overlap is real: with small buckets (the reference MLP fits in one bucket
// at the defaults: after the rebuild the first bucket closes at 1 MiB, which
// only fc1.weight, ready last, reaches), a bucket's all-reduce is launched
// while backward still runs. Runs ddp_trainer on 2 local ranks with
// --trace and reads each rank's trace: in iteration >= 2 (after the rebuild)
// bucket 0's all-reduce starts before that iteration's backward ends, and
// the last bucket's after it started.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/subprocess.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace {

struct Event {
  std::string name;
  double ts, dur;
};

std::vector<Event> ReadTrace(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<Event> events;
  const nlohmann::json trace = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (trace.is_discarded() || !trace.contains("traceEvents")) return events;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    events.push_back({e.value("name", ""), e.value("ts", 0.0), e.value("dur", 0.0)});
  }
  return events;
}

TEST(OverlapTest, ABucketAllReduceStartsBeforeBackwardEnds) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/overlap";
  SubprocessOptions options;
  options.argv = {"trainers/ddp_trainer",
                  "--nproc=2",
                  "--model=mlp",
                  "--dataset=synthetic",
                  "--synthetic_train_size=2048",
                  "--synthetic_test_size=64",
                  "--batch_size=64",
                  "--max_steps=6",
                  "--bucket_cap_mb=0.25",
                  "--first_bucket_mb=0.25",
                  "--trace=" + dir,
                  "--num_workers=0"};
  options.alarm_seconds = 240;
  absl::StatusOr<Subprocess> trainer = Subprocess::Spawn(options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  absl::StatusOr<ExitStatus> status = trainer->Wait();
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->success()) << status->ToString();

  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<Event> events = ReadTrace(dir + "/trace_rank" + std::to_string(rank) + ".json");
    std::vector<Event> backwards, first_buckets;
    int max_bucket = -1;
    for (const Event& e : events) {
      if (e.name == "backward") backwards.push_back(e);
      if (e.name == "allreduce bucket 0") first_buckets.push_back(e);
      if (e.name.rfind("allreduce bucket ", 0) == 0) max_bucket = std::max(max_bucket, std::stoi(e.name.substr(17)));
    }
    ASSERT_GE(backwards.size(), 4u) << "rank " << rank;
    EXPECT_GE(max_bucket, 1) << "rank " << rank << ": expected several buckets after the rebuild";
    // Iterations 2..: for each backward, the bucket-0 all-reduce launched in it.
    int overlapped = 0;
    for (size_t it = 2; it < backwards.size(); ++it) {
      const Event& b = backwards[it];
      for (const Event& bucket : first_buckets) {
        if (bucket.ts >= b.ts && bucket.ts < b.ts + b.dur) ++overlapped;
      }
    }
    EXPECT_EQ(overlapped, static_cast<int>(backwards.size()) - 2)
        << "rank " << rank << ": bucket 0 must be launched inside every backward from iteration 2 on";
  }
}

}  // namespace
}  // namespace lockstep
