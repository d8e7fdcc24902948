#include "fsdp/sharded_optimizer.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "fsdp/flat_unit.h"

namespace lockstep {
namespace {

std::string StateName(size_t index, const std::string& key) { return absl::StrCat("state.", index, ".", key); }

}  // namespace

absl::StatusOr<std::unique_ptr<ShardedOptimizer>> ShardedOptimizer::Create(ShardView& fsdp,
                                                                           const ShardOptimizerFactory& make_local) {
  std::vector<NamedParameter> shards = fsdp.ShardParameters();
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> local, make_local(shards));
  if (local == nullptr) return absl::InvalidArgumentError("ShardedOptimizer: the factory returned no optimizer");
  std::unique_ptr<ShardedOptimizer> opt(new ShardedOptimizer(fsdp, std::move(shards), local->lr()));
  opt->local_ = std::move(local);
  std::map<std::string, size_t> index;
  const std::vector<std::string> named = fsdp.parameter_names();
  for (size_t i = 0; i < named.size(); ++i) index[named[i]] = i;
  for (size_t u = 0; u < fsdp.num_units(); ++u) {
    std::vector<size_t> members;
    for (const auto& [name, shape] : fsdp.unit_parameters(u)) members.push_back(index.at(name));
    opt->module_index_.push_back(std::move(members));
  }
  return opt;
}

absl::Status ShardedOptimizer::Step() {
  local_->set_lr(lr());
  return local_->Step();
}

absl::Status ShardedOptimizer::ConsolidateState(int to) {
  Communicator& comm = fsdp_.comm();
  consolidated_.clear();
  has_consolidated_ = false;
  std::map<std::string, Tensor> mine;
  for (const NamedTensor& t : local_->StateTensors()) mine[t.first] = t.second;
  std::map<size_t, std::map<std::string, Tensor>> whole;  // By parameter index, as a plain optimizer's.
  for (size_t u = 0; u < module_index_.size(); ++u) {
    const FlatShardLayout& layout = fsdp_.layout(u);
    const std::vector<std::pair<std::string, Shape>> params = fsdp_.unit_parameters(u);
    for (const StateKey& key : StateKeys()) {
      auto it = mine.find(StateName(u, key.key));
      if (it == mine.end()) continue;  // Not stepped yet: the same on every rank.
      if (key.scalar) {
        for (size_t g : module_index_[u]) {
          LOCKSTEP_ASSIGN_OR_RETURN(whole[g][key.key], it->second.Clone());
        }
        continue;
      }
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty({layout.padded}, DType::kF32, it->second.device()));
      absl::Status gathered = comm.AllGather(it->second, full)->Wait();
      if (!gathered.ok()) {
        return absl::Status(gathered.code(),
                            absl::StrCat("ShardedOptimizer::ConsolidateState: all-gather of ", StateName(u, key.key),
                                         " on rank ", comm.rank(), ": ", gathered.message()));
      }
      for (size_t i = 0; i < params.size(); ++i) {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor shaped, ParameterOf(layout, full, i, params[i].second));
        LOCKSTEP_ASSIGN_OR_RETURN(whole[module_index_[u][i]][key.key], shaped.Clone());
      }
    }
  }
  if (comm.rank() != to) return absl::OkStatus();
  const std::vector<StateKey> keys = StateKeys();
  for (auto& [index, entries] : whole) {
    for (const StateKey& k : keys) {
      auto it = entries.find(k.key);
      if (it != entries.end()) consolidated_.emplace_back(StateName(index, k.key), it->second);
    }
  }
  has_consolidated_ = true;
  return absl::OkStatus();
}

std::vector<NamedTensor> ShardedOptimizer::StateTensors() const {
  return has_consolidated_ ? consolidated_ : local_->StateTensors();
}

absl::Status ShardedOptimizer::LoadStateTensors(const std::vector<NamedTensor>& state) {
  const int rank = fsdp_.comm().rank();
  std::map<std::string, const Tensor*> given;
  for (const NamedTensor& t : state) given[t.first] = &t.second;
  std::set<std::string> used;
  std::vector<std::string> problems;
  std::vector<NamedTensor> local;
  for (size_t u = 0; u < module_index_.size(); ++u) {
    const FlatShardLayout& layout = fsdp_.layout(u);
    const std::vector<std::pair<std::string, Shape>> params = fsdp_.unit_parameters(u);
    for (const StateKey& key : StateKeys()) {
      std::vector<const Tensor*> found;
      for (size_t g : module_index_[u]) {
        auto it = given.find(StateName(g, key.key));
        found.push_back(it == given.end() ? nullptr : it->second);
        if (it != given.end()) used.insert(it->first);
      }
      const size_t present = std::count_if(found.begin(), found.end(), [](const Tensor* t) { return t != nullptr; });
      if (present == 0) continue;
      if (present != found.size()) {
        problems.push_back(absl::StrCat("unit '", fsdp_.unit_paths()[u], "': '", key.key,
                                        "' is given for some of its parameters only (they step together)"));
        continue;
      }
      if (key.scalar) {
        const Tensor& first = *found[0];
        bool same = first.defined() && first.numel() == 1 && first.dtype() == DType::kF32;
        for (const Tensor* t : found) {
          same = same && t->defined() && t->numel() == 1 && t->dtype() == DType::kF32 &&
                 std::memcmp(t->raw_data(), first.raw_data(), sizeof(float)) == 0;
        }
        if (!same) {
          problems.push_back(absl::StrCat("unit '", fsdp_.unit_paths()[u], "': '", key.key,
                                          "' must be one f32 scalar shared by all its parameters"));
          continue;
        }
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor copy, first.Clone());
        local.emplace_back(StateName(u, key.key), copy);
        continue;
      }
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor shard, Tensor::Zeros({layout.shard}, DType::kF32));
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor& t = *found[i];
        if (!t.defined() || t.dtype() != DType::kF32 || t.numel() != layout.numels[i]) {
          problems.push_back(absl::StrCat(StateName(module_index_[u][i], key.key), " is ",
                                          t.defined() ? t.DebugString() : "undefined", ", expected ", layout.numels[i],
                                          " f32 elements like '", params[i].first, "'"));
          continue;
        }
        LOCKSTEP_RETURN_IF_ERROR(CopyIntoShard(layout, rank, i, t, shard));
      }
      local.emplace_back(StateName(u, key.key), shard);
    }
  }
  for (const auto& [name, t] : given) {
    if (used.count(name) == 0) problems.push_back(absl::StrCat("unexpected '", name, "'"));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("ShardedOptimizer::LoadStateTensors on rank ", rank, ": ",
                                                   absl::StrJoin(problems, "; "), "; nothing was loaded"));
  }
  has_consolidated_ = false;
  consolidated_.clear();
  return local_->LoadStateTensors(local);
}

}  // namespace lockstep
