#include "trainers/train_loop.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "core/cuda_caching_allocator.h"
#include "core/status.h"
#include "data/data_loader.h"
#include "data/distributed_sampler.h"
#include "nn/checkpoint.h"
#include "nn/cross_entropy.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr char kCheckpointPrefix[] = "step-";
constexpr char kCheckpointSuffix[] = ".safetensors";
constexpr int kCheckpointsKept = 2;
// Our keys in a checkpoint's metadata (nn/checkpoint.h reserves others).
constexpr char kBatchKey[] = "trainer.batch";  // Batches done in progress.epoch.
constexpr char kBatchSizeKey[] = "trainer.batch_size";
constexpr char kWorldSizeKey[] = "trainer.world_size";
constexpr char kLossSumKey[] = "trainer.epoch_loss_sum";
constexpr char kCorrectKey[] = "trainer.epoch_correct";
constexpr char kSeenKey[] = "trainer.epoch_seen";
constexpr char kScalerPrefix[] = "scaler.";

EvalCounts Add(const EvalCounts& a, const EvalCounts& b) {
  return {a.loss_sum + b.loss_sum, a.correct + b.correct, a.count + b.count};
}

std::string CheckpointPath(const std::string& dir, int64_t step) {
  return absl::StrFormat("%s/%s%010d%s", dir, kCheckpointPrefix, step, kCheckpointSuffix);
}

absl::StatusOr<int64_t> ParseInt(const std::map<std::string, std::string>& metadata,
                                 const std::string& key, const std::string& path) {
  auto it = metadata.find(key);
  int64_t value;
  if (it == metadata.end() || !absl::SimpleAtoi(it->second, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": metadata '", key,
                                                   "' is missing or not an integer; was it written "
                                                   "by a lockstep trainer?"));
  }
  return value;
}

// Rank 0's terminal output: a bar on a terminal, else one line per epoch.
class Progress {
 public:
  Progress(const TrainLoopOptions& o, int64_t batches)
      : stream_(o.rank == 0 ? o.progress_stream : nullptr), epochs_(o.epochs), batches_(batches) {
    mode_ = o.progress;
    if (stream_ == nullptr) mode_ = ProgressMode::kNone;
    if (mode_ == ProgressMode::kAuto) {
      mode_ = isatty(fileno(stream_)) ? ProgressMode::kBar : ProgressMode::kLines;
    }
  }

  void Step(int64_t epoch, int64_t batch_done, const EvalCounts& running, double samples_per_s) {
    if (mode_ != ProgressMode::kBar) return;
    const Clock::time_point now = Clock::now();
    // ~10 redraws a second are enough for a human and cost nothing.
    if (batch_done < batches_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * batch_done / std::max<int64_t>(batches_, 1));
    std::string bar(filled, '=');
    if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
    std::fprintf(stream_, "\repoch %lld/%lld [%s] %lld/%lld loss %.4f acc %5.2f%% %.0f samples/s ",
                 static_cast<long long>(epoch + 1), static_cast<long long>(epochs_), bar.c_str(),
                 static_cast<long long>(batch_done), static_cast<long long>(batches_),
                 running.loss(), 100 * running.accuracy(), samples_per_s);
    std::fflush(stream_);
    drawn_ = true;
  }

  void Line(const std::string& line) {
    if (mode_ == ProgressMode::kNone) return;
    if (drawn_) std::fputc('\n', stream_);
    drawn_ = false;
    std::fprintf(stream_, "%s\n", line.c_str());
    std::fflush(stream_);
  }

 private:
  std::FILE* stream_;
  ProgressMode mode_;
  int64_t epochs_, batches_;
  Clock::time_point last_draw_;
  bool drawn_ = false;
};

std::string EpochLine(const EpochMetrics& m, int64_t epochs, bool has_test) {
  std::string line = absl::StrFormat("epoch %d/%d  train loss %.4f acc %.2f%%", m.epoch + 1, epochs,
                                     m.train.loss(), 100 * m.train.accuracy());
  if (has_test) {
    absl::StrAppendFormat(&line, "  test loss %.4f acc %.2f%% (%d examples)", m.test.loss(),
                          100 * m.test.accuracy(), m.test.count);
  }
  absl::StrAppendFormat(&line, "  %.0f samples/s  %.2f s  step %d", m.samples_per_second, m.seconds,
                        m.step);
  return line;
}

// JSON numbers must be finite.
std::string Num(double v) { return std::isfinite(v) ? absl::StrFormat("%.9g", v) : "null"; }

std::string EpochJson(const EpochMetrics& m, const TrainLoopOptions& o, bool has_test,
                      float loss_scale) {
  std::string s = absl::StrFormat(
      "{\"event\":\"epoch\",\"epoch\":%d,\"epochs\":%d,\"step\":%d,\"world_size\":%d,"
      "\"batch_size\":%d,\"loss\":%s,\"accuracy\":%s,\"train_examples\":%d",
      m.epoch, o.epochs, m.step, o.world_size, o.batch_size, Num(m.train.loss()),
      Num(m.train.accuracy()), m.train.count);
  if (has_test) {
    absl::StrAppendFormat(&s, ",\"test_loss\":%s,\"test_accuracy\":%s,\"test_examples\":%d",
                          Num(m.test.loss()), Num(m.test.accuracy()), m.test.count);
  }
  absl::StrAppendFormat(&s,
                        ",\"seconds\":%s,\"samples_per_s\":%s,\"data_wait_s\":%s,\"forward_s\":%s,"
                        "\"backward_s\":%s,\"optimizer_s\":%s,\"skipped_steps\":%d,"
                        "\"loss_scale\":%s,\"peak_rss_bytes\":[%s]",
                        Num(m.seconds), Num(m.samples_per_second), Num(m.data_wait_s),
                        Num(m.forward_s), Num(m.backward_s), Num(m.optimizer_s), m.skipped_steps,
                        Num(loss_scale), absl::StrJoin(m.peak_rss_bytes, ","));
  if (o.device.is_cuda()) {
    absl::StrAppendFormat(&s, ",\"cuda_peak_allocated_bytes\":[%s],\"cuda_peak_reserved_bytes\":[%s]",
                          absl::StrJoin(m.cuda_peak_allocated_bytes, ","),
                          absl::StrJoin(m.cuda_peak_reserved_bytes, ","));
  }
  s += "}";
  return s;
}

struct Restored {
  std::string path;
  int64_t epoch = 0;
  int64_t batch = 0;
  int64_t step = 0;
  EvalCounts carried;  // The epoch's sums so far, over all ranks.
};

// Restores the newest checkpoint that loads; nullopt when there is none.
absl::StatusOr<std::optional<Restored>> Restore(const TrainLoopOptions& o, Module& model,
                                                Optimizer& optimizer, GradScaler& scaler,
                                                int64_t batches) {
  const std::vector<std::string> files = ListCheckpoints(o.checkpoint_dir);
  if (files.empty()) return std::optional<Restored>();
  std::vector<std::string> problems;
  for (const std::string& path : files) {
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(path, model, &optimizer);
    if (!loaded.ok()) {
      // Writes are atomic, so this is a foreign or damaged file: try the
      // previous one (loading changed nothing).
      problems.push_back(absl::StrCat(path, ": ", loaded.status().message()));
      continue;
    }
    // From here on the model is restored: a mismatch is the user's to fix.
    const auto& md = loaded->metadata;
    Restored r;
    r.path = path;
    r.epoch = loaded->progress.epoch;
    r.step = loaded->progress.step;
    LOCKSTEP_ASSIGN_OR_RETURN(r.batch, ParseInt(md, kBatchKey, path));
    LOCKSTEP_ASSIGN_OR_RETURN(const int64_t batch_size, ParseInt(md, kBatchSizeKey, path));
    LOCKSTEP_ASSIGN_OR_RETURN(const int64_t world_size, ParseInt(md, kWorldSizeKey, path));
    if (batch_size != o.batch_size || world_size != o.world_size ||
        loaded->progress.seed != o.seed) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, " was written with batch size ", batch_size, ", world size ", world_size,
          " and seed ", loaded->progress.seed, "; this run has ", o.batch_size, ", ",
          o.world_size, " and ", o.seed,
          ". Resume with the same values (the batch position depends on them) or use another "
          "--checkpoint_dir"));
    }
    if (r.batch < 0 || r.batch > batches || r.epoch < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": batch ", r.batch, " of epoch ",
                                                     r.epoch, " is outside an epoch of ", batches,
                                                     " batches"));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(r.carried.correct, ParseInt(md, kCorrectKey, path));
    LOCKSTEP_ASSIGN_OR_RETURN(r.carried.count, ParseInt(md, kSeenKey, path));
    auto loss = md.find(kLossSumKey);
    if (loss == md.end() || !absl::SimpleAtod(loss->second, &r.carried.loss_sum)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": metadata '", kLossSumKey, "' is bad"));
    }
    if (scaler.enabled()) {
      LOCKSTEP_RETURN_IF_ERROR(scaler.LoadStateFromMetadata(md, kScalerPrefix));
    }
    return std::optional<Restored>(std::move(r));
  }
  return absl::DataLossError(absl::StrCat("no checkpoint in ", o.checkpoint_dir,
                                          " could be loaded: ", absl::StrJoin(problems, "; ")));
}

class Trainer {
 public:
  Trainer(const TrainLoopOptions& o, const TrainParts& p, GradScaler& scaler)
      : o_(o), p_(p), model_(p.stepper->module()), scaler_(scaler) {}

  absl::StatusOr<TrainResult> Run();

 private:
  absl::Status Save(int64_t epoch, int64_t batch, const EvalCounts& sums);
  absl::Status WriteTrace();
  void WriteMetrics(const std::string& line) {
    if (metrics_ == nullptr) return;
    std::fprintf(metrics_, "%s\n", line.c_str());
    std::fflush(metrics_);  // A crashed run keeps its lines.
  }

  const TrainLoopOptions& o_;
  const TrainParts& p_;
  Module& model_;
  GradScaler& scaler_;
  std::unique_ptr<TraceRecorder> trace_;
  std::FILE* metrics_ = nullptr;
  int64_t step_ = 0;
};

absl::Status Trainer::Save(int64_t epoch, int64_t batch, const EvalCounts& sums) {
  if (o_.rank != 0) return absl::OkStatus();
  TrainingProgress progress;
  progress.epoch = epoch;
  progress.step = step_;
  progress.seed = o_.seed;
  std::map<std::string, std::string> metadata = scaler_.StateToMetadata(kScalerPrefix);
  metadata[kBatchKey] = absl::StrCat(batch);
  metadata[kBatchSizeKey] = absl::StrCat(o_.batch_size);
  metadata[kWorldSizeKey] = absl::StrCat(o_.world_size);
  metadata[kLossSumKey] = absl::StrFormat("%.17g", sums.loss_sum);
  metadata[kCorrectKey] = absl::StrCat(sums.correct);
  metadata[kSeenKey] = absl::StrCat(sums.count);
  const Clock::time_point start = Clock::now();
  LOCKSTEP_RETURN_IF_ERROR(SaveCheckpoint(CheckpointPath(o_.checkpoint_dir, step_), model_,
                                          p_.optimizer, progress, metadata));
  if (trace_) trace_->Complete("checkpoint", "io", start, Clock::now());
  // Older files only after the new one is durable: a crash leaves one.
  const std::vector<std::string> files = ListCheckpoints(o_.checkpoint_dir);
  for (size_t i = kCheckpointsKept; i < files.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(files[i], ec);
  }
  return absl::OkStatus();
}

absl::Status Trainer::WriteTrace() {
  if (!trace_) return absl::OkStatus();
  return trace_->WriteFile(absl::StrCat(o_.trace_dir, "/trace_rank", o_.rank, ".json"));
}

absl::StatusOr<TrainResult> Trainer::Run() {
  DistributedSamplerOptions sampler_options;
  sampler_options.num_replicas = o_.world_size;
  sampler_options.rank = o_.rank;
  sampler_options.seed = static_cast<int64_t>(o_.seed);
  LOCKSTEP_ASSIGN_OR_RETURN(DistributedSampler sampler,
                            DistributedSampler::Create(p_.train->size(), sampler_options));
  DataLoaderOptions loader_options;
  loader_options.batch_size = o_.batch_size;
  loader_options.num_workers = o_.num_workers;
  loader_options.prefetch_factor = o_.prefetch_factor;
  loader_options.pin_memory = o_.device.is_cuda();
  LOCKSTEP_ASSIGN_OR_RETURN(
      std::unique_ptr<DataLoader> loader,
      DataLoader::Create(p_.train, std::make_shared<DistributedSampler>(sampler), loader_options));
  const int64_t batches = loader->num_batches();
  const bool checkpointing = !o_.checkpoint_dir.empty();
  Progress progress(o_, batches);

  TrainResult result;
  int64_t start_epoch = 0, start_batch = 0;
  EvalCounts carried;
  if (checkpointing) {
    std::error_code ec;
    std::filesystem::create_directories(o_.checkpoint_dir, ec);
    if (ec && !std::filesystem::is_directory(o_.checkpoint_dir)) {
      return absl::FailedPreconditionError(absl::StrCat("cannot create --checkpoint_dir ",
                                                        o_.checkpoint_dir, ": ", ec.message()));
    }
  }
  if (checkpointing && o_.resume) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::optional<Restored> restored,
                              Restore(o_, model_, *p_.optimizer, scaler_, batches));
    if (restored) {
      start_epoch = restored->epoch;
      start_batch = restored->batch;
      step_ = restored->step;
      carried = restored->carried;
      result.resumed = true;
      result.resumed_from_step = step_;
      progress.Line(absl::StrFormat("resumed from %s: epoch %d, batch %d of %d, step %d",
                                    restored->path, start_epoch + 1, start_batch, batches, step_));
    } else {
      progress.Line(absl::StrCat("no checkpoint in ", o_.checkpoint_dir, "; starting fresh"));
    }
  }
  if (!o_.trace_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o_.trace_dir, ec);
    if (ec && !std::filesystem::is_directory(o_.trace_dir)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create --trace ", o_.trace_dir, ": ", ec.message()));
    }
    trace_ = std::make_unique<TraceRecorder>(o_.rank);
  }
  p_.stepper->AttachTrace(trace_.get());
  if (o_.rank == 0 && !o_.metrics_path.empty()) {
    // A resumed run continues its history.
    metrics_ = std::fopen(o_.metrics_path.c_str(), result.resumed ? "a" : "w");
    if (metrics_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("cannot open --metrics ", o_.metrics_path,
                                                        ": ", std::strerror(errno)));
    }
  }
  struct CloseMetrics {
    std::FILE*& f;
    ~CloseMetrics() {
      if (f) std::fclose(f);
      f = nullptr;
    }
  } close_metrics{metrics_};
  if (result.resumed) {
    WriteMetrics(absl::StrFormat("{\"event\":\"resumed\",\"epoch\":%d,\"batch\":%d,\"step\":%d}",
                                 start_epoch, start_batch, step_));
  }

  std::vector<Tensor> grads(p_.optimizer->parameters().size());
  const bool has_test = p_.test != nullptr;
  bool stop = o_.max_steps > 0 && step_ >= o_.max_steps;
  for (int64_t epoch = start_epoch; epoch < o_.epochs && !stop; ++epoch) {
    const int64_t first = epoch == start_epoch ? start_batch : 0;
    const EvalCounts epoch_carried = epoch == start_epoch ? carried : EvalCounts{};
    EpochMetrics m;
    m.epoch = epoch;
    EvalCounts local;
    model_.Train();
    LOCKSTEP_RETURN_IF_ERROR(loader->StartEpoch(epoch, first));
    const Clock::time_point epoch_start = Clock::now();
    int64_t batch_index = first;
    while (true) {
      const Clock::time_point t0 = Clock::now();
      LOCKSTEP_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
      if (!batch) break;
      const Clock::time_point t1 = Clock::now();
      Tensor features = batch->features;
      if (!o_.device.is_cpu()) {
        LOCKSTEP_ASSIGN_OR_RETURN(features, features.To(o_.device));
      }
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, p_.stepper->Forward(features));
      LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, batch->labels));
      const Clock::time_point t2 = Clock::now();
      // No autograd: scaling the loss's gradient scales every gradient.
      LOCKSTEP_RETURN_IF_ERROR(scaler_.Scale(ce.grad_logits));
      LOCKSTEP_RETURN_IF_ERROR(p_.stepper->Backward(ce.grad_logits));
      const Clock::time_point t3 = Clock::now();
      for (size_t i = 0; i < grads.size(); ++i) grads[i] = p_.optimizer->parameters()[i].parameter->grad;
      LOCKSTEP_ASSIGN_OR_RETURN(const bool stepped,
                                scaler_.Step(grads, [&] { return p_.optimizer->Step(); }));
      LOCKSTEP_RETURN_IF_ERROR(scaler_.Update());
      LOCKSTEP_RETURN_IF_ERROR(p_.optimizer->ZeroGrad());
      const Clock::time_point t4 = Clock::now();
      ++step_;
      ++batch_index;
      if (!stepped) ++m.skipped_steps;
      local.loss_sum += ce.loss * ce.counted;
      local.correct += ce.correct;
      local.count += ce.counted;
      m.data_wait_s += Seconds(t1 - t0);
      m.forward_s += Seconds(t2 - t1);
      m.backward_s += Seconds(t3 - t2);
      m.optimizer_s += Seconds(t4 - t3);
      if (trace_) {
        trace_->Complete("data wait", "step", t0, t1);
        trace_->Complete("forward", "step", t1, t2);
        trace_->Complete("backward", "step", t2, t3);
        trace_->Complete("optimizer step", "step", t3, t4);
      }
      progress.Step(epoch, batch_index, local,
                    local.count * o_.world_size / std::max(Seconds(t4 - epoch_start), 1e-9));
      const bool epoch_done = batch_index >= batches;
      const bool at_max = o_.max_steps > 0 && step_ >= o_.max_steps;
      if (checkpointing && !epoch_done &&
          (at_max || (o_.checkpoint_every > 0 && step_ % o_.checkpoint_every == 0))) {
        // Every rank takes part in the reduction; rank 0 writes.
        LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts sums, SumOverRanks(local, p_.comm));
        LOCKSTEP_RETURN_IF_ERROR(Save(epoch, batch_index, Add(sums, epoch_carried)));
      }
      if (at_max && !epoch_done) {
        stop = true;
        break;
      }
    }
    m.seconds = Seconds(Clock::now() - epoch_start);
    m.step = step_;
    LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts part, SumOverRanks(local, p_.comm));
    m.samples_per_second = m.seconds > 0 ? part.count / m.seconds : 0;
    m.train = Add(part, epoch_carried);
    if (stop) {
      WriteMetrics(absl::StrFormat(
          "{\"event\":\"stopped\",\"epoch\":%d,\"batch\":%d,\"step\":%d,\"loss\":%s,"
          "\"accuracy\":%s,\"samples_per_s\":%s,\"checkpoint\":%s}",
          epoch, batch_index, step_, Num(m.train.loss()), Num(m.train.accuracy()),
          Num(m.samples_per_second), checkpointing ? "true" : "false"));
      progress.Line(absl::StrFormat("stopped at --max_steps=%d (epoch %d, batch %d of %d)%s",
                                    o_.max_steps, epoch + 1, batch_index, batches,
                                    checkpointing ? "; checkpoint saved" : ""));
      result.stopped_at_max_steps = true;
      break;
    }
    if (has_test) {
      const Clock::time_point start = Clock::now();
      LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts mine,
                                EvaluateShard(model_, p_.test, o_.rank, o_.world_size,
                                              o_.batch_size, o_.num_workers, o_.device));
      LOCKSTEP_ASSIGN_OR_RETURN(m.test, SumOverRanks(mine, p_.comm));
      if (trace_) trace_->Complete("evaluate", "eval", start, Clock::now());
    }
    // Peak memory of every rank: each fills its own slots of one sum (f64
    // holds byte counts exactly up to 2^53). Every rank has the same device
    // kind, so all agree on the size.
    const bool cuda = o_.device.is_cuda();
    const int64_t w = o_.world_size;
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor peaks, Tensor::Zeros({cuda ? 3 * w : w}, DType::kF64));
    double* slot = peaks.data<double>();
    slot[o_.rank] = static_cast<double>(PeakRssBytes());
    if (cuda) {
      const DeviceMemoryStats stats = DefaultCudaAllocator().Stats(o_.device.index());
      slot[w + o_.rank] = static_cast<double>(stats.peak_allocated_bytes);
      slot[2 * w + o_.rank] = static_cast<double>(stats.peak_reserved_bytes);
    }
    if (p_.comm != nullptr) LOCKSTEP_RETURN_IF_ERROR(p_.comm->AllReduce(peaks, ReduceOp::kSum)->Wait());
    slot = peaks.data<double>();
    for (int64_t r = 0; r < w; ++r) {
      m.peak_rss_bytes.push_back(static_cast<int64_t>(slot[r]));
      if (cuda) {
        m.cuda_peak_allocated_bytes.push_back(static_cast<int64_t>(slot[w + r]));
        m.cuda_peak_reserved_bytes.push_back(static_cast<int64_t>(slot[2 * w + r]));
      }
    }
    WriteMetrics(EpochJson(m, o_, has_test, scaler_.scale()));
    progress.Line(EpochLine(m, o_.epochs, has_test));
    if (checkpointing) LOCKSTEP_RETURN_IF_ERROR(Save(epoch + 1, 0, EvalCounts{}));
    LOCKSTEP_RETURN_IF_ERROR(WriteTrace());
    result.epochs.push_back(std::move(m));
    if (o_.max_steps > 0 && step_ >= o_.max_steps && epoch + 1 < o_.epochs) {
      stop = true;
      result.stopped_at_max_steps = true;
      progress.Line(absl::StrFormat("stopped at --max_steps=%d (end of epoch %d)", o_.max_steps,
                                    epoch + 1));
    }
  }
  LOCKSTEP_RETURN_IF_ERROR(WriteTrace());
  result.steps = step_;
  return result;
}

}  // namespace

StridedSampler::StridedSampler(int64_t n, int rank, int world_size)
    : n_(std::max<int64_t>(n, 0)), rank_(rank), world_size_(std::max(world_size, 1)) {}

int64_t StridedSampler::size() const {
  return rank_ >= n_ ? 0 : (n_ - rank_ + world_size_ - 1) / world_size_;
}

std::vector<int64_t> StridedSampler::Indices() const {
  std::vector<int64_t> out;
  out.reserve(size());
  for (int64_t i = rank_; i < n_; i += world_size_) out.push_back(i);
  return out;
}

absl::StatusOr<EvalCounts> EvaluateShard(Module& module, std::shared_ptr<const Dataset> dataset,
                                         int rank, int world_size, int64_t batch_size,
                                         int num_workers, Device device) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("EvaluateShard: rank ", rank, " of world size ", world_size));
  }
  auto sampler = std::make_shared<StridedSampler>(dataset->size(), rank, world_size);
  EvalCounts counts;
  if (sampler->size() == 0) return counts;  // More ranks than examples.
  DataLoaderOptions options;
  options.batch_size = batch_size;
  options.num_workers = num_workers;
  options.pin_memory = device.is_cuda();
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader,
                            DataLoader::Create(std::move(dataset), sampler, options));
  // Back to the caller's mode however this returns.
  struct RestoreMode {
    Module& m;
    bool training;
    ~RestoreMode() { m.Train(training); }
  } restore{module, module.is_training()};
  module.Eval();
  LOCKSTEP_RETURN_IF_ERROR(loader->StartEpoch(0));
  while (true) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
    if (!batch) break;
    Tensor features = batch->features;
    if (!device.is_cpu()) {
      LOCKSTEP_ASSIGN_OR_RETURN(features, features.To(device));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, module.Forward(features));
    LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, batch->labels));
    counts.loss_sum += ce.loss * ce.counted;
    counts.correct += ce.correct;
    counts.count += ce.counted;
  }
  return counts;
}

absl::StatusOr<EvalCounts> SumOverRanks(const EvalCounts& counts, Communicator* comm) {
  if (comm == nullptr) return counts;
  // f64 holds counts exactly up to 2^53.
  const std::vector<double> values = {counts.loss_sum, static_cast<double>(counts.correct),
                                      static_cast<double>(counts.count)};
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::FromVector<double>(values));
  LOCKSTEP_RETURN_IF_ERROR(comm->AllReduce(t, ReduceOp::kSum)->Wait());
  const double* v = t.data<double>();
  return EvalCounts{v[0], static_cast<int64_t>(v[1]), static_cast<int64_t>(v[2])};
}

int64_t PeakRssBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB.
}

std::vector<std::string> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!absl::StartsWith(name, kCheckpointPrefix) || !absl::EndsWith(name, kCheckpointSuffix)) {
      continue;
    }
    const std::string digits = name.substr(
        sizeof(kCheckpointPrefix) - 1,
        name.size() - (sizeof(kCheckpointPrefix) - 1) - (sizeof(kCheckpointSuffix) - 1));
    int64_t step;
    if (digits.empty() || !absl::SimpleAtoi(digits, &step)) continue;  // e.g. a temporary file
    found.emplace_back(step, it->path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

absl::StatusOr<TrainResult> RunTraining(const TrainLoopOptions& o, const TrainParts& p) {
  if (p.stepper == nullptr || p.optimizer == nullptr || p.train == nullptr) {
    return absl::InvalidArgumentError("RunTraining: stepper, optimizer and train set are required");
  }
  if (o.epochs < 1 || o.batch_size < 1 || o.checkpoint_every < 0 || o.max_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RunTraining: epochs (", o.epochs, ") and batch_size (", o.batch_size,
        ") must be >= 1, checkpoint_every (", o.checkpoint_every, ") and max_steps (", o.max_steps,
        ") >= 0"));
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunTraining: rank ", o.rank, " outside world size ", o.world_size));
  }
  if (p.comm != nullptr && (p.comm->rank() != o.rank || p.comm->size() != o.world_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RunTraining: the communicator is rank ", p.comm->rank(), " of ", p.comm->size(),
        " but the options say rank ", o.rank, " of ", o.world_size));
  }
  if (p.comm == nullptr && o.world_size != 1) {
    return absl::InvalidArgumentError(
        "RunTraining: world_size > 1 needs a communicator (metrics are summed over ranks)");
  }
  std::optional<GradScaler> disabled;
  GradScaler* scaler = p.scaler;
  if (scaler == nullptr) {
    GradScalerOptions off;
    off.enabled = false;
    LOCKSTEP_ASSIGN_OR_RETURN(GradScaler s, GradScaler::Create(off));
    disabled.emplace(std::move(s));
    scaler = &*disabled;
  }
  Trainer trainer(o, p, *scaler);
  return trainer.Run();
}

}  // namespace lockstep
