// The training loop shared by the single-process and DDP trainers: epochs
// over a DistributedSampler, a prefetching DataLoader, an optimizer, optional
// loss scaling, evaluation, JSON-lines metrics, a progress display, a Chrome
// trace and checkpoint/resume that loses nothing.
//
//   LocalStepper stepper(*model);                       // or DdpStepper (ddp_stepper.h)
//   TrainParts parts;
//   parts.stepper = &stepper;
//   parts.optimizer = optimizer.get();
//   parts.train = train_set;
//   parts.test = test_set;
//   TrainLoopOptions options;
//   options.epochs = 3;
//   options.checkpoint_dir = "/tmp/ckpt";
//   options.resume = true;
//   LOCKSTEP_ASSIGN_OR_RETURN(TrainResult result, RunTraining(options, parts));
//
// What differs between one process and DDP is only how a batch goes forward
// and backward: the ModelStepper (trainers/model_stepper.h). Everything the
// ranks must agree on (the sampler's shard, the reductions of metrics, when
// to checkpoint) is decided here from numbers every rank has, so all ranks
// issue the same collectives in the same order.
//
// One step: data wait (DataLoader::Next), forward (stepper Forward + loss),
// backward (loss gradient scaled when the scaler is enabled, stepper
// Backward: with DDP this includes waiting for the gradient all-reduce),
// optimizer (GradScaler::Step + Update, ZeroGrad). Each is timed for the
// metrics and recorded in the trace.
//
// Gradient accumulation (grad_accum_steps = N > 1): batch_size stays the
// per-rank micro-batch, and an optimizer step is taken after every N
// micro-batches, so it sees N x batch_size x world_size examples. The
// micro-batches of an epoch form groups of N from its first one; the first
// N-1 of a group run forward and backward without synchronizing
// (ModelStepper::SetSync(false): DDP's no_sync, so no communication), the
// last one synchronizes, and each micro-batch's loss gradient is scaled by
// 1/N (folded into the cross-entropy's one rounding), as PyTorch's recipe
// `(loss / N).backward()` under `no_sync`. The epoch's last group may be
// partial, of r < N micro-batches: it steps too, with each loss scaled by
// 1/r, so every optimizer step takes the mean of its micro-batches' mean
// losses (no micro-batch is dropped or carried into the next epoch). The
// GradScaler scales every micro-batch's loss, checks the accumulated
// gradients for Inf/NaN once per optimizer step, and skips (and backs off)
// that one step; clipping, the optimizer, ZeroGrad and AfterStep run once per
// optimizer step. Steps are optimizer steps everywhere: max_steps,
// checkpoint_every, log_every, the metrics' "step" and checkpoints (which
// are written only between groups, and record N: a resume with another N is
// refused). With N = 1 every micro-batch is a step, exactly as before.
// Uneven shards (ranks with different micro-batch counts) are refused with
// N > 1: a rank's last group would end while another's is still open.
//
// Device prefetch: with a CUDA `device` (and device_prefetch), the loader's
// next batch is copied to the device on a side stream from pinned memory
// while the current step computes and communicates, and the compute stream
// waits for that copy through an event before the batch is used
// (trainers/device_prefetch.h); on the CPU the loader's workers prefetch
// (num_workers x prefetch_factor batches). The first line rank 0 prints says
// which ("data: ...").
//
// Where the time goes: each step's data wait, forward, backward and
// optimizer time, the exposed communication (the part of backward spent
// waiting for gradient reductions after the local backward had finished,
// ModelStepper::LastExposedCommSeconds) and the bytes the stepper's
// communicator sent go into the epoch metrics, the "step" lines of
// log_every (as seconds over the last N steps, and a line rank 0 prints:
// each phase's share of the step and the bytes sent per example) and the
// run's totals (TrainResult::breakdown), which StepBreakdownLine turns into
// the trainers' last line: "exposed communication N %" and the bound.
//
// Checkpoints (checkpoint_dir non-empty): every rank first lets the
// optimizer gather its state (Optimizer::ConsolidateState: a sharded
// ZeroRedundancyOptimizer's reaches rank 0), then rank 0 writes
// "<dir>/step-<10-digit step>.safetensors" (nn/checkpoint/checkpoint.h, atomic) every
// checkpoint_every steps and after each epoch's evaluation, and keeps the
// two newest that look loadable (anything else named like a checkpoint, a
// damaged file or a FIFO, directory or symlink, is left alone and reported
// on stderr, never counted). A checkpoint holds the model, the optimizer,
// the GradScaler ("scaler." metadata), the modules' extra state (dropout
// counters: the only random state besides the sampler, which is a function
// of seed and epoch), the epoch and the batches done in it, and the epoch's
// running loss and accuracy sums (reduced over ranks). With DDP the
// replicas, optimizers and scalers are identical on every rank, so rank 0's
// file restores any rank. With `resume` the newest loadable checkpoint is
// restored (older ones are tried in turn; an error if none of them loads)
// and the run continues at the next batch: a run stopped after k steps and
// resumed ends with exactly the parameters of an uninterrupted one. Without
// a checkpoint the run starts fresh, so a restarted group resumes by itself.
//
// Metrics (metrics_path, rank 0) are JSON lines: "epoch" after each epoch's
// evaluation (the fields of EpochMetrics; "peak_rss_bytes" always,
// "cuda_peak_allocated_bytes" and "cuda_peak_reserved_bytes" when `device`
// is CUDA, each an array over ranks), "resumed" and "stopped".
//
// Data: a classification Dataset (train, test), or any ExampleDataset
// (train_examples, test_examples) whose field 0 is the model's input and
// field 1 its integer targets. The loss is cross-entropy over the last
// dimension of the model's output (TargetsCrossEntropy,
// nn/last_dim_cross_entropy.h): logits [N, C] with targets [N], or, for a
// sequence model, logits [B, T, C] with targets [B, T]. Loss and accuracy
// are per prediction; samples/s counts examples.
//
// With log_every = N > 0, a "step" line (step, loss and accuracy of the last
// N steps over all ranks, samples/s of those steps, and this rank's
// data_wait_s, forward_s, backward_s, exposed_comm_s, optimizer_s and
// bytes_sent_per_sample over them) is written every N steps, and rank 0
// prints the same as a line; every rank takes part in its reduction. With report_perplexity, the epoch
// lines and metrics carry exp(loss) too ("perplexity", "test_perplexity").
// checkpoint_metadata is written into every checkpoint (a vocabulary, a model
// configuration); a resume refuses a checkpoint whose value of one of these
// keys differs from this run's.
//
// Evaluation (trainers/evaluation.h) counts every test example exactly
// once over the ranks, summed through `comm`.
#ifndef LOCKSTEP_TRAINERS_TRAIN_LOOP_H_
#define LOCKSTEP_TRAINERS_TRAIN_LOOP_H_

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "amp/grad_scaler.h"
#include "collectives/communicator.h"
#include "core/device.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "data/example_dataset.h"
#include "nn/module.h"
#include "nn/optimizer.h"
#include "trainers/evaluation.h"
#include "trainers/model_stepper.h"
#include "trainers/trace.h"
// Moved out of this header; included so that code that found them here still compiles.
#include "core/peak_rss.h"              // PeakRssBytes: moved to core/peak_rss.h
#include "data/strided_sampler.h"       // StridedSampler: moved to data/strided_sampler.h
#include "nn/last_dim_cross_entropy.h"  // TargetsCrossEntropy: moved to nn/last_dim_cross_entropy.h

namespace lockstep {

enum class ProgressMode {
  kAuto,  // a bar when the stream is a terminal, else one line per epoch
  kBar,
  kLines,
  kNone,
};

struct TrainLoopOptions {
  int64_t epochs = 1;
  int64_t batch_size = 64;  // Per rank (with grad_accum_steps, the micro-batch).
  // Micro-batches per optimizer step (see above); 1: no accumulation.
  int64_t grad_accum_steps = 1;
  // With a CUDA device: copy the next batch on a side stream while the step
  // runs (see above); false: copy each batch when it is used.
  bool device_prefetch = true;
  int num_workers = 0;  // DataLoader threads (0: batches made in the loop).
  int prefetch_factor = 2;
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 0;  // Sampler shuffling (seed + epoch), recorded in checkpoints.
  Device device = Device::Cpu();

  std::string checkpoint_dir;    // Empty: no checkpoints.
  int64_t checkpoint_every = 0;  // Steps between checkpoints; 0: epoch ends only.
  bool resume = false;
  int64_t max_steps = 0;  // Stop after this many steps in all (resumed ones count); 0: no limit.

  // Each rank reads its own share without DistributedSampler's padding
  // (DistributedSamplerOptions::uneven), so ranks may take different numbers
  // of steps; the stepper's BeginShard/EndShard bracket each epoch.
  // checkpoint_every is refused with it (a mid-epoch position differs
  // between ranks), and a stop at max_steps saves no checkpoint.
  bool uneven_shards = false;
  // > 0: after backward (and GradScaler::Unscale), the gradients are clipped
  // to this global L2 norm (nn/clip_grad.h, PyTorch's clip_grad_norm_).
  double clip_grad_norm = 0;

  std::string metrics_path;        // JSON lines (rank 0); empty: none.
  int64_t log_every = 0;           // A "step" metrics line every this many steps; 0: none.
  bool report_perplexity = false;  // Language models: exp(loss) in lines and metrics.
  // Written into every checkpoint; must match on resume (keys must not use
  // nn/checkpoint/checkpoint.h's reserved prefixes, nor "trainer." or "scaler.").
  std::map<std::string, std::string> checkpoint_metadata;
  std::string trace_dir;  // trace_rank<r>.json per rank; empty: none.
  ProgressMode progress = ProgressMode::kAuto;
  std::FILE* progress_stream = stdout;  // Rank 0 only.
};

struct TrainParts {
  ModelStepper* stepper = nullptr;
  Optimizer* optimizer = nullptr;
  // Null or disabled: no loss scaling (f32, bf16). The loop owns the
  // per-iteration protocol (Scale, Step, Update).
  GradScaler* scaler = nullptr;
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> test;  // Null: no evaluation.
  // Instead of train / test: examples of any fields (field 0 the input,
  // field 1 the targets; see above). Set one of each pair.
  std::shared_ptr<const ExampleDataset> train_examples;
  std::shared_ptr<const ExampleDataset> test_examples;
  // Null in a single process; with DDP, the group's communicator (metrics
  // and evaluation counts are summed over it).
  Communicator* comm = nullptr;
};

// Where a rank's training time went, summed over steps (see above).
struct StepTimes {
  double data_wait_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  // The part of backward_s spent waiting for the gradients' reductions
  // after the local backward had finished (0 without communication).
  double exposed_comm_s = 0;
  int64_t examples = 0;     // This rank's training examples.
  uint64_t bytes_sent = 0;  // By this rank over the stepper's communicator.

  double total_s() const { return data_wait_s + forward_s + backward_s + optimizer_s; }
  double bytes_per_example() const { return examples > 0 ? static_cast<double>(bytes_sent) / examples : 0; }
  StepTimes& operator+=(const StepTimes& o);
};

struct EpochMetrics {
  int64_t epoch = 0;
  int64_t step = 0;               // Steps done at the end of the epoch.
  EvalCounts train;               // Over all ranks (DistributedSampler's padding included).
  EvalCounts test;                // Over all ranks, every test example once.
  double seconds = 0;             // Training time of this process's part of the epoch.
  double samples_per_second = 0;  // Training examples (all ranks) per second.
  // This rank's time in each phase of the step, seconds, summed over the epoch.
  double data_wait_s = 0, forward_s = 0, backward_s = 0, optimizer_s = 0;
  // The same with the exposed communication and the bytes sent.
  StepTimes times;
  int64_t skipped_steps = 0;  // GradScaler found Inf/NaN.
  // Per rank, since the process started: peak resident set (getrusage);
  // with a CUDA device, also the peak bytes of that device's caching
  // allocator (DefaultCudaAllocator: handed out, and held from cudaMalloc),
  // empty for CPU runs. A DataParallel run reports its `device`, the first of
  // its devices, where gradients are summed.
  std::vector<int64_t> peak_rss_bytes;
  std::vector<int64_t> cuda_peak_allocated_bytes;
  std::vector<int64_t> cuda_peak_reserved_bytes;
};

struct TrainResult {
  int64_t steps = 0;  // Total, resumed ones included.
  bool resumed = false;
  int64_t resumed_from_step = 0;
  bool stopped_at_max_steps = false;
  std::vector<EpochMetrics> epochs;  // Epochs completed by this process.
  // Training samples/s (all ranks) of the last epoch this process trained
  // in, whole or stopped by max_steps; 0 when it trained none.
  double samples_per_second = 0;
  // This rank's time in each phase and bytes sent, over every step this
  // process trained (StepBreakdownLine reports it).
  StepTimes breakdown;
};

// Each phase's share of the step, the bytes sent per example and what bounds
// the run, as the trainers print it last:
//   "step time: data wait 1 %, forward 21 %, backward 38 %, exposed
//   communication 38 %, optimizer 2 %; 4194 bytes sent per sample;
//   communication-bound: 38 % of the step waits for the all-reduce; try
//   --grad_accum_steps<comm_hint>"
// The bound is the larger of the two waits (data, exposed communication)
// when it is at least 20 % of the step (removing it would make the step at
// least 1.25x faster), else compute. `comm_hint` follows --grad_accum_steps
// in the advice (" or --comm_hook=fp16_compress" where that flag exists).
std::string StepBreakdownLine(const StepTimes& times, const std::string& comm_hint = "");

absl::StatusOr<TrainResult> RunTraining(const TrainLoopOptions& options, const TrainParts& parts);

// The regular files in `dir` named like RunTraining's checkpoints, newest
// (highest step) first: the order in which a resume tries them. Entries so
// named that are not regular files (symlinks included) are left out; empty
// when there are none or `dir` does not exist.
std::vector<std::string> ListCheckpoints(const std::string& dir);

}  // namespace lockstep

#endif  // LOCKSTEP_TRAINERS_TRAIN_LOOP_H_
