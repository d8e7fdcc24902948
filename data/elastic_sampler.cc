#include "data/elastic_sampler.h"

#include <numeric>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "data/randperm.h"

namespace lockstep {

absl::StatusOr<ElasticSampler> ElasticSampler::Create(int64_t dataset_size, const DistributedSamplerOptions& options) {
  if (options.uneven) {
    return absl::InvalidArgumentError("ElasticSampler: uneven shards are not supported (every rank reads as many)");
  }
  // DistributedSampler's checks of the arguments.
  LOCKSTEP_RETURN_IF_ERROR(DistributedSampler::Create(dataset_size, options).status());
  return ElasticSampler(dataset_size, options);
}

void ElasticSampler::SetEpoch(int64_t epoch) {
  epoch_ = epoch;
  changes_.clear();
  start_world_ = world_;
}

std::vector<int64_t> ElasticSampler::Fit(std::vector<int64_t> list, int64_t world, bool drop_last) {
  const int64_t n = static_cast<int64_t>(list.size());
  if (n == 0) return list;
  if (drop_last) {
    list.resize(static_cast<size_t>(n - n % world));
    return list;
  }
  // Padded by repeating its start, as often as needed (PyTorch's rule).
  const int64_t total = (n + world - 1) / world * world;
  for (int64_t j = n; j < total; ++j) list.push_back(list[static_cast<size_t>(j % n)]);
  return list;
}

std::vector<int64_t> ElasticSampler::List() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    const uint64_t seed = static_cast<uint64_t>(options_.seed) + static_cast<uint64_t>(epoch_);
    order = *TorchRandperm(n_, seed);  // n was checked in Create.
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), 0);
  }
  // DistributedSampler's list: drop_last cuts to (n - 1) / W per rank when
  // n % W != 0, which is Fit's cut.
  std::vector<int64_t> list = Fit(std::move(order), start_world_, options_.drop_last);
  for (const auto& [consumed, world] : changes_) {
    list = Fit(std::vector<int64_t>(list.begin() + consumed, list.end()), world, options_.drop_last);
  }
  return list;
}

int64_t ElasticSampler::FitLength(int64_t length, int64_t world, bool drop_last) {
  if (length == 0) return 0;
  return drop_last ? length - length % world : (length + world - 1) / world * world;
}

int64_t ElasticSampler::list_size() const {
  // The lengths alone: no order is drawn.
  int64_t length = FitLength(n_, start_world_, options_.drop_last);
  for (const auto& [consumed, world] : changes_) length = FitLength(length - consumed, world, options_.drop_last);
  return length;
}

std::vector<int64_t> ElasticSampler::Indices() const {
  const std::vector<int64_t> list = List();
  std::vector<int64_t> out;
  for (size_t j = static_cast<size_t>(rank_); j < list.size(); j += static_cast<size_t>(world_)) out.push_back(list[j]);
  return out;
}

int64_t ElasticSampler::size() const { return list_size() / world_; }

absl::Status ElasticSampler::Reshard(int64_t consumed, int64_t world, int64_t rank) {
  const int64_t length = list_size();
  if (world < 1 || rank < 0 || rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("ElasticSampler::Reshard: rank ", rank, " of ", world, ": expected 0 <= rank < world"));
  }
  if (consumed < 0 || consumed > length || consumed % world_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ElasticSampler::Reshard: ", consumed, " entries read of a list of ",
                                                   length, " over ", world_, " ranks; expected a multiple of ", world_,
                                                   " up to ", length));
  }
  changes_.emplace_back(consumed, world);
  world_ = world;
  rank_ = rank;
  return absl::OkStatus();
}

std::string ElasticSampler::State() const {
  std::vector<std::string> parts;
  for (const auto& [consumed, world] : changes_) parts.push_back(absl::StrCat(consumed, ":", world));
  return absl::StrCat(epoch_, "/", start_world_, "/", absl::StrJoin(parts, ","));
}

absl::Status ElasticSampler::SetState(const std::string& state, int64_t rank) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("ElasticSampler::SetState: '", state, "': ", why, " (expected <epoch>/<world>/<c:W,...>)"));
  };
  std::vector<std::string> fields = absl::StrSplit(state, '/');
  ElasticSampler copy = *this;
  copy.changes_.clear();
  if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &copy.epoch_) ||
      !absl::SimpleAtoi(fields[1], &copy.start_world_) || copy.start_world_ < 1) {
    return bad("not three fields with an epoch and a world size");
  }
  copy.world_ = copy.start_world_;
  copy.rank_ = 0;
  std::vector<std::pair<int64_t, int64_t>> parsed;
  for (absl::string_view part : absl::StrSplit(fields[2], ',', absl::SkipEmpty())) {
    std::vector<std::string> cw = absl::StrSplit(part, ':');
    int64_t consumed = 0, world = 0;
    if (cw.size() != 2 || !absl::SimpleAtoi(cw[0], &consumed) || !absl::SimpleAtoi(cw[1], &world)) {
      return bad(absl::StrCat("'", part, "' is not consumed:world"));
    }
    parsed.emplace_back(consumed, world);
  }
  for (const auto& [consumed, world] : parsed) LOCKSTEP_RETURN_IF_ERROR(copy.Reshard(consumed, world, 0));
  if (rank < 0 || rank >= copy.world_) {
    return bad(absl::StrCat("rank ", rank, " is outside its world of ", copy.world_));
  }
  copy.rank_ = rank;
  *this = std::move(copy);
  return absl::OkStatus();
}

}  // namespace lockstep
