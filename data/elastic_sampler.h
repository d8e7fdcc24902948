// ElasticSampler: DistributedSampler's epoch (PyTorch-exact while the world
// does not change), re-dealt among the live ranks when it changes in the
// middle of an epoch, so that every example of the epoch is still read once.
// PyTorch has no rule for this; this is lockstep's.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(ElasticSampler sampler, ElasticSampler::Create(dataset.size(), options));
//   sampler.SetEpoch(epoch);
//   ...  // 5 steps of 32 per rank on 4 ranks; then a rank is lost
//   LOCKSTEP_RETURN_IF_ERROR(sampler.Reshard(/*consumed=*/5 * 32 * 4, /*world=*/3, /*rank=*/new_rank));
//   std::vector<int64_t> mine = sampler.Indices();  // this rank's share of what is left
//
// The rule:
//   * An epoch's list L starts as DistributedSampler's: the order O
//     (torch.randperm(N) from seed + epoch, or 0..N-1) padded to a multiple
//     of the world size W by repeating its start (cut with drop_last). Rank r
//     reads L[r], L[r + W], L[r + 2W], ...
//   * When the world becomes W' (its ranks renumbered 0..W'-1) after the
//     group has read the first c entries of L (c a multiple of W: the
//     committed steps' batches of every rank; a step that was not committed
//     counts as not read), L becomes L[c:] padded by repeating its own start
//     to a multiple of W' (cut with drop_last), and reading starts at its
//     beginning.
//   * So an epoch reads every example of O once, plus the padding: fewer than
//     W entries per world (as PyTorch pads once), repeats of the epoch's own
//     entries.
// Its state, to give a newcomer (ddp/heal.h carries strings), is State():
// "<epoch>/<the epoch's first world>/<c:W' per change, comma-separated>";
// SetState takes it.
// `uneven` is refused (Join has no place in an elastic group).
#ifndef LOCKSTEP_DATA_ELASTIC_SAMPLER_H_
#define LOCKSTEP_DATA_ELASTIC_SAMPLER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/distributed_sampler.h"
#include "data/sampler.h"

namespace lockstep {

class ElasticSampler : public Sampler {
 public:
  // options.num_replicas and options.rank: the world at the epoch's start.
  static absl::StatusOr<ElasticSampler> Create(int64_t dataset_size, const DistributedSamplerOptions& options);

  // A new epoch, in the world of now (its changes forgotten; the world is
  // the one the last change left).
  void SetEpoch(int64_t epoch) override;
  int64_t epoch() const { return epoch_; }

  // The world became `world`, this rank `rank` of it, after the group read
  // `consumed` entries of the current list.
  absl::Status Reshard(int64_t consumed, int64_t world, int64_t rank);

  // This rank's entries of the current list, in order.
  std::vector<int64_t> Indices() const override;
  int64_t size() const override;
  // The current list's length (a multiple of the world size).
  int64_t list_size() const;
  int64_t world() const { return world_; }
  int64_t rank() const { return rank_; }

  // "<epoch>/<first world>/<c:W,c:W>" (see above).
  std::string State() const;
  // Takes a peer's State(), this rank `rank` of its world; each change is
  // checked as Reshard checks it, and nothing changes on an error.
  absl::Status SetState(const std::string& state, int64_t rank);

 private:
  ElasticSampler(int64_t dataset_size, const DistributedSamplerOptions& options)
      : n_(dataset_size),
        options_(options),
        start_world_(options.num_replicas),
        world_(options.num_replicas),
        rank_(options.rank) {}
  // The current list, from the epoch's order and the changes.
  std::vector<int64_t> List() const;
  static std::vector<int64_t> Fit(std::vector<int64_t> list, int64_t world, bool drop_last);
  // Fit's length for a list of `length`.
  static int64_t FitLength(int64_t length, int64_t world, bool drop_last);

  int64_t n_;
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t start_world_;  // The world this epoch started in.
  int64_t world_;
  int64_t rank_;
  std::vector<std::pair<int64_t, int64_t>> changes_;  // (consumed, world)
};

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_ELASTIC_SAMPLER_H_
