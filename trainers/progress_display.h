// ProgressDisplay: rank 0's terminal output of a training run: a redrawn bar
// on a terminal, else one line per epoch (ProgressMode). Internal to
// //trainers:train_loop.
#ifndef LOCKSTEP_TRAINERS_PROGRESS_DISPLAY_H_
#define LOCKSTEP_TRAINERS_PROGRESS_DISPLAY_H_

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "trainers/train_loop.h"

namespace lockstep {
namespace train_loop_internal {

class ProgressDisplay {
 public:
  // Shows nothing unless this is rank 0 and it has a stream.
  ProgressDisplay(const TrainLoopOptions& o, int64_t batches);

  // After a batch: redraws the bar (at most ~10 times a second, and at the
  // epoch's last batch).
  void Step(int64_t epoch, int64_t batch_done, const EvalCounts& running, double samples_per_s);
  // A line of its own (below the bar, if one is drawn).
  void Line(const std::string& line);

 private:
  std::FILE* stream_;
  ProgressMode mode_;
  int64_t epochs_, batches_;
  std::chrono::steady_clock::time_point last_draw_;
  bool drawn_ = false;
};

// "epoch 2/3  train loss 0.3123 acc 91.20%  test loss ... samples/s ... step 1876".
// With perplexity, "ppl 12.3" follows each loss.
std::string EpochLine(const EpochMetrics& m, int64_t epochs, bool has_test, bool perplexity = false);

// --log_every's line: "step 40  loss 0.5123 acc 81.25%  12345 samples/s  data
// wait 1 %  forward 20 %  backward 41 %  exposed communication 35 %  optimizer
// 3 %  2100 bytes sent per sample" (the shares of this rank's time over the
// last steps; backward without its exposed communication).
std::string StepLine(int64_t step, const EvalCounts& sums, double samples_per_s, const StepTimes& times,
                     bool perplexity);

}  // namespace train_loop_internal
}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_PROGRESS_DISPLAY_H_
