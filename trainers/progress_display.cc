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

}  // namespace train_loop_internal
}  // namespace lockstep
