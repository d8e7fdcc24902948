// char_transformer_trainer: a character-level GPT
// (interop/torch/models/char_transformer.h, 6 layers x 384, context 128) on
// Debian's fortunes (data/char_corpus.h), a libtorch model under lockstep's
// DDP and training loop; loss, accuracy and perplexity per byte, and a
// generated sample at the end.
//
//   bazel run --config=opt //interop/torch/trainers:char_transformer_trainer -- --nproc=2
//
// Flags: interop/torch/trainers/torch_trainer.h's, and --fortunes (the
// corpus folder), --context, --layers, --dim, --heads, --sample_length,
// --temperature. Defaults here: AdamW with lr 1e-3, batch 16 per rank,
// --max_steps=100 (a full epoch is 18078 windows), --log_every=10. The
// vocabulary and the model's sizes are saved with every checkpoint and
// checked on resume.
#include <torch/nn/functional/activation.h>
#include <torch/torch.h>
#include <torch/utils.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/char_corpus.h"
#include "interop/torch/bridge/torch_module.h"
#include "interop/torch/models/char_transformer.h"
#include "interop/torch/trainers/torch_trainer.h"
#include "trainers/trainer_setup.h"

ABSL_FLAG(std::string, fortunes, lockstep::kDefaultFortunesDir,
          "the corpus: a folder of fortune files (Debian's fortunes package)");
ABSL_FLAG(int64_t, context, 128, "tokens (bytes) per window, and the model's positions");
ABSL_FLAG(int64_t, layers, 6, "Transformer blocks");
ABSL_FLAG(int64_t, dim, 384, "model width");
ABSL_FLAG(int64_t, heads, 6, "attention heads (must divide --dim)");
ABSL_FLAG(int64_t, sample_length, 200, "bytes generated after training (0: none)");
ABSL_FLAG(double, temperature, 0.8, "sampling temperature of the generated sample (0: greedy)");

namespace lockstep {
namespace interop {
namespace {

// Continues `prompt` by `length` ids, each drawn from softmax(logits /
// temperature) of the last position (the argmax at temperature 0), the
// input cropped to the model's last `context` ids.
absl::StatusOr<std::vector<int64_t>> Generate(CharTransformerImpl& model, std::vector<int64_t> ids, int64_t length,
                                              double temperature, uint64_t seed) {
  try {
    torch::NoGradGuard no_grad;
    model.eval();
    at::Generator gen = at::detail::createCPUGenerator(seed);
    const int64_t context = model.options().context;
    for (int64_t i = 0; i < length; ++i) {
      const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - context);
      torch::Tensor input =
          torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end()), torch::kLong).unsqueeze(0);
      torch::Tensor last = model.forward(input).select(1, input.size(1) - 1).squeeze(0);
      int64_t next;
      if (temperature <= 0) {
        next = last.argmax().item<int64_t>();
      } else {
        torch::Tensor probs = torch::softmax(last / temperature, -1);
        next = at::multinomial(probs, 1, false, gen).item<int64_t>();
      }
      ids.push_back(next);
    }
    model.train();
    return ids;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("generating the sample: libtorch raised: ", e.what()));
  }
}

absl::StatusOr<TorchTrainerSpec> MakeSpec(const TrainerConfig& config) {
  CharTransformerOptions model_options;
  model_options.context = absl::GetFlag(FLAGS_context);
  model_options.layers = absl::GetFlag(FLAGS_layers);
  model_options.dim = absl::GetFlag(FLAGS_dim);
  model_options.heads = absl::GetFlag(FLAGS_heads);
  if (model_options.context < 1 || model_options.layers < 1 || model_options.dim < 1 || model_options.heads < 1 ||
      model_options.dim % model_options.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--context, --layers, --dim and --heads must be >= 1 and --heads must divide --dim (got --dim=",
                     model_options.dim, " --heads=", model_options.heads, ")"));
  }
  const int64_t sample_length = absl::GetFlag(FLAGS_sample_length);
  const double temperature = absl::GetFlag(FLAGS_temperature);
  if (sample_length < 0 || !(temperature >= 0)) {
    return absl::InvalidArgumentError("--sample_length and --temperature must be >= 0");
  }
  CharCorpusOptions corpus_options;
  corpus_options.dir = absl::GetFlag(FLAGS_fortunes);
  corpus_options.context = model_options.context;
  LOCKSTEP_ASSIGN_OR_RETURN(CharCorpus loaded, CharCorpus::Load(corpus_options));
  auto corpus = std::make_shared<const CharCorpus>(std::move(loaded));
  model_options.vocab_size = corpus->vocabulary().size();

  TorchTrainerSpec spec;
  spec.language_model = true;
  spec.train = CharWindows(corpus, CorpusSplit::kTrain);
  spec.test = CharWindows(corpus, CorpusSplit::kTest);
  spec.data_description =
      absl::StrCat("fortunes (", corpus_options.dir, ": ", corpus->num_files(), " files, ",
                   corpus->num_windows(CorpusSplit::kTrain), " train and ", corpus->num_windows(CorpusSplit::kTest),
                   " test windows of ", model_options.context, " bytes, vocabulary ", corpus->vocabulary().size(), ")");
  spec.model_description = absl::StrCat("char-transformer (", model_options.layers, " layers x ", model_options.dim,
                                        ", ", model_options.heads, " heads, context ", model_options.context, ")");
  spec.checkpoint_metadata["data.char_vocabulary"] = corpus->vocabulary().ToJson();
  spec.checkpoint_metadata["model.char_transformer"] = absl::StrCat(
      "{\"vocab_size\":", model_options.vocab_size, ",\"context\":", model_options.context,
      ",\"layers\":", model_options.layers, ",\"dim\":", model_options.dim, ",\"heads\":", model_options.heads, "}");
  // The Impl, for the sample: make_model is called once per rank.
  auto impl = std::make_shared<std::shared_ptr<CharTransformerImpl>>();
  spec.make_model = [model_options, impl](uint64_t seed, bool sharded) -> absl::StatusOr<std::unique_ptr<TorchModule>> {
    torch::manual_seed(seed);
    CharTransformerOptions options = model_options;
    options.shard_blocks = sharded;
    CharTransformer model(options);
    *impl = model.ptr();
    return TorchModule::Create(model);
  };
  const uint64_t seed = config.seed;
  spec.after_training = [impl, corpus, sample_length, temperature, seed](TorchModule&) -> absl::Status {
    if (sample_length == 0 || *impl == nullptr) return absl::OkStatus();
    // The prompt: the first 32 bytes of the first test window.
    std::vector<int64_t> input(corpus->context()), target(corpus->context());
    LOCKSTEP_RETURN_IF_ERROR(corpus->GetWindow(CorpusSplit::kTest, 0, absl::MakeSpan(input), absl::MakeSpan(target)));
    input.resize(std::min<size_t>(input.size(), 32));
    const size_t prompt = input.size();
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                              Generate(**impl, std::move(input), sample_length, temperature, seed));
    LOCKSTEP_ASSIGN_OR_RETURN(std::string prompt_text,
                              corpus->vocabulary().Decode(absl::MakeConstSpan(ids).subspan(0, prompt)));
    LOCKSTEP_ASSIGN_OR_RETURN(std::string text, corpus->vocabulary().Decode(absl::MakeConstSpan(ids).subspan(prompt)));
    std::printf("char_transformer_trainer: sample (temperature %g) after the prompt \"%s\":\n%s%s\n---\n", temperature,
                absl::CEscape(prompt_text).c_str(), prompt_text.c_str(), text.c_str());
    return absl::OkStatus();
  };
  return spec;
}

}  // namespace
}  // namespace interop
}  // namespace lockstep

int main(int argc, char** argv) {
  using namespace lockstep::interop;
  TorchTrainerInfo info;
  info.program = "char_transformer_trainer";
  info.extra_usage =
      "  --fortunes=/usr/share/games/fortunes  --context=128  --layers=6  --dim=384  --heads=6\n"
      "  --sample_length=200  --temperature=0.8\n"
      "  (defaults here: --optimizer=adamw --lr=0.001 --batch_size=16 --max_steps=100 --log_every=10;\n"
      "   --dataset and --synthetic_* do not apply)\n";
  info.defaults = {
      {"optimizer", "adamw"}, {"lr", "0.001"}, {"batch_size", "16"}, {"max_steps", "100"}, {"log_every", "10"}};
  info.unused_flags = {"model", "amp", "device", "freeze", "dataset", "synthetic_train_size", "synthetic_test_size"};
  return TorchTrainerMain(argc, argv, info, MakeSpec);
}
