#include "ddp/powersgd_hook.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/work_promise.h"
#include "core/kernels.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "nn/math.h"

namespace lockstep {

class PowerSgdHook::SeedStream {
 public:
  explicit SeedStream(uint32_t seed) : mt_(seed) {}
  // numpy's legacy rk_interval(999999999): 30-bit masks of 32-bit MT19937
  // outputs, rejected above the bound.
  uint32_t Next() {
    for (;;) {
      const uint32_t v = mt_.Next32() & 0x3FFFFFFFu;
      if (v <= 999999999u) return v;
    }
  }

 private:
  Mt19937 mt_;
};

std::vector<uint32_t> PowerSgdSeedDraws(uint32_t seed, int count) {
  PowerSgdHook::SeedStream stream(seed);
  std::vector<uint32_t> out;
  for (int i = 0; i < count; ++i) out.push_back(stream.Next());
  return out;
}

namespace {

// A Work that has already failed with `status`.
std::shared_ptr<Work> Failed(absl::Status status) { return WorkPromise::Completed(std::move(status)); }

// Normal values from `seed` (MT19937, Box-Muller in f64).
void FillNormal(uint32_t seed, float* out, int64_t count) {
  Mt19937 gen(seed);
  for (int64_t i = 0; i < count; i += 2) {
    const double u1 = (static_cast<double>(gen.Next32()) + 1.0) / 4294967296.0;  // (0, 1]
    const double u2 = static_cast<double>(gen.Next32()) / 4294967296.0;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(radius * std::cos(2.0 * M_PI * u2));
    if (i + 1 < count) out[i + 1] = static_cast<float>(radius * std::sin(2.0 * M_PI * u2));
  }
}

// Modified Gram-Schmidt on the columns of a rows x cols row-major matrix, in
// place, in f32 as PyTorch's _orthogonalize_gram_schmidt: each column divided
// by its norm (+ epsilon), then its projection removed from the later ones.
// Each norm and projection sum is taken in f64 and rounded once.
void Orthogonalize(float* a, int64_t rows, int64_t cols, double epsilon) {
  for (int64_t i = 0; i < cols; ++i) {
    double ss = 0.0;
    for (int64_t row = 0; row < rows; ++row) ss += static_cast<double>(a[row * cols + i]) * a[row * cols + i];
    float denominator = static_cast<float>(std::sqrt(ss));
    if (epsilon != 0) denominator += static_cast<float>(epsilon);
    for (int64_t row = 0; row < rows; ++row) a[row * cols + i] /= denominator;
    for (int64_t j = i + 1; j < cols; ++j) {
      double dot = 0.0;
      for (int64_t row = 0; row < rows; ++row) dot += static_cast<double>(a[row * cols + i]) * a[row * cols + j];
      const float s = static_cast<float>(dot);
      for (int64_t row = 0; row < rows; ++row) {
        const float projection = s * a[row * cols + i];
        a[row * cols + j] -= projection;
      }
    }
  }
}

// One compressed matrix: a view of the bucket and its P and Q blocks.
struct Block {
  Tensor m;  // [n, cols] view of the bucket
  Tensor p;  // [n, r] view of the P buffer
  Tensor q;  // [cols, r] view of the Q buffer
};

}  // namespace

absl::StatusOr<std::unique_ptr<PowerSgdHook>> PowerSgdHook::Create(PowerSgdOptions options) {
  if (options.matrix_approximation_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PowerSGD: matrix_approximation_rank ", options.matrix_approximation_rank, " must be >= 1"));
  }
  if ((options.use_error_feedback || options.warm_start) && options.start_powersgd_iter <= 1) {
    return absl::InvalidArgumentError(
        "Expect `start_powerSGD_iter` > 1 if `use_error_feedback` or `warm_start` is enabled, because PowerSGD can "
        "only be applied after the first two iterations in DDP.");
  }
  if (!(options.min_compression_rate >= 0) || !(options.orthogonalization_epsilon >= 0)) {
    return absl::InvalidArgumentError("PowerSGD: min_compression_rate and orthogonalization_epsilon must be >= 0");
  }
  return std::unique_ptr<PowerSgdHook>(new PowerSgdHook(options));
}

PowerSgdHook::PowerSgdHook(PowerSgdOptions options)
    : options_(options), seeds_(std::make_shared<SeedStream>(options.random_seed)) {}

uint32_t PowerSgdHook::NextSeed() {
  std::lock_guard<std::mutex> lock(mu_);
  return seeds_->Next();
}

PowerSgdHook::BucketState PowerSgdHook::state(size_t index) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buckets_.find(index);
  return it == buckets_.end() ? BucketState{} : *it->second;
}

void PowerSgdHook::set_state(size_t index, BucketState state) {
  std::lock_guard<std::mutex> lock(mu_);
  buckets_[index] = std::make_shared<BucketState>(std::move(state));
}

std::shared_ptr<PowerSgdHook::BucketState> PowerSgdHook::StateFor(size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<BucketState>& slot = buckets_[index];
  if (slot == nullptr) slot = std::make_shared<BucketState>();
  return slot;
}

void PowerSgdHook::MaybeIncreaseIteration(const GradBucket& bucket) {
  if (bucket.is_last()) iteration_.fetch_add(1);
}

std::shared_ptr<Work> PowerSgdHook::Run(Communicator& comm, GradBucket& bucket) {
  const Tensor buffer = bucket.buffer();
  const int world = comm.size();
  if (iteration_.load() < options_.start_powersgd_iter) {
    // PyTorch's _allreduce_fut: divide first, then sum.
    MaybeIncreaseIteration(bucket);
    if (absl::Status s = Divide(buffer, world); !s.ok()) return Failed(s);
    return comm.AllReduce(buffer, ReduceOp::kSum);
  }
  if (buffer.dtype() != DType::kF32 || !buffer.device().is_cpu()) {
    return Failed(absl::UnimplementedError(absl::StrCat(
        "PowerSGD: bucket ", bucket.index(), " is ", buffer.DebugString(),
        "; the compression runs on f32 CPU buckets so far (use the host backend, or the fp16/bf16 compression "
        "hooks on CUDA)")));
  }
  if (options_.batched) return RunBatched(comm, bucket);
  const size_t index = bucket.index();
  // Only this bucket's chain touches its state, so it is read unlocked.
  const std::shared_ptr<BucketState> state = StateFor(index);
  const bool have_q = state->p.defined() && state->q.defined();
  // 1. Error feedback.
  Tensor copy;
  if (options_.use_error_feedback) {
    if (state->error.defined() && state->error.numel() == buffer.numel()) {
      if (absl::Status s = ReduceInto(ReduceOp::kSum, state->error, buffer); !s.ok()) return Failed(s);
    } else {
      absl::StatusOr<Tensor> zeros = Tensor::Zeros({buffer.numel()}, DType::kF32);
      if (!zeros.ok()) return Failed(zeros.status());
      state->error = *zeros;
    }
    absl::StatusOr<Tensor> c = buffer.Clone();
    if (!c.ok()) return Failed(c.status());
    copy = *c;
  }
  // 2. Which matrices are compressed; the others in one buffer.
  const int64_t rank_option = options_.matrix_approximation_rank;
  std::vector<Tensor> uncompressed;
  std::vector<std::pair<Shape, Tensor>> compressed;  // [n, m] matrix views, bucket order
  int64_t numel_uncompressed = 0;
  for (const Tensor& view : bucket.views()) {
    if (view.dim() == 0) return Failed(absl::InvalidArgumentError("PowerSGD: a 0-d gradient cannot be a matrix"));
    const int64_t n = view.shape()[0], m = n == 0 ? 0 : view.numel() / n;
    const int64_t r = std::min({n, m, rank_option});
    const int64_t before = n * m, after = (n + m) * r;
    before_.fetch_add(before);
    if (static_cast<double>(after) * options_.min_compression_rate < static_cast<double>(before)) {
      absl::StatusOr<Tensor> matrix = view.Reshape({n, m});
      if (!matrix.ok()) return Failed(matrix.status());
      compressed.push_back({Shape{n, m}, *matrix});
      after_.fetch_add(after);
    } else {
      uncompressed.push_back(view);
      numel_uncompressed += view.numel();
      after_.fetch_add(before);
    }
  }
  absl::StatusOr<Tensor> flat = Tensor::Empty({numel_uncompressed}, DType::kF32);
  if (!flat.ok()) return Failed(flat.status());
  Tensor unc = *flat;
  {
    int64_t at = 0;
    for (const Tensor& t : uncompressed) {
      absl::Status s = unc.Flat(at, t.numel())->CopyFrom(t);
      if (!s.ok()) return Failed(s);
      at += t.numel();
    }
  }
  // 3. The blocks, grouped by shape in order of first appearance.
  std::vector<Block> blocks;
  int64_t p_size = 0, q_size = 0;
  {
    std::vector<Shape> shapes;
    for (const auto& [shape, m] : compressed) {
      if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
    }
    for (const Shape& shape : shapes) {
      for (const auto& [s, m] : compressed) {
        if (s != shape) continue;
        const int64_t r = std::min({shape[0], shape[1], rank_option});
        blocks.push_back({m, Tensor(), Tensor()});
        p_size += shape[0] * r;
        q_size += shape[1] * r;
      }
    }
  }
  const bool randomize = !options_.warm_start || !have_q || state->p.numel() != p_size || state->q.numel() != q_size;
  if (randomize) {
    absl::StatusOr<Tensor> p = Tensor::Empty({p_size}, DType::kF32), q = Tensor::Empty({q_size}, DType::kF32);
    if (!p.ok() || !q.ok()) return Failed(p.ok() ? q.status() : p.status());
    state->p = *p;
    state->q = *q;
  }
  {
    int64_t pa = 0, qa = 0;
    for (Block& b : blocks) {
      const int64_t n = b.m.shape()[0], m = b.m.shape()[1], r = std::min({n, m, rank_option});
      b.p = *state->p.Flat(pa, n * r)->Reshape({n, r});
      b.q = *state->q.Flat(qa, m * r)->Reshape({m, r});
      pa += n * r;
      qa += m * r;
    }
  }
  // 4. Q, then P = M Q.
  if (randomize && !blocks.empty()) {
    const uint32_t seed = NextSeed();
    // One generator for the whole initialization, its values taken block by
    // block (as PyTorch's one torch.randn per block after one manual_seed).
    std::vector<float> values(static_cast<size_t>(q_size));
    if (!q_init_) FillNormal(seed, values.data(), q_size);
    int64_t at = 0;
    for (size_t k = 0; k < blocks.size(); ++k) {
      float* q = blocks[k].q.data<float>();
      const int64_t count = blocks[k].q.numel();
      if (q_init_) {
        if (absl::Status s = q_init_(index, k, q, count); !s.ok()) return Failed(s);
      } else {
        std::copy(values.begin() + at, values.begin() + at + count, q);
      }
      at += count;
    }
  }
  for (Block& b : blocks) {
    Orthogonalize(b.q.data<float>(), b.q.shape()[0], b.q.shape()[1], options_.orthogonalization_epsilon);
    if (absl::Status s = Gemm(b.m, false, b.q, false, b.p); !s.ok()) return Failed(s);
  }
  PowerSgdHook* self = this;
  const double epsilon = options_.orthogonalization_epsilon;
  const bool warm_start = options_.warm_start;
  Communicator* c = &comm;
  const bool is_last = bucket.is_last();
  return comm.AllReduce(unc, ReduceOp::kSum)
      ->ThenWork([c, world, unc, uncompressed, state]() -> absl::StatusOr<std::shared_ptr<Work>> {
        LOCKSTEP_RETURN_IF_ERROR(Divide(unc, world));
        int64_t at = 0;
        for (const Tensor& t : uncompressed) {
          LOCKSTEP_ASSIGN_OR_RETURN(Tensor part, unc.Flat(at, t.numel()));
          LOCKSTEP_ASSIGN_OR_RETURN(Tensor dst, t.Reshape({t.numel()}));
          LOCKSTEP_RETURN_IF_ERROR(dst.CopyFrom(part));
          at += t.numel();
        }
        return c->AllReduce(state->p, ReduceOp::kSum);
      })
      ->ThenWork([c, blocks, epsilon, state]() -> absl::StatusOr<std::shared_ptr<Work>> {
        for (const Block& b : blocks) {
          Orthogonalize(b.p.data<float>(), b.p.shape()[0], b.p.shape()[1], epsilon);
          LOCKSTEP_RETURN_IF_ERROR(Gemm(b.m, true, b.p, false, b.q));
        }
        return c->AllReduce(state->q, ReduceOp::kSum);
      })
      ->Then([self, world, blocks, state, buffer, copy, warm_start, is_last]() -> absl::Status {
        LOCKSTEP_RETURN_IF_ERROR(Divide(state->q, world));
        for (const Block& b : blocks) LOCKSTEP_RETURN_IF_ERROR(Gemm(b.p, false, b.q, true, b.m));
        if (copy.defined()) {
          // error = copy - result.
          Tensor& error = state->error;
          const float* x = copy.data<float>();
          const float* y = buffer.data<float>();
          float* e = error.data<float>();
          for (int64_t i = 0; i < buffer.numel(); ++i) e[i] = x[i] - y[i];
        }
        // Without warm start the next iteration draws new ones (PyTorch
        // clears every bucket's; each bucket here drops its own, as only
        // its own chain may touch its state).
        if (!warm_start) state->p = state->q = Tensor();
        if (is_last) self->iteration_.fetch_add(1);
        return absl::OkStatus();
      });
}

// batched_powerSGD_hook: the whole bucket, zero-padded to side x side with
// side = ceil(sqrt(numel)), as one matrix; two rounds (P, Q), no
// uncompressed part.
std::shared_ptr<Work> PowerSgdHook::RunBatched(Communicator& comm, GradBucket& bucket) {
  const Tensor buffer = bucket.buffer();
  const int world = comm.size();
  const size_t index = bucket.index();
  const int64_t total = buffer.numel();
  const int64_t side = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(total))));
  const int64_t padded = side * side;
  // PyTorch does not cap the rank; Gram-Schmidt needs rank <= side.
  const int64_t r = std::min<int64_t>(options_.matrix_approximation_rank, std::max<int64_t>(side, 1));
  before_.fetch_add(total);
  after_.fetch_add(side * options_.matrix_approximation_rank * 2);
  const std::shared_ptr<BucketState> state = StateFor(index);
  const bool have_q = state->p.defined() && state->q.defined() && state->q.numel() == side * r;
  absl::StatusOr<Tensor> m_flat = Tensor::Zeros({padded}, DType::kF32);
  if (!m_flat.ok()) return Failed(m_flat.status());
  Tensor matrix_flat = *m_flat;
  if (absl::Status s = matrix_flat.Flat(0, total)->CopyFrom(*buffer.Reshape({total})); !s.ok()) return Failed(s);
  Tensor copy;
  if (options_.use_error_feedback) {
    if (state->error.defined() && state->error.numel() == padded) {
      if (absl::Status s = ReduceInto(ReduceOp::kSum, state->error, matrix_flat); !s.ok()) return Failed(s);
    } else {
      absl::StatusOr<Tensor> zeros = Tensor::Zeros({padded}, DType::kF32);
      if (!zeros.ok()) return Failed(zeros.status());
      state->error = *zeros;
    }
    absl::StatusOr<Tensor> c = matrix_flat.Clone();
    if (!c.ok()) return Failed(c.status());
    copy = *c;
  }
  const Tensor matrix = *matrix_flat.Reshape({side, side});
  if (!options_.warm_start || !have_q) {
    absl::StatusOr<Tensor> p = Tensor::Empty({side, r}, DType::kF32), q = Tensor::Empty({side, r}, DType::kF32);
    if (!p.ok() || !q.ok()) return Failed(p.ok() ? q.status() : p.status());
    state->p = *p;
    state->q = *q;
    const uint32_t seed = NextSeed();
    if (q_init_) {
      if (absl::Status s = q_init_(index, 0, state->q.data<float>(), side * r); !s.ok()) return Failed(s);
    } else {
      FillNormal(seed, state->q.data<float>(), side * r);
    }
  }
  const Tensor p = state->p.Reshape({side, r}).value(), q = state->q.Reshape({side, r}).value();
  // PyTorch's batched hook orthogonalizes without epsilon.
  Orthogonalize(q.data<float>(), side, r, 0.0);
  if (absl::Status s = Gemm(matrix, false, q, false, p); !s.ok()) return Failed(s);
  PowerSgdHook* self = this;
  const bool warm_start = options_.warm_start;
  const bool is_last = bucket.is_last();
  Communicator* c = &comm;
  return comm.AllReduce(p, ReduceOp::kSum)
      ->ThenWork([c, matrix, p, q, side, r]() -> absl::StatusOr<std::shared_ptr<Work>> {
        Orthogonalize(p.data<float>(), side, r, 0.0);
        LOCKSTEP_RETURN_IF_ERROR(Gemm(matrix, true, p, false, q));
        return c->AllReduce(q, ReduceOp::kSum);
      })
      ->Then(
          [self, world, matrix, matrix_flat, p, q, state, buffer, copy, total, warm_start, is_last]() -> absl::Status {
            LOCKSTEP_RETURN_IF_ERROR(Divide(q, world));
            LOCKSTEP_RETURN_IF_ERROR(Gemm(p, false, q, true, matrix));
            if (copy.defined()) {
              const float* x = copy.data<float>();
              const float* y = matrix_flat.data<float>();
              float* e = state->error.data<float>();
              for (int64_t i = 0; i < matrix_flat.numel(); ++i) e[i] = x[i] - y[i];
            }
            LOCKSTEP_ASSIGN_OR_RETURN(Tensor part, matrix_flat.Flat(0, total));
            LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, buffer.Reshape({total}));
            LOCKSTEP_RETURN_IF_ERROR(out.CopyFrom(part));
            if (!warm_start) state->p = state->q = Tensor();
            if (is_last) self->iteration_.fetch_add(1);
            return absl::OkStatus();
          });
}

}  // namespace lockstep
