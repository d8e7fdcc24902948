#include "ddp/zero_redundancy_optimizer.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {
namespace {

// "state.<index>.<key>" -> index and key; false for anything else.
bool SplitStateName(const std::string& name, size_t* index, std::string* key) {
  const std::vector<std::string> parts = absl::StrSplit(name, absl::MaxSplits('.', 2));
  if (parts.size() != 3 || parts[0] != "state" || !absl::SimpleAtoi(parts[1], index)) return false;
  *key = parts[2];
  return true;
}

}  // namespace

std::vector<std::vector<size_t>> ZeroRedundancyOptimizer::Partition(const std::vector<int64_t>& numels,
                                                                    int world_size) {
  std::vector<std::vector<size_t>> out(static_cast<size_t>(std::max(world_size, 0)));
  if (world_size < 1) return out;
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Python's sorted(..., reverse=True) is stable: ties keep their order.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> sizes(out.size(), 0);
  for (size_t i : order) {
    // The first rank with the strictly smallest total.
    size_t rank = 0;
    for (size_t r = 1; r < sizes.size(); ++r) {
      if (sizes[r] < sizes[rank]) rank = r;
    }
    out[rank].push_back(i);
    sizes[rank] += numels[i];
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ZeroRedundancyOptimizer>> ZeroRedundancyOptimizer::Create(
    std::vector<NamedParameter> params, Communicator& comm, const LocalOptimizerFactory& make_local) {
  if (params.empty()) return absl::InvalidArgumentError("ZeroRedundancyOptimizer got an empty parameter list");
  const DType dtype = params[0].parameter->value.dtype();
  const Device device = params[0].parameter->value.device();
  std::vector<int64_t> numels;
  for (const NamedParameter& p : params) {
    const Tensor& v = p.parameter->value;
    if (v.dtype() != dtype || v.device() != device) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ZeroRedundancyOptimizer only supports using the same dense type for all parameters but got both ",
          DTypeName(dtype), " on ", device.ToString(), " and ", DTypeName(v.dtype()), " on ", v.device().ToString(),
          " (parameter '", p.name, "')"));
    }
    numels.push_back(v.numel());
  }
  std::vector<std::vector<size_t>> partition = Partition(numels, comm.size());
  std::vector<NamedParameter> shard;
  for (size_t i : partition[comm.rank()]) shard.push_back(params[i]);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> local, make_local(std::move(shard)));
  if (local == nullptr) return absl::InvalidArgumentError("ZeroRedundancyOptimizer: the factory made no optimizer");
  const double lr = local->lr();
  std::unique_ptr<ZeroRedundancyOptimizer> zero(new ZeroRedundancyOptimizer(std::move(params), lr, comm));
  zero->partition_ = std::move(partition);
  zero->local_ = std::move(local);
  return zero;
}

absl::Status ZeroRedundancyOptimizer::Step() {
  has_consolidated_ = false;
  consolidated_.clear();
  local_->set_lr(lr());
  LOCKSTEP_RETURN_IF_ERROR(local_->Step());
  // Every rank's share from its owner, rank 0's first (_sync_params).
  std::vector<std::shared_ptr<Work>> works;
  for (size_t r = 0; r < partition_.size(); ++r) {
    for (size_t i : partition_[r])
      works.push_back(comm_.Broadcast(parameters()[i].parameter->value, static_cast<int>(r)));
  }
  absl::Status first;
  for (const std::shared_ptr<Work>& w : works) {
    absl::Status s = w->Wait();
    if (!s.ok() && first.ok()) first = s;
  }
  if (!first.ok()) {
    return absl::Status(first.code(), absl::StrCat("ZeroRedundancyOptimizer::Step on rank ", comm_.rank(),
                                                   ": broadcasting the updated parameters: ", first.message()));
  }
  return absl::OkStatus();
}

std::vector<NamedTensor> ZeroRedundancyOptimizer::OwnStateGlobal() const {
  std::vector<NamedTensor> out;
  const std::vector<size_t>& mine = partition_[comm_.rank()];
  for (const auto& [name, tensor] : local_->StateTensors()) {
    size_t local_index = 0;
    std::string key;
    if (!SplitStateName(name, &local_index, &key) || local_index >= mine.size()) continue;
    out.emplace_back(absl::StrCat("state.", mine[local_index], ".", key), tensor);
  }
  return out;
}

absl::Status ZeroRedundancyOptimizer::ConsolidateState(int to) {
  if (to < 0 || to >= comm_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeroRedundancyOptimizer::ConsolidateState: rank ", to, " is not in a group of ", comm_.size()));
  }
  std::vector<NamedTensor> mine = OwnStateGlobal();
  LOCKSTEP_ASSIGN_OR_RETURN(std::string bytes, SerializeSafetensors(mine));
  std::vector<std::string> all;
  absl::Status s = comm_.GatherBytes(std::move(bytes), &all, to)->Wait();
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("ZeroRedundancyOptimizer::ConsolidateState on rank ", comm_.rank(),
                                               ": gathering the shards' state at rank ", to, ": ", s.message()));
  }
  has_consolidated_ = false;
  consolidated_.clear();
  if (comm_.rank() != to) return absl::OkStatus();
  // Ordered as a plain optimizer's StateTensors: by parameter index, then
  // in the optimizer's key order.
  std::map<size_t, std::map<std::string, Tensor>> by_index;
  for (size_t r = 0; r < all.size(); ++r) {
    LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile shard, ParseSafetensors(all[r], absl::StrCat("ZeRO state of rank ", r)));
    for (auto& [name, tensor] : shard.tensors) {
      size_t index = 0;
      std::string key;
      if (!SplitStateName(name, &index, &key) || index >= parameters().size()) {
        return absl::DataLossError(
            absl::StrCat("ZeroRedundancyOptimizer::ConsolidateState: rank ", r, " sent a state entry '", name, "'"));
      }
      LOCKSTEP_ASSIGN_OR_RETURN(by_index[index][key], tensor.To(parameters()[index].parameter->value.device()));
    }
  }
  const std::vector<StateKey> keys = StateKeys();
  for (auto& [index, entries] : by_index) {
    for (const StateKey& k : keys) {
      auto it = entries.find(k.key);
      if (it != entries.end()) consolidated_.emplace_back(absl::StrCat("state.", index, ".", k.key), it->second);
    }
  }
  has_consolidated_ = true;
  return absl::OkStatus();
}

std::vector<NamedTensor> ZeroRedundancyOptimizer::StateTensors() const {
  return has_consolidated_ ? consolidated_ : OwnStateGlobal();
}

absl::Status ZeroRedundancyOptimizer::LoadStateTensors(const std::vector<NamedTensor>& state) {
  std::vector<size_t> local_index(parameters().size(), SIZE_MAX);
  const std::vector<size_t>& mine = partition_[comm_.rank()];
  for (size_t l = 0; l < mine.size(); ++l) local_index[mine[l]] = l;
  std::vector<NamedTensor> own;
  for (const auto& [name, tensor] : state) {
    size_t index = 0;
    std::string key;
    if (!SplitStateName(name, &index, &key) || index >= parameters().size()) {
      return absl::InvalidArgumentError(absl::StrCat("ZeroRedundancyOptimizer::LoadStateTensors: '", name,
                                                     "' is not state.<index < ", parameters().size(), ">.<key>"));
    }
    if (local_index[index] == SIZE_MAX) continue;  // Another rank's share.
    own.emplace_back(absl::StrCat("state.", local_index[index], ".", key), tensor);
  }
  return local_->LoadStateTensors(own);
}

}  // namespace lockstep
