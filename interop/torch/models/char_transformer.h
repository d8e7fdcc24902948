// A character-level GPT as a libtorch module, for data/char_corpus.h's
// windows: token and position embeddings, `layers` pre-norm blocks (causal
// multi-head self-attention written out with Linear, matmul, a mask and
// softmax; a 4x GELU MLP; no dropout), a final LayerNorm and a linear head
// (not tied to the embedding). Defaults: 6 layers x 384, 6 heads, context
// 128, the fortunes' 114-byte vocabulary: 10,784,370 parameters (~41 MiB of
// f32). interop/torch/models/reference_models.py is its Python twin, op
// for op, with the same parameter names ("tok_emb.weight",
// "blocks.0.qkv.weight", "ln_f.bias", "head.weight", ...).
//
//   CharTransformerOptions options;
//   options.vocab_size = 114;             // a CharCorpus's vocabulary().size()
//   CharTransformer model(options);
//   torch::Tensor logits = model->forward(torch::zeros({4, 128}, torch::kLong));  // [4, 128, vocab]
//   torch::Tensor loss = CharTransformerLoss(logits, torch::zeros({4, 128}, torch::kLong));
#ifndef LOCKSTEP_INTEROP_TORCH_MODELS_CHAR_TRANSFORMER_H_
#define LOCKSTEP_INTEROP_TORCH_MODELS_CHAR_TRANSFORMER_H_

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "interop/torch/fsdp/sharded_unit.h"

#include <cstdint>

namespace lockstep {
namespace interop {

struct CharTransformerOptions {
  int64_t vocab_size = 114;
  int64_t context = 128;  // longest input (positions)
  int64_t layers = 6;
  int64_t dim = 384;
  int64_t heads = 6;  // must divide dim
  // Each block built as an FSDP unit, Sharded(CharTransformerBlock(...))
  // (interop/torch/fsdp/sharded_unit.h): the same names and initial values.
  bool shard_blocks = false;
};

class CharTransformerBlockImpl : public torch::nn::Module {
 public:
  CharTransformerBlockImpl(int64_t dim, int64_t heads);
  torch::Tensor forward(torch::Tensor x);  // [B, T, dim]

 private:
  int64_t heads_;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(CharTransformerBlock);

class CharTransformerImpl : public torch::nn::Module {
 public:
  explicit CharTransformerImpl(const CharTransformerOptions& options = {});
  // ids [B, T] (i64, T <= context) -> logits [B, T, vocab_size].
  torch::Tensor forward(torch::Tensor ids);
  const CharTransformerOptions& options() const { return options_; }

 private:
  CharTransformerOptions options_;
  torch::nn::Embedding tok_emb{nullptr}, pos_emb{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(CharTransformer);

// Mean cross-entropy of next-byte prediction over every position.
torch::Tensor CharTransformerLoss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace interop
}  // namespace lockstep

#endif  // LOCKSTEP_INTEROP_TORCH_MODELS_CHAR_TRANSFORMER_H_
