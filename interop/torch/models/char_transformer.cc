#include "interop/torch/models/char_transformer.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>

#include <cmath>
#include <limits>
#include <vector>

namespace lockstep {
namespace interop {

CharTransformerBlockImpl::CharTransformerBlockImpl(int64_t dim, int64_t heads) : heads_(heads) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  qkv = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj = register_module("proj", torch::nn::Linear(dim, dim));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  fc1 = register_module("fc1", torch::nn::Linear(dim, 4 * dim));
  fc2 = register_module("fc2", torch::nn::Linear(4 * dim, dim));
}

torch::Tensor CharTransformerBlockImpl::forward(torch::Tensor x) {
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads_;
  std::vector<torch::Tensor> parts = qkv(ln1(x)).split(d, /*dim=*/2);
  auto heads = [&](const torch::Tensor& p) { return p.view({b, t, heads_, hd}).transpose(1, 2); };
  const torch::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  torch::Tensor att = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  const torch::Tensor future = torch::ones({t, t}, torch::kBool).tril().logical_not();
  att = torch::softmax(att.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  const torch::Tensor y = att.matmul(v).transpose(1, 2).contiguous().view({b, t, d});
  x = x + proj(y);
  return x + fc2(torch::gelu(fc1(ln2(x))));
}

CharTransformerImpl::CharTransformerImpl(const CharTransformerOptions& o) : options_(o) {
  TORCH_CHECK(o.heads > 0 && o.dim % o.heads == 0, "CharTransformer: heads (", o.heads, ") must divide dim (", o.dim,
              ")");
  tok_emb = register_module("tok_emb", torch::nn::Embedding(o.vocab_size, o.dim));
  pos_emb = register_module("pos_emb", torch::nn::Embedding(o.context, o.dim));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.layers; ++i) {
    CharTransformerBlock block(o.dim, o.heads);
    if (o.shard_blocks) {
      blocks->push_back(Sharded(block));
    } else {
      blocks->push_back(block);
    }
  }
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({o.dim})));
  head = register_module("head", torch::nn::Linear(o.dim, o.vocab_size));
}

torch::Tensor CharTransformerImpl::forward(torch::Tensor ids) {
  const int64_t t = ids.size(1);
  TORCH_CHECK(t <= options_.context, "CharTransformer: ", t, " positions; the model has context ", options_.context);
  torch::Tensor x = tok_emb(ids) + pos_emb(torch::arange(t, torch::kLong));
  for (const auto& block : *blocks) {
    auto* sharded = block->as<ShardedImpl<CharTransformerBlockImpl>>();
    x = sharded != nullptr ? sharded->forward(x) : block->as<CharTransformerBlockImpl>()->forward(x);
  }
  return head(ln_f(x));
}

torch::Tensor CharTransformerLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets.view({-1}));
}

}  // namespace interop
}  // namespace lockstep
