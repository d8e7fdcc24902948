// PowerSGD gradient compression, as PyTorch 1.13's powerSGD_hook
// (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py): each
// gradient matrix M (n x m) of a bucket is replaced by a rank-r
// approximation P Q^T, and only P (n x r) and Q (m x r) are all-reduced.
//
//   PowerSgdOptions options;
//   options.matrix_approximation_rank = 4;
//   options.start_powersgd_iter = 10;     // plain all-reduce before, while DDP rebuilds its buckets
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<PowerSgdHook> hook, PowerSgdHook::Create(options));
//   LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(hook)));
//
// One bucket, once start_powersgd_iter backwards have passed (PyTorch's
// algorithm; before that, the bucket divided by the world size and
// all-reduced):
//   1. Error feedback: the bucket += the error this rank's last
//      compression of this bucket left (zeros the first time); a copy is kept.
//   2. Each gradient is seen as a matrix [shape[0], numel / shape[0]]; it is
//      compressed when (n + m) r * min_compression_rate < n m, with
//      r = min(n, m, rank). The others are concatenated and all-reduced (1st
//      all-reduce), then divided by the world size.
//   3. P and Q of all compressed matrices live in two flat buffers, blocks
//      ordered by shape (the shapes in order of first appearance, then the
//      matrices of each shape in bucket order), each block row-major.
//   4. Q: with warm start, last iteration's averaged Q, orthogonalized;
//      otherwise (and the first time) random normal values, orthogonalized.
//      P = M Q, all-reduced (2nd), orthogonalized (Gram-Schmidt, with
//      orthogonalization_epsilon added to each norm); Q = M^T P, all-reduced
//      (3rd) and divided by the world size; M = P Q^T in place.
//   5. The new error is the kept copy minus the result.
// The rounds are chained on the communicator (collectives/work.h ThenWork):
// neither blocks a thread; the computation runs between them on the thread
// that completed the round before.
//
// Where lockstep differs from PyTorch:
//   * The random Q: PyTorch seeds torch's generator with a draw of
//     numpy.random.RandomState(random_seed).randint(10^9), as here (the
//     same draws), but then takes torch.randn's values, whose last bits
//     depend on the CPU's vector kernels; here they come from this seed
//     through lockstep's own normal generator (MT19937 and Box-Muller in
//     f64). Give a QInitializer to use other values (a test injects
//     PyTorch's). Every rank draws the same Q either way.
//   * Orthogonalization is Gram-Schmidt for every rank (PyTorch switches to
//     a Householder QR above rank 2): the two give the same Q up to the
//     signs of its columns and rounding, and P Q^T does not depend on the
//     signs.
//   * Buckets on the CPU only, so far (host backends: TCP, shared memory);
//     a CUDA bucket fails its Work naming the limit.
// batch_tensors_with_same_shape changes nothing here (it is PyTorch's GPU
// kernel-launch batching; the numbers are the same).
//
// One hook per DDP; its state (per bucket: error, P, Q; the iteration)
// follows PyTorch's PowerSGDState. f32 buckets only.
#ifndef LOCKSTEP_DDP_POWERSGD_HOOK_H_
#define LOCKSTEP_DDP_POWERSGD_HOOK_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "ddp/comm_hook.h"
#include "ddp/grad_bucket.h"

namespace lockstep {

std::vector<uint32_t> PowerSgdSeedDraws(uint32_t seed, int count);

// PyTorch's PowerSGDState arguments and defaults.
struct PowerSgdOptions {
  int matrix_approximation_rank = 1;
  int64_t start_powersgd_iter = 1000;
  double min_compression_rate = 2;
  bool use_error_feedback = true;
  bool warm_start = true;
  double orthogonalization_epsilon = 0;
  uint32_t random_seed = 0;
  bool batch_tensors_with_same_shape = false;
  // batched_powerSGD_hook instead: the whole bucket, zero-padded to a
  // side x side matrix (side = ceil(sqrt(numel))), compressed as one (two
  // rounds, P and Q; no part goes uncompressed). PyTorch 1.13's own fails at
  // its first compression (its _orthogonalize asserts a 3-d tensor and is
  // given a 2-d one); this follows the algorithm its code spells out, with
  // the rank capped at side.
  bool batched = false;
};

// Fills one Q block (its element count is rows * rank, row-major) of bucket
// `bucket`; `block` counts the blocks of that initialization in layout order.
using QInitializer = std::function<absl::Status(size_t bucket, size_t block, float* q, int64_t count)>;

class PowerSgdHook final : public CommHook {
 public:
  // PyTorch's check: start_powersgd_iter > 1 when error feedback or warm
  // start is on ("because PowerSGD can only be applied after the first two
  // iterations in DDP": DDP rebuilds its buckets after the first).
  static absl::StatusOr<std::unique_ptr<PowerSgdHook>> Create(PowerSgdOptions options);

  std::string name() const override { return "powersgd"; }
  std::shared_ptr<Work> Run(Communicator& comm, GradBucket& bucket) override;

  // Replaces the random Q (see above); null restores the default.
  void SetQInitializer(QInitializer init) { q_init_ = std::move(init); }

  // PowerSGDState's per-bucket state: the error, P and Q (flat f32).
  struct BucketState {
    Tensor error, p, q;
  };
  // A copy of bucket `index`'s state (undefined tensors where there is none).
  BucketState state(size_t index) const;
  // Sets it (a restart from a saved state, a test).
  void set_state(size_t index, BucketState state);
  int64_t iteration() const { return iteration_.load(); }
  void set_iteration(int64_t iteration) { iteration_.store(iteration); }
  // Elements before and after compression, summed over the compressed
  // iterations (PyTorch's compression_stats).
  int64_t numel_before_compression() const { return before_.load(); }
  int64_t numel_after_compression() const { return after_.load(); }
  const PowerSgdOptions& options() const { return options_; }

 private:
  class SeedStream;
  friend std::vector<uint32_t> PowerSgdSeedDraws(uint32_t seed, int count);
  explicit PowerSgdHook(PowerSgdOptions options);
  void MaybeIncreaseIteration(const GradBucket& bucket);
  std::shared_ptr<Work> RunBatched(Communicator& comm, GradBucket& bucket);
  // Bucket `index`'s state, made empty the first time.
  std::shared_ptr<BucketState> StateFor(size_t index);
  uint32_t NextSeed();

  const PowerSgdOptions options_;
  QInitializer q_init_;
  mutable std::mutex mu_;  // Guards buckets_ and the seed stream.
  std::map<size_t, std::shared_ptr<BucketState>> buckets_;
  std::shared_ptr<SeedStream> seeds_;
  std::atomic<int64_t> iteration_{0};
  std::atomic<int64_t> before_{0}, after_{0};
};

// The first `count` draws of numpy.random.RandomState(seed).randint(10^9):
// the seeds PyTorch's hook (and this one) takes for its random Q, one per
// initialization.
std::vector<uint32_t> PowerSgdSeedDraws(uint32_t seed, int count);

}  // namespace lockstep

#endif  // LOCKSTEP_DDP_POWERSGD_HOOK_H_
