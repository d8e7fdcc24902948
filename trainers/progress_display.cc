#include "trainers/progress_display.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace lockstep {
namespace train_loop_internal {

ProgressDisplay::ProgressDisplay(const TrainLoopOptions& o, int64_t batches)
    : stream_(o.rank == 0 ? o.progress_stream : nullptr), mode_(o.progress), epochs_(o.epochs), batches_(batches) {
  if (stream_ == nullptr) mode_ = ProgressMode::kNone;
  if (mode_ == ProgressMode::kAuto) mode_ = isatty(fileno(stream_)) ? ProgressMode::kBar : ProgressMode::kLines;
}

void ProgressDisplay::Step(int64_t epoch, int64_t batch_done, const EvalCounts& running, double samples_per_s) {
  if (mode_ != ProgressMode::kBar) return;
  const auto now = std::chrono::steady_clock::now();
  // ~10 redraws a second are enough for a human and cost nothing.
  if (batch_done < batches_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * batch_done / std::max<int64_t>(batches_, 1));
  std::string bar(filled, '=');
  if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
  std::fprintf(stream_, "\repoch %lld/%lld [%s] %lld/%lld loss %.4f acc %5.2f%% %.0f samples/s ",
               static_cast<long long>(epoch + 1), static_cast<long long>(epochs_), bar.c_str(),
               static_cast<long long>(batch_done), static_cast<long long>(batches_), running.loss(),
               100 * running.accuracy(), samples_per_s);
  std::fflush(stream_);
  drawn_ = true;
}

void ProgressDisplay::Line(const std::string& line) {
  if (mode_ == ProgressMode::kNone) return;
  if (drawn_) std::fputc('\n', stream_);
  drawn_ = false;
  std::fprintf(stream_, "%s\n", line.c_str());
  std::fflush(stream_);
}

std::string EpochLine(const EpochMetrics& m, int64_t epochs, bool has_test, bool perplexity) {
  auto ppl = [perplexity](double loss) { return perplexity ? absl::StrFormat(" ppl %.2f", std::exp(loss)) : ""; };
  std::string line = absl::StrFormat("epoch %d/%d  train loss %.4f%s acc %.2f%%", m.epoch + 1, epochs, m.train.loss(),
                                     ppl(m.train.loss()), 100 * m.train.accuracy());
  if (has_test) {
    absl::StrAppendFormat(&line, "  test loss %.4f%s acc %.2f%% (%d examples)", m.test.loss(), ppl(m.test.loss()),
                          100 * m.test.accuracy(), m.test.examples);
  }
  absl::StrAppendFormat(&line, "  %.0f samples/s  %.2f s  step %d", m.samples_per_second, m.seconds, m.step);
  return line;
}

namespace {

// Each phase's percentage of `t`'s step time, backward without its exposed
// communication: data wait, forward, backward, exposed communication,
// optimizer.
struct Shares {
  double data, forward, backward, exposed, optimizer;
};

Shares SharesOf(const StepTimes& t) {
  const double total = t.total_s();
  if (!(total > 0)) return {0, 0, 0, 0, 0};
  const double exposed = std::min(t.exposed_comm_s, t.backward_s);
  return {100 * t.data_wait_s / total, 100 * t.forward_s / total, 100 * (t.backward_s - exposed) / total,
          100 * exposed / total, 100 * t.optimizer_s / total};
}

std::string SharesText(const Shares& s, const char* separator) {
  return absl::StrFormat(
      "data wait %.0f %%%sforward %.0f %%%sbackward %.0f %%%sexposed communication %.0f %%%s"
      "optimizer %.0f %%",
      s.data, separator, s.forward, separator, s.backward, separator, s.exposed, separator, s.optimizer);
}

}  // namespace

std::string StepLine(int64_t step, const EvalCounts& sums, double samples_per_s, const StepTimes& times,
                     bool perplexity) {
  std::string line = absl::StrFormat("step %d  loss %.4f", step, sums.loss());
  if (perplexity) absl::StrAppendFormat(&line, " ppl %.2f", std::exp(sums.loss()));
  absl::StrAppendFormat(&line, " acc %.2f%%  %.0f samples/s  %s  %.0f bytes sent per sample", 100 * sums.accuracy(),
                        samples_per_s, SharesText(SharesOf(times), "  "), times.bytes_per_example());
  return line;
}

}  // namespace train_loop_internal

std::string StepBreakdownLine(const StepTimes& times, const std::string& comm_hint) {
  const train_loop_internal::Shares s = train_loop_internal::SharesOf(times);
  std::string line = absl::StrFormat("step time: %s; %.0f bytes sent per sample; ",
                                     train_loop_internal::SharesText(s, ", "), times.bytes_per_example());
  // A wait of at least a fifth of the step bounds the run: without it the
  // step would be at least 1.25x faster.
  constexpr double kBoundShare = 20;
  if (s.exposed >= kBoundShare && s.exposed >= s.data) {
    absl::StrAppendFormat(&line,
                          "communication-bound: %.0f %% of the step waits for the all-reduce; try "
                          "--grad_accum_steps%s",
                          s.exposed, comm_hint);
  } else if (s.data >= kBoundShare) {
    absl::StrAppendFormat(&line, "data-bound: %.0f %% of the step waits for the next batch; try more --num_workers",
                          s.data);
  } else {
    absl::StrAppendFormat(&line, "compute-bound: %.0f %% of the step computes (exposed communication %.0f %%)",
                          s.forward + s.backward + s.optimizer, s.exposed);
  }
  return line;
}

}  // namespace lockstep
