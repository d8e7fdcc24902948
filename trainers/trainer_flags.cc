#include "trainers/trainer_flags.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

ABSL_FLAG(std::string, model, "mlp",
          "mlp (784-512-256-10), mlp:784,H1,...,10 (an MLP of these layer sizes, e.g. mlp:784,4096,2048,10 for "
          "11.6M parameters) or cnn (two conv blocks with BatchNorm2d)");
ABSL_FLAG(int64_t, epochs, 3, "epochs to train");
ABSL_FLAG(int64_t, batch_size, 64, "examples per step per rank");
ABSL_FLAG(double, lr, 0.1, "learning rate (use about 1e-3 for adam/adamw)");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd, adam or adamw");
ABSL_FLAG(std::string, dataset, "auto",
          "auto (Fashion-MNIST when dataset-fashion-mnist is installed, else synthetic), "
          "fashion-mnist, synthetic, or a directory holding the four Fashion-MNIST IDX files");
ABSL_FLAG(int64_t, synthetic_train_size, 60000, "training examples of --dataset=synthetic");
ABSL_FLAG(int64_t, synthetic_test_size, 10000, "test examples of --dataset=synthetic");
ABSL_FLAG(std::string, amp, "off", "mixed precision: off, fp16 (with loss scaling) or bf16");
ABSL_FLAG(uint64_t, seed, 0, "model initialization and sampler shuffling");
ABSL_FLAG(std::string, checkpoint_dir, "", "where checkpoints go (empty: none)");
ABSL_FLAG(int64_t, checkpoint_every, 0, "steps between checkpoints (0: at epoch ends only)");
ABSL_FLAG(bool, resume, false, "continue from the newest checkpoint in --checkpoint_dir when there is one");
ABSL_FLAG(int64_t, max_steps, 0, "stop after this many steps in all (0: no limit)");
ABSL_FLAG(std::string, metrics, "", "JSON-lines metrics file (empty: none)");
ABSL_FLAG(std::string, trace, "", "directory for Chrome traces trace_rank<r>.json (empty: none)");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda (CUDA tensors; cuda:N for a given GPU)");
ABSL_FLAG(int, num_workers, 2, "DataLoader threads per rank (0: load in the training thread)");
ABSL_FLAG(std::string, freeze, "",
          "comma-separated parameter names or prefixes to freeze (requires_grad false: no gradient, not updated, "
          "left out of DDP's buckets), e.g. 0 or 0.weight; a prefix selects the names below it (\"1\": 1.weight, "
          "1.bias, not 10.weight)");
ABSL_FLAG(int64_t, grad_accum_steps, 1,
          "micro-batches of --batch_size per optimizer step: the first N-1 accumulate gradients without "
          "communication (DDP's no_sync), each loss scaled by 1/N, so a step sees N x batch_size x ranks examples; "
          "steps (--max_steps, --checkpoint_every, --log_every) count optimizer steps");
ABSL_FLAG(int64_t, log_every, 0,
          "every N steps a \"step\" line in --metrics and on stdout: loss, accuracy, samples/s and where the time "
          "went (data wait, forward, backward, exposed communication, optimizer, bytes sent per sample); 0: none");
ABSL_FLAG(bool, device_prefetch, true,
          "with --device=cuda, copy the next batch to the GPU on a side stream while the step runs (false: copy "
          "each batch when it is used)");
ABSL_FLAG(double, clip_grad_norm, 0,
          "clip the gradients to this global L2 norm after backward (and after unscaling with --amp=fp16), as "
          "torch.nn.utils.clip_grad_norm_; 0: off");

namespace lockstep {

absl::StatusOr<std::vector<int64_t>> MlpSizes(const std::string& model) {
  std::vector<int64_t> sizes;
  for (absl::string_view part : absl::StrSplit(absl::string_view(model).substr(4), ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > (int64_t{1} << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model=", model, ": '", part, "' is not a layer size in [1, 2^20]"));
    }
    sizes.push_back(n);
  }
  if (sizes.size() < 2 || sizes.front() != 784 || sizes.back() != 10) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=", model, ": an MLP for Fashion-MNIST starts at 784 inputs and ends at 10 classes (mlp:784,...,10)"));
  }
  return sizes;
}

namespace {

constexpr char kSharedUsage[] =
    "  --model=mlp|mlp:784,H,...,10|cnn  --epochs=3  --batch_size=64  --lr=0.1  --momentum=0.9\n"
    "  --optimizer=sgd|adam|adamw  --dataset=auto|fashion-mnist|synthetic|DIR\n"
    "  --amp=off|fp16|bf16  --seed=0  --device=cpu|cuda  --num_workers=2\n"
    "  --checkpoint_dir=DIR  --checkpoint_every=N  --resume  --max_steps=N\n"
    "  --metrics=FILE.jsonl  --trace=DIR  --synthetic_train_size=N  --synthetic_test_size=N\n"
    "  --freeze=NAME[,NAME...]  --clip_grad_norm=X  --grad_accum_steps=1  --log_every=N  --nodevice_prefetch\n";

// absl keeps the usage message that ParseTrainerFlagsOrExit set.
void PrintUsage() {
  std::fprintf(stderr, "%s(--helpfull lists every flag)\n", std::string(absl::ProgramUsageMessage()).c_str());
}

[[noreturn]] void ExitWithUsage(const char* program, const std::string& problem) {
  std::fprintf(stderr, "%s: %s\n", program, problem.c_str());
  PrintUsage();
  std::exit(2);
}

}  // namespace

void ParseTrainerFlagsOrExit(int argc, char** argv, const char* program, const char* extra_usage) {
  absl::SetProgramUsageMessage(absl::StrCat("usage: ", program, " [flags]\n", kSharedUsage, extra_usage));
  // absl's own parser exits with status 1 on a bad flag; check first so that
  // every usage error is status 2, as the trainers promise.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      // absl's --help would print every flag of every linked library.
      std::fprintf(stdout, "%s(--helpfull lists every flag)\n", std::string(absl::ProgramUsageMessage()).c_str());
      std::exit(0);
    }
    if (arg.size() < 2 || arg[0] != '-') ExitWithUsage(program, "unexpected argument '" + arg + "'");
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string name = body, value;
    const size_t eq = body.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;  // --noresume
    }
    if (flag == nullptr) ExitWithUsage(program, "unknown flag --" + name);
    if (!has_value) {
      if (flag->IsOfType<bool>()) continue;
      // absl also takes "--flag value".
      if (i + 1 >= argc) ExitWithUsage(program, "--" + name + " needs a value");
      value = argv[++i];
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      ExitWithUsage(program, "--" + name + "=" + value + ": " + error);
    }
  }
  absl::ParseCommandLine(argc, argv);
}

int UsageError(const char* program, const absl::Status& status) {
  std::fprintf(stderr, "%s: %s\n", program, std::string(status.message()).c_str());
  PrintUsage();
  return 2;
}

absl::StatusOr<TrainerConfig> TrainerConfigFromFlags() {
  TrainerConfig c;
  c.model = absl::GetFlag(FLAGS_model);
  if (c.model != "mlp" && c.model != "cnn" && !absl::StartsWith(c.model, "mlp:")) {
    return absl::InvalidArgumentError(absl::StrCat("--model=", c.model, ": expected mlp, mlp:784,...,10 or cnn"));
  }
  if (absl::StartsWith(c.model, "mlp:")) LOCKSTEP_RETURN_IF_ERROR(MlpSizes(c.model).status());
  c.epochs = absl::GetFlag(FLAGS_epochs);
  if (c.epochs < 1) return absl::InvalidArgumentError("--epochs must be at least 1");
  c.batch_size = absl::GetFlag(FLAGS_batch_size);
  if (c.batch_size < 1) return absl::InvalidArgumentError("--batch_size must be at least 1");
  c.lr = absl::GetFlag(FLAGS_lr);
  if (!(c.lr > 0)) return absl::InvalidArgumentError("--lr must be > 0");
  c.momentum = absl::GetFlag(FLAGS_momentum);
  if (!(c.momentum >= 0 && c.momentum < 1)) {
    return absl::InvalidArgumentError("--momentum must be in [0, 1)");
  }
  c.optimizer = absl::GetFlag(FLAGS_optimizer);
  if (c.optimizer != "sgd" && c.optimizer != "adam" && c.optimizer != "adamw") {
    return absl::InvalidArgumentError(absl::StrCat("--optimizer=", c.optimizer, ": expected sgd, adam or adamw"));
  }
  c.dataset = absl::GetFlag(FLAGS_dataset);
  if (c.dataset.empty()) return absl::InvalidArgumentError("--dataset is empty");
  c.synthetic_train_size = absl::GetFlag(FLAGS_synthetic_train_size);
  c.synthetic_test_size = absl::GetFlag(FLAGS_synthetic_test_size);
  if (c.synthetic_train_size < 1 || c.synthetic_test_size < 0) {
    return absl::InvalidArgumentError("--synthetic_train_size must be >= 1 and --synthetic_test_size >= 0");
  }
  const std::string amp = absl::GetFlag(FLAGS_amp);
  if (amp != "off") {
    if (amp != "fp16" && amp != "bf16") {
      return absl::InvalidArgumentError(absl::StrCat("--amp=", amp, ": expected off, fp16 or bf16"));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(c.precision, ParsePrecision(amp));
    c.amp = true;
  }
  c.seed = absl::GetFlag(FLAGS_seed);
  c.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  c.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  if (c.checkpoint_every < 0) return absl::InvalidArgumentError("--checkpoint_every must be >= 0");
  c.resume = absl::GetFlag(FLAGS_resume);
  if (c.resume && c.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint_dir");
  }
  c.max_steps = absl::GetFlag(FLAGS_max_steps);
  if (c.max_steps < 0) return absl::InvalidArgumentError("--max_steps must be >= 0");
  c.metrics = absl::GetFlag(FLAGS_metrics);
  c.trace = absl::GetFlag(FLAGS_trace);
  const std::string device = absl::GetFlag(FLAGS_device);
  absl::StatusOr<Device> parsed = Device::Parse(device);
  if (!parsed.ok() || !(parsed->is_cpu() || parsed->is_cuda())) {
    return absl::InvalidArgumentError(absl::StrCat("--device=", device, ": expected cpu or cuda"));
  }
  c.device = *parsed;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_freeze), ',', absl::SkipEmpty())) {
    c.freeze.emplace_back(name);
  }
  c.clip_grad_norm = absl::GetFlag(FLAGS_clip_grad_norm);
  if (!(c.clip_grad_norm >= 0) || std::isinf(c.clip_grad_norm)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--clip_grad_norm=", c.clip_grad_norm, ": expected a finite number >= 0 (0: off)"));
  }
  c.grad_accum_steps = absl::GetFlag(FLAGS_grad_accum_steps);
  if (c.grad_accum_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--grad_accum_steps=", c.grad_accum_steps,
                                                   ": must be at least 1 (1: an optimizer step per batch)"));
  }
  c.log_every = absl::GetFlag(FLAGS_log_every);
  if (c.log_every < 0) return absl::InvalidArgumentError("--log_every must be >= 0");
  // CPU runs ignore it (the DataLoader's workers prefetch; the "data:" line says so).
  c.device_prefetch = absl::GetFlag(FLAGS_device_prefetch);
  c.num_workers = absl::GetFlag(FLAGS_num_workers);
  if (c.num_workers < 0 || c.num_workers > 64) {
    return absl::InvalidArgumentError("--num_workers must be in [0, 64]");
  }
  return c;
}

}  // namespace lockstep
