#include "trainers/train_loop.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/cuda/cuda_caching_allocator.h"
#include "core/peak_rss.h"
#include "core/status.h"
#include "data/data_loader.h"
#include "data/distributed_sampler.h"
#include "nn/clip_grad.h"
#include "nn/last_dim_cross_entropy.h"
#include "trainers/checkpoint_restore.h"
#include "trainers/device_prefetch.h"
#include "trainers/progress_display.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

EvalCounts Add(const EvalCounts& a, const EvalCounts& b) {
  return {a.loss_sum + b.loss_sum, a.correct + b.correct, a.count + b.count, a.examples + b.examples};
}

// JSON numbers must be finite.
std::string Num(double v) { return std::isfinite(v) ? absl::StrFormat("%.9g", v) : "null"; }

// This rank's phases over some steps, as JSON fields (",\"data_wait_s\":...").
std::string TimesJson(const StepTimes& t) {
  return absl::StrFormat(
      ",\"data_wait_s\":%s,\"forward_s\":%s,\"backward_s\":%s,\"exposed_comm_s\":%s,\"optimizer_s\":%s,"
      "\"bytes_sent_per_sample\":%s",
      Num(t.data_wait_s), Num(t.forward_s), Num(t.backward_s), Num(t.exposed_comm_s), Num(t.optimizer_s),
      Num(t.bytes_per_example()));
}

std::string EpochJson(const EpochMetrics& m, const TrainLoopOptions& o, bool has_test, float loss_scale) {
  std::string s = absl::StrFormat(
      "{\"event\":\"epoch\",\"epoch\":%d,\"epochs\":%d,\"step\":%d,\"world_size\":%d,"
      "\"batch_size\":%d,\"loss\":%s,\"accuracy\":%s,\"train_examples\":%d",
      m.epoch, o.epochs, m.step, o.world_size, o.batch_size, Num(m.train.loss()), Num(m.train.accuracy()),
      m.train.examples);
  if (o.report_perplexity) {
    absl::StrAppendFormat(&s, ",\"perplexity\":%s,\"train_predictions\":%d", Num(std::exp(m.train.loss())),
                          m.train.count);
  }
  if (has_test) {
    absl::StrAppendFormat(&s, ",\"test_loss\":%s,\"test_accuracy\":%s,\"test_examples\":%d", Num(m.test.loss()),
                          Num(m.test.accuracy()), m.test.examples);
    if (o.report_perplexity) {
      absl::StrAppendFormat(&s, ",\"test_perplexity\":%s,\"test_predictions\":%d", Num(std::exp(m.test.loss())),
                            m.test.count);
    }
  }
  absl::StrAppendFormat(&s,
                        ",\"seconds\":%s,\"samples_per_s\":%s,\"data_wait_s\":%s,\"forward_s\":%s,"
                        "\"backward_s\":%s,\"optimizer_s\":%s,\"skipped_steps\":%d,"
                        "\"loss_scale\":%s,\"peak_rss_bytes\":[%s]",
                        Num(m.seconds), Num(m.samples_per_second), Num(m.data_wait_s), Num(m.forward_s),
                        Num(m.backward_s), Num(m.optimizer_s), m.skipped_steps, Num(loss_scale),
                        absl::StrJoin(m.peak_rss_bytes, ","));
  absl::StrAppendFormat(&s, ",\"exposed_comm_s\":%s,\"bytes_sent_per_sample\":%s,\"grad_accum_steps\":%d",
                        Num(m.times.exposed_comm_s), Num(m.times.bytes_per_example()), o.grad_accum_steps);
  if (o.device.is_cuda()) {
    absl::StrAppendFormat(&s, ",\"cuda_peak_allocated_bytes\":[%s],\"cuda_peak_reserved_bytes\":[%s]",
                          absl::StrJoin(m.cuda_peak_allocated_bytes, ","),
                          absl::StrJoin(m.cuda_peak_reserved_bytes, ","));
  }
  s += "}";
  return s;
}

// One run of the loop (RunTraining): set-up, then for each epoch its
// batches (TrainEpoch, TrainBatch) and its end (FinishEpoch: evaluation,
// peak memory, metrics, checkpoint).
class Trainer {
 public:
  Trainer(const TrainLoopOptions& o, const TrainParts& p, GradScaler& scaler)
      : o_(o),
        p_(p),
        model_(p.stepper->module()),
        scaler_(scaler),
        train_(p.train_examples != nullptr ? p.train_examples : AsExamples(p.train)),
        test_(p.test_examples != nullptr ? p.test_examples
              : p.test != nullptr        ? AsExamples(p.test)
                                         : nullptr),
        grads_(p.optimizer->parameters().size()) {
    for (const NamedParameter& np : p.optimizer->parameters()) params_.push_back(np.parameter);
  }
  ~Trainer() {
    if (metrics_ != nullptr) std::fclose(metrics_);
  }

  absl::StatusOr<TrainResult> Run();

 private:
  // Where an epoch's training stopped.
  struct EpochEnd {
    int64_t batch = 0;          // Batches done.
    bool at_max_steps = false;  // Stopped by max_steps before the epoch's end.
  };

  absl::StatusOr<std::unique_ptr<DataLoader>> MakeLoader();
  // The checkpoint and trace directories, the checkpoint to resume from,
  // the trace and the metrics file. Returns where training starts.
  absl::StatusOr<train_loop_internal::Position> Start(int64_t batches, TrainResult& result);
  // Batches from `first` to the epoch's end or max_steps; `m` gets the
  // training time, the phases' times and skipped steps, `local` this rank's
  // sums.
  absl::StatusOr<EpochEnd> TrainEpoch(DataLoader& loader, int64_t epoch, int64_t first, int64_t batches,
                                      const EvalCounts& carried, EpochMetrics& m, EvalCounts& local);
  // One micro-batch, its loss gradient scaled by `loss_scale`; with `step`
  // the group's last, followed by the optimizer step. Whether the optimizer
  // stepped (GradScaler skips Inf/NaN; true without `step`).
  absl::StatusOr<bool> TrainBatch(const Batch& batch, EpochMetrics& m, EvalCounts& local, Clock::time_point t0,
                                  Clock::time_point t1, double loss_scale, bool step);
  // After a whole epoch: evaluation, every rank's peak memory, the metrics
  // line, the progress line and the epoch's checkpoint.
  absl::Status FinishEpoch(EpochMetrics& m);
  absl::Status GatherPeakMemory(EpochMetrics& m);
  absl::Status Save(int64_t epoch, int64_t batch, const EvalCounts& sums);
  absl::Status WriteTrace();
  // --log_every: the "step" line of the steps since the last one (all ranks).
  absl::Status LogSteps(const EvalCounts& local);
  void WriteMetrics(const std::string& line) {
    if (metrics_ == nullptr) return;
    std::fprintf(metrics_, "%s\n", line.c_str());
    std::fflush(metrics_);  // A crashed run keeps its lines.
  }

  const TrainLoopOptions& o_;
  const TrainParts& p_;
  Module& model_;
  GradScaler& scaler_;
  const std::shared_ptr<const ExampleDataset> train_, test_;
  std::vector<Tensor> grads_;       // The parameters' gradients, for the scaler.
  std::vector<Parameter*> params_;  // The optimizer's parameters, for clipping.
  std::optional<train_loop_internal::ProgressDisplay> progress_;
  std::unique_ptr<train_loop_internal::BatchSource> source_;
  std::unique_ptr<TraceRecorder> trace_;
  std::FILE* metrics_ = nullptr;
  int64_t step_ = 0;
  // --log_every: this rank's sums since the last "step" line, and when it was.
  EvalCounts window_;
  StepTimes window_times_;
  Clock::time_point window_start_;
  StepTimes run_times_;      // Every step this process trained.
  uint64_t bytes_mark_ = 0;  // The stepper's BytesSent after the last micro-batch.
};

absl::Status Trainer::Save(int64_t epoch, int64_t batch, const EvalCounts& sums) {
  const Clock::time_point start = Clock::now();
  // Every rank: FSDP's parameters and a sharded optimizer's state gather
  // (the state on rank 0).
  LOCKSTEP_RETURN_IF_ERROR(p_.stepper->SummonModule());
  absl::Status saved = p_.optimizer->ConsolidateState(0);
  if (saved.ok() && o_.rank == 0) {
    saved = train_loop_internal::SaveTrainerCheckpoint(o_, {epoch, batch, step_, sums}, model_, *p_.optimizer, scaler_);
  }
  absl::Status released = p_.stepper->ReleaseModule(/*write_back=*/false);
  LOCKSTEP_RETURN_IF_ERROR(saved);
  LOCKSTEP_RETURN_IF_ERROR(released);
  if (trace_ && o_.rank == 0) trace_->Complete("checkpoint", "io", start, Clock::now());
  return absl::OkStatus();
}

absl::Status Trainer::LogSteps(const EvalCounts& local) {
  const Clock::time_point now = Clock::now();
  LOCKSTEP_ASSIGN_OR_RETURN(const EvalCounts sums, SumOverRanks(window_, p_.comm));
  const double seconds = Seconds(now - window_start_);
  std::string line = absl::StrFormat("{\"event\":\"step\",\"step\":%d,\"loss\":%s,\"accuracy\":%s", step_,
                                     Num(sums.loss()), Num(sums.accuracy()));
  if (o_.report_perplexity) absl::StrAppend(&line, ",\"perplexity\":", Num(std::exp(sums.loss())));
  const double samples_per_s = seconds > 0 ? sums.examples / seconds : 0;
  absl::StrAppend(&line, ",\"samples_per_s\":", Num(samples_per_s), TimesJson(window_times_), "}");
  WriteMetrics(line);
  progress_->Line(train_loop_internal::StepLine(step_, sums, samples_per_s, window_times_, o_.report_perplexity));
  window_ = {};
  window_times_ = {};
  window_start_ = Clock::now();
  return absl::OkStatus();
}

absl::Status Trainer::WriteTrace() {
  if (!trace_) return absl::OkStatus();
  return trace_->WriteFile(absl::StrCat(o_.trace_dir, "/trace_rank", o_.rank, ".json"));
}

absl::StatusOr<std::unique_ptr<DataLoader>> Trainer::MakeLoader() {
  DistributedSamplerOptions sampler_options;
  sampler_options.num_replicas = o_.world_size;
  sampler_options.rank = o_.rank;
  sampler_options.seed = static_cast<int64_t>(o_.seed);
  sampler_options.uneven = o_.uneven_shards;
  LOCKSTEP_ASSIGN_OR_RETURN(DistributedSampler sampler, DistributedSampler::Create(train_->size(), sampler_options));
  DataLoaderOptions loader_options;
  loader_options.batch_size = o_.batch_size;
  loader_options.num_workers = o_.num_workers;
  loader_options.prefetch_factor = o_.prefetch_factor;
  loader_options.pin_memory = o_.device.is_cuda();
  return DataLoader::Create(train_, std::make_shared<DistributedSampler>(sampler), loader_options);
}

absl::StatusOr<train_loop_internal::Position> Trainer::Start(int64_t batches, TrainResult& result) {
  train_loop_internal::Position at;
  const bool checkpointing = !o_.checkpoint_dir.empty();
  if (checkpointing) {
    std::error_code ec;
    std::filesystem::create_directories(o_.checkpoint_dir, ec);
    if (ec && !std::filesystem::is_directory(o_.checkpoint_dir)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create --checkpoint_dir ", o_.checkpoint_dir, ": ", ec.message()));
    }
  }
  if (checkpointing && o_.resume) {
    LOCKSTEP_RETURN_IF_ERROR(p_.stepper->SummonModule());
    absl::StatusOr<std::optional<train_loop_internal::Restored>> loaded =
        train_loop_internal::RestoreTrainerCheckpoint(o_, model_, *p_.optimizer, scaler_, batches);
    // What a restore loaded goes into FSDP's shards.
    absl::Status released = p_.stepper->ReleaseModule(/*write_back=*/loaded.ok() && loaded->has_value());
    LOCKSTEP_RETURN_IF_ERROR(loaded.status());
    LOCKSTEP_RETURN_IF_ERROR(released);
    std::optional<train_loop_internal::Restored>& restored = *loaded;
    if (restored) {
      at = restored->at;
      step_ = at.step;
      result.resumed = true;
      result.resumed_from_step = step_;
      progress_->Line(absl::StrFormat("resumed from %s: epoch %d, batch %d of %d, step %d", restored->path,
                                      at.epoch + 1, at.batch, batches, step_));
    } else {
      progress_->Line(absl::StrCat("no checkpoint in ", o_.checkpoint_dir, "; starting fresh"));
    }
  }
  if (!o_.trace_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o_.trace_dir, ec);
    if (ec && !std::filesystem::is_directory(o_.trace_dir)) {
      return absl::FailedPreconditionError(absl::StrCat("cannot create --trace ", o_.trace_dir, ": ", ec.message()));
    }
    trace_ = std::make_unique<TraceRecorder>(o_.rank);
  }
  p_.stepper->AttachTrace(trace_.get());
  if (o_.rank == 0 && !o_.metrics_path.empty()) {
    // A resumed run continues its history.
    metrics_ = std::fopen(o_.metrics_path.c_str(), result.resumed ? "a" : "w");
    if (metrics_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot open --metrics ", o_.metrics_path, ": ", std::strerror(errno)));
    }
  }
  if (result.resumed) {
    WriteMetrics(
        absl::StrFormat("{\"event\":\"resumed\",\"epoch\":%d,\"batch\":%d,\"step\":%d}", at.epoch, at.batch, step_));
  }
  return at;
}

absl::StatusOr<TrainResult> Trainer::Run() {
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader, MakeLoader());
  LOCKSTEP_ASSIGN_OR_RETURN(source_, train_loop_internal::BatchSource::Create(*loader, o_.device, o_.device_prefetch));
  const int64_t batches = loader->num_batches();
  const bool checkpointing = !o_.checkpoint_dir.empty();
  progress_.emplace(o_, batches);
  progress_->Line(
      train_loop_internal::BatchSource::Describe(o_.device, o_.device_prefetch, o_.num_workers, o_.prefetch_factor));
  bytes_mark_ = p_.stepper->BytesSent();
  TrainResult result;
  LOCKSTEP_ASSIGN_OR_RETURN(const train_loop_internal::Position start, Start(batches, result));

  bool stop = o_.max_steps > 0 && step_ >= o_.max_steps;
  for (int64_t epoch = start.epoch; epoch < o_.epochs && !stop; ++epoch) {
    const int64_t first = epoch == start.epoch ? start.batch : 0;
    const EvalCounts carried = epoch == start.epoch ? start.carried : EvalCounts{};
    EpochMetrics m;
    m.epoch = epoch;
    EvalCounts local;
    LOCKSTEP_ASSIGN_OR_RETURN(const EpochEnd end, TrainEpoch(*loader, epoch, first, batches, carried, m, local));
    m.step = step_;
    LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts part, SumOverRanks(local, p_.comm));
    m.samples_per_second = m.seconds > 0 ? part.examples / m.seconds : 0;
    m.train = Add(part, carried);
    result.samples_per_second = m.samples_per_second;
    if (end.at_max_steps) {
      WriteMetrics(
          absl::StrFormat("{\"event\":\"stopped\",\"epoch\":%d,\"batch\":%d,\"step\":%d,\"loss\":%s,"
                          "\"accuracy\":%s,\"samples_per_s\":%s,\"checkpoint\":%s}",
                          epoch, end.batch, step_, Num(m.train.loss()), Num(m.train.accuracy()),
                          Num(m.samples_per_second), checkpointing && !o_.uneven_shards ? "true" : "false"));
      progress_->Line(absl::StrFormat("stopped at --max_steps=%d (epoch %d, batch %d of %d)%s", o_.max_steps, epoch + 1,
                                      end.batch, batches,
                                      !checkpointing     ? ""
                                      : o_.uneven_shards ? "; no checkpoint (uneven shards: epoch ends only)"
                                                         : "; checkpoint saved"));
      result.stopped_at_max_steps = true;
      break;
    }
    LOCKSTEP_RETURN_IF_ERROR(FinishEpoch(m));
    result.epochs.push_back(std::move(m));
    if (o_.max_steps > 0 && step_ >= o_.max_steps && epoch + 1 < o_.epochs) {
      stop = true;
      result.stopped_at_max_steps = true;
      progress_->Line(absl::StrFormat("stopped at --max_steps=%d (end of epoch %d)", o_.max_steps, epoch + 1));
    }
  }
  LOCKSTEP_RETURN_IF_ERROR(WriteTrace());
  result.steps = step_;
  result.breakdown = run_times_;
  return result;
}

absl::StatusOr<Trainer::EpochEnd> Trainer::TrainEpoch(DataLoader& loader, int64_t epoch, int64_t first, int64_t batches,
                                                      const EvalCounts& carried, EpochMetrics& m, EvalCounts& local) {
  const bool checkpointing = !o_.checkpoint_dir.empty();
  const int64_t n = o_.grad_accum_steps;
  model_.Train();
  LOCKSTEP_RETURN_IF_ERROR(loader.StartEpoch(epoch, first));
  LOCKSTEP_RETURN_IF_ERROR(source_->Reset());
  if (o_.uneven_shards) LOCKSTEP_RETURN_IF_ERROR(p_.stepper->BeginShard());
  const Clock::time_point epoch_start = Clock::now();
  window_ = {};
  window_times_ = {};
  window_start_ = epoch_start;
  EpochEnd end;
  end.batch = first;
  while (true) {
    // Groups of n micro-batches from the epoch's first; the last may be
    // shorter. A resumed epoch starts at a group's start (checkpoints are
    // written between groups).
    const int64_t group_start = end.batch - end.batch % n;
    const int64_t group_size = std::max<int64_t>(1, std::min(n, batches - group_start));
    const bool last_of_group = end.batch - group_start + 1 >= group_size;
    const Clock::time_point t0 = Clock::now();
    LOCKSTEP_ASSIGN_OR_RETURN(std::optional<Batch> batch, source_->Next());
    if (!batch) break;
    const Clock::time_point t1 = Clock::now();
    LOCKSTEP_RETURN_IF_ERROR(p_.stepper->SetSync(last_of_group));
    LOCKSTEP_ASSIGN_OR_RETURN(
        const bool stepped, TrainBatch(*batch, m, local, t0, t1, 1.0 / static_cast<double>(group_size), last_of_group));
    ++end.batch;
    progress_->Step(epoch, end.batch, local,
                    local.examples * o_.world_size / std::max(Seconds(Clock::now() - epoch_start), 1e-9));
    if (!last_of_group) continue;
    ++step_;
    if (!stepped) ++m.skipped_steps;
    if (o_.log_every > 0 && step_ % o_.log_every == 0) LOCKSTEP_RETURN_IF_ERROR(LogSteps(local));
    const bool epoch_done = end.batch >= batches;
    const bool at_max = o_.max_steps > 0 && step_ >= o_.max_steps;
    if (checkpointing && !epoch_done && !o_.uneven_shards &&
        (at_max || (o_.checkpoint_every > 0 && step_ % o_.checkpoint_every == 0))) {
      // Every rank takes part in the reduction; rank 0 writes.
      LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts sums, SumOverRanks(local, p_.comm));
      LOCKSTEP_RETURN_IF_ERROR(Save(epoch, end.batch, Add(sums, carried)));
    }
    if (at_max && !epoch_done) {
      end.at_max_steps = true;
      break;
    }
  }
  // Back to synchronizing: whatever runs next (a Join's shadowing, another
  // epoch) expects it.
  LOCKSTEP_RETURN_IF_ERROR(p_.stepper->SetSync(true));
  if (o_.uneven_shards) {
    // This rank's share is done: shadow the others' remaining steps.
    const Clock::time_point joined = Clock::now();
    LOCKSTEP_RETURN_IF_ERROR(p_.stepper->EndShard());
    if (trace_) trace_->Complete("join", "step", joined, Clock::now());
  }
  m.seconds = Seconds(Clock::now() - epoch_start);
  return end;
}

absl::StatusOr<bool> Trainer::TrainBatch(const Batch& batch, EpochMetrics& m, EvalCounts& local, Clock::time_point t0,
                                         Clock::time_point t1, double loss_scale, bool step) {
  if (batch.fields.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("RunTraining: a batch has ", batch.fields.size(),
                                                   " fields; the training set needs the input and the targets"));
  }
  // The input is on the device already (BatchSource).
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, p_.stepper->Forward(batch.fields[0]));
  // 1/N of accumulation goes into the loss gradient's one rounding.
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, TargetsCrossEntropy(logits, batch.fields[1], loss_scale));
  const Clock::time_point t2 = Clock::now();
  // No autograd: scaling the loss's gradient scales every gradient.
  LOCKSTEP_RETURN_IF_ERROR(scaler_.Scale(ce.grad_logits));
  LOCKSTEP_RETURN_IF_ERROR(p_.stepper->Backward(ce.grad_logits));
  const Clock::time_point t3 = Clock::now();
  const double exposed = p_.stepper->LastExposedCommSeconds();
  bool stepped = true;
  if (step) {
    for (size_t i = 0; i < grads_.size(); ++i) grads_[i] = p_.optimizer->parameters()[i].parameter->grad;
    if (o_.clip_grad_norm > 0) {
      // Clipping needs the true gradients: unscale first (Step then does not
      // unscale again), as PyTorch's recipe does.
      LOCKSTEP_RETURN_IF_ERROR(scaler_.Unscale(grads_));
      LOCKSTEP_RETURN_IF_ERROR(p_.stepper->ClipGradNorm(params_, o_.clip_grad_norm).status());
    }
    LOCKSTEP_ASSIGN_OR_RETURN(stepped, scaler_.Step(grads_, [&] { return p_.optimizer->Step(); }));
    LOCKSTEP_RETURN_IF_ERROR(scaler_.Update());
    LOCKSTEP_RETURN_IF_ERROR(p_.stepper->AfterStep(step_));
    LOCKSTEP_RETURN_IF_ERROR(p_.optimizer->ZeroGrad());
  }
  const Clock::time_point t4 = Clock::now();
  const EvalCounts counts{ce.loss * ce.counted, ce.correct, ce.counted,
                          batch.fields[1].dim() > 0 ? batch.fields[1].shape()[0] : 0};
  local = Add(local, counts);
  window_ = Add(window_, counts);
  StepTimes t;
  t.data_wait_s = Seconds(t1 - t0);
  t.forward_s = Seconds(t2 - t1);
  t.backward_s = Seconds(t3 - t2);
  t.exposed_comm_s = std::min(exposed, t.backward_s);
  t.optimizer_s = Seconds(t4 - t3);
  t.examples = counts.examples;
  const uint64_t sent = p_.stepper->BytesSent();
  t.bytes_sent = sent - std::min(sent, bytes_mark_);
  bytes_mark_ = sent;
  m.times += t;
  window_times_ += t;
  run_times_ += t;
  m.data_wait_s += t.data_wait_s;
  m.forward_s += t.forward_s;
  m.backward_s += t.backward_s;
  m.optimizer_s += t.optimizer_s;
  if (trace_) {
    trace_->Complete("data wait", "step", t0, t1);
    trace_->Complete("forward", "step", t1, t2);
    trace_->Complete("backward", "step", t2, t3);
    if (step) trace_->Complete("optimizer step", "step", t3, t4);
  }
  return stepped;
}

absl::Status Trainer::FinishEpoch(EpochMetrics& m) {
  const bool has_test = test_ != nullptr;
  if (has_test) {
    const Clock::time_point start = Clock::now();
    LOCKSTEP_RETURN_IF_ERROR(p_.stepper->SummonModule());
    absl::StatusOr<EvalCounts> evaluated =
        EvaluateShard(model_, test_, o_.rank, o_.world_size, o_.batch_size, o_.num_workers, o_.device);
    LOCKSTEP_RETURN_IF_ERROR(p_.stepper->ReleaseModule(/*write_back=*/false));
    LOCKSTEP_ASSIGN_OR_RETURN(EvalCounts mine, std::move(evaluated));
    LOCKSTEP_ASSIGN_OR_RETURN(m.test, SumOverRanks(mine, p_.comm));
    if (trace_) trace_->Complete("evaluate", "eval", start, Clock::now());
  }
  LOCKSTEP_RETURN_IF_ERROR(GatherPeakMemory(m));
  WriteMetrics(EpochJson(m, o_, has_test, scaler_.scale()));
  progress_->Line(train_loop_internal::EpochLine(m, o_.epochs, has_test, o_.report_perplexity));
  if (!o_.checkpoint_dir.empty()) LOCKSTEP_RETURN_IF_ERROR(Save(m.epoch + 1, 0, EvalCounts{}));
  return WriteTrace();
}

absl::Status Trainer::GatherPeakMemory(EpochMetrics& m) {
  // Each rank fills its own slots of one sum (f64 holds byte counts exactly
  // up to 2^53). Every rank has the same device kind, so all agree on the
  // size.
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
  return absl::OkStatus();
}

}  // namespace

StepTimes& StepTimes::operator+=(const StepTimes& o) {
  data_wait_s += o.data_wait_s;
  forward_s += o.forward_s;
  backward_s += o.backward_s;
  optimizer_s += o.optimizer_s;
  exposed_comm_s += o.exposed_comm_s;
  examples += o.examples;
  bytes_sent += o.bytes_sent;
  return *this;
}

absl::StatusOr<TrainResult> RunTraining(const TrainLoopOptions& o, const TrainParts& p) {
  if (p.stepper == nullptr || p.optimizer == nullptr || (p.train == nullptr) == (p.train_examples == nullptr)) {
    return absl::InvalidArgumentError(
        "RunTraining: stepper, optimizer and one train set (train or train_examples) are required");
  }
  if (p.test != nullptr && p.test_examples != nullptr) {
    return absl::InvalidArgumentError("RunTraining: set test or test_examples, not both");
  }
  if (o.log_every < 0) {
    return absl::InvalidArgumentError(absl::StrCat("RunTraining: log_every (", o.log_every, ") must be >= 0"));
  }
  if (o.grad_accum_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("RunTraining: grad_accum_steps (", o.grad_accum_steps,
                                                   ") must be >= 1 (1: an optimizer step per batch)"));
  }
  if (o.grad_accum_steps > 1 && o.uneven_shards) {
    return absl::InvalidArgumentError(
        "RunTraining: gradient accumulation (grad_accum_steps > 1) with uneven shards: ranks with different "
        "numbers of micro-batches would end their last accumulation group at different micro-batches, so one "
        "rank would synchronize while another still accumulates; use one of them");
  }
  if (o.epochs < 1 || o.batch_size < 1 || o.checkpoint_every < 0 || o.max_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("RunTraining: epochs (", o.epochs, ") and batch_size (",
                                                   o.batch_size, ") must be >= 1, checkpoint_every (",
                                                   o.checkpoint_every, ") and max_steps (", o.max_steps, ") >= 0"));
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("RunTraining: rank ", o.rank, " outside world size ", o.world_size));
  }
  if (p.comm != nullptr && (p.comm->rank() != o.rank || p.comm->size() != o.world_size)) {
    return absl::InvalidArgumentError(absl::StrCat("RunTraining: the communicator is rank ", p.comm->rank(), " of ",
                                                   p.comm->size(), " but the options say rank ", o.rank, " of ",
                                                   o.world_size));
  }
  if (p.comm == nullptr && o.world_size != 1) {
    return absl::InvalidArgumentError(
        "RunTraining: world_size > 1 needs a communicator (metrics are summed over ranks)");
  }
  if (o.uneven_shards && o.checkpoint_every > 0) {
    return absl::InvalidArgumentError(
        "RunTraining: uneven shards (--uneven_shards) with checkpoint_every: ranks stop their shards at different "
        "steps, so a mid-epoch checkpoint has no position every rank shares; checkpoints are written at epoch "
        "ends (drop --checkpoint_every)");
  }
  if (!(o.clip_grad_norm >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RunTraining: clip_grad_norm ", o.clip_grad_norm, " must be >= 0 (0: no clipping)"));
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
