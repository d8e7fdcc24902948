// PowerSGD against PyTorch 1.13's powerSGD_hook
// (ddp/testdata/make_powersgd_golden.py: one bucket of six gradients on 2
// ranks, ranks 1 and 2, 2 plain iterations then 4 compressed ones). Each
// iteration starts from PyTorch's state after the one before (its error
// feedback, P and Q; at the first compressed iteration its random Q, which
// depend on torch's RNG kernels, injected), so a difference cannot carry
// over; the plain iterations must match bit for bit, the compressed ones
// within the radius nn/testing/error_bound.h derives for the whole round,
// ours and PyTorch's both: the error-fed matrices (one addition), P = M Q
// (dot products in any order), the sum over ranks, Gram-Schmidt (norms,
// divisions, projections), Q = M^T P, its average and P Q^T. The layout of
// P and Q (blocks grouped by shape) is compared through the stored P and Q.
// Beside it: the seed draws, DDP training on 2 ranks over chained Work (the
// compression counted), PyTorch's validation message.
#include "ddp/powersgd_hook.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/testing/group.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "ddp/distributed_data_parallel.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/sgd.h"
#include "nn/testing/error_bound.h"
#include "nn/testing/golden_file.h"

namespace lockstep {
namespace {

namespace eb = error_bound;
using Vec = std::vector<eb::Bounded>;

const GoldenFile& G() { return GoldenFile::Get("ddp/testdata/powersgd_golden.safetensors"); }

std::vector<Shape> Shapes() {
  std::vector<Shape> out;
  for (const auto& s : nlohmann::json::parse(G().meta("shapes"))) out.push_back(s.get<std::vector<int64_t>>());
  return out;
}

std::vector<float> Values(const Tensor& t) { return *t.ToVector<float>(); }

Vec Exact(const Tensor& t) {
  Vec v;
  for (float x : Values(t)) v.push_back(eb::Exact(x));
  return v;
}

void ExpectWithin(const std::vector<float>& got, const Vec& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  Tensor t = *Tensor::FromVector<float>(got);
  eb::Matrix m(1, static_cast<int64_t>(want.size()));
  m.x = want;
  const absl::Status s = eb::ExpectWithin(t, m, what);
  EXPECT_TRUE(s.ok()) << s;
}

// Gram-Schmidt on the columns of a rows x cols row-major bounded matrix.
void Orthogonalize(Vec& a, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < cols; ++i) {
    Vec col;
    for (int64_t r = 0; r < rows; ++r) col.push_back(a[r * cols + i]);
    const eb::Bounded norm = eb::Sqrt(eb::Dot(col, col));
    for (int64_t r = 0; r < rows; ++r) a[r * cols + i] = eb::Div(a[r * cols + i], norm);
    for (int64_t j = i + 1; j < cols; ++j) {
      Vec ci, cj;
      for (int64_t r = 0; r < rows; ++r) ci.push_back(a[r * cols + i]), cj.push_back(a[r * cols + j]);
      const eb::Bounded s = eb::Dot(ci, cj);
      for (int64_t r = 0; r < rows; ++r) a[r * cols + j] = eb::Sub(a[r * cols + j], eb::Mul(s, a[r * cols + i]));
    }
  }
}

// One compressed matrix of the bucket: its place and its blocks' places.
struct Layout {
  int64_t offset, n, m, r, p_at, q_at;
};

struct Reference {
  Vec out[2], error[2], p, q;
};

// One compressed iteration from exact inputs, by PyTorch's algorithm.
Reference Round(const Vec in[2], const Vec err[2], const Vec& q_start, int64_t rank) {
  const std::vector<Shape> shapes = Shapes();
  Reference ref;
  Vec mtx[2];
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < in[r].size(); ++i) mtx[r].push_back(eb::Add(in[r][i], err[r][i]));
    ref.out[r] = Vec(in[r].size());
  }
  // Uncompressed tensors: the average; compressed ones: their layout.
  std::vector<Layout> compressed;
  std::vector<Shape> order;
  int64_t offset = 0;
  std::vector<std::pair<Shape, int64_t>> matrices;
  for (const Shape& s : shapes) {
    int64_t numel = 1;
    for (int64_t d : s) numel *= d;
    const int64_t n = s[0], m = numel / n, r = std::min({n, m, rank});
    if ((n + m) * r * 2 < n * m) {
      matrices.push_back({Shape{n, m}, offset});
      if (std::find(order.begin(), order.end(), Shape{n, m}) == order.end()) order.push_back(Shape{n, m});
    } else {
      for (int64_t i = offset; i < offset + numel; ++i) {
        ref.out[0][i] = ref.out[1][i] = eb::Div(eb::Add(mtx[0][i], mtx[1][i]), eb::Exact(2.0));
      }
    }
    offset += numel;
  }
  int64_t pa = 0, qa = 0;
  for (const Shape& s : order) {
    for (const auto& [shape, at] : matrices) {
      if (shape != s) continue;
      const int64_t r = std::min({s[0], s[1], rank});
      compressed.push_back({at, s[0], s[1], r, pa, qa});
      pa += s[0] * r;
      qa += s[1] * r;
    }
  }
  ref.p = Vec(pa);
  ref.q = Vec(qa);
  for (const Layout& b : compressed) {
    Vec q0(q_start.begin() + b.q_at, q_start.begin() + b.q_at + b.m * b.r);
    Orthogonalize(q0, b.m, b.r);
    // P = sum over ranks of M_r Q0, orthogonalized.
    Vec p(b.n * b.r);
    for (int64_t i = 0; i < b.n; ++i) {
      for (int64_t c = 0; c < b.r; ++c) {
        eb::Bounded sum;
        for (int r = 0; r < 2; ++r) {
          Vec row(mtx[r].begin() + b.offset + i * b.m, mtx[r].begin() + b.offset + (i + 1) * b.m), col;
          for (int64_t j = 0; j < b.m; ++j) col.push_back(q0[j * b.r + c]);
          const eb::Bounded part = eb::Dot(row, col);
          sum = r == 0 ? part : eb::Add(sum, part);
        }
        p[i * b.r + c] = sum;
      }
    }
    Orthogonalize(p, b.n, b.r);
    // Q = average over ranks of M_r^T P.
    Vec q(b.m * b.r);
    for (int64_t j = 0; j < b.m; ++j) {
      for (int64_t c = 0; c < b.r; ++c) {
        eb::Bounded sum;
        for (int r = 0; r < 2; ++r) {
          Vec colm, colp;
          for (int64_t i = 0; i < b.n; ++i)
            colm.push_back(mtx[r][b.offset + i * b.m + j]), colp.push_back(p[i * b.r + c]);
          const eb::Bounded part = eb::Dot(colm, colp);
          sum = r == 0 ? part : eb::Add(sum, part);
        }
        q[j * b.r + c] = eb::Div(sum, eb::Exact(2.0));
      }
    }
    for (int64_t k = 0; k < b.n * b.r; ++k) ref.p[b.p_at + k] = p[k];
    for (int64_t k = 0; k < b.m * b.r; ++k) ref.q[b.q_at + k] = q[k];
    for (int64_t i = 0; i < b.n; ++i) {
      for (int64_t j = 0; j < b.m; ++j) {
        Vec prow(p.begin() + i * b.r, p.begin() + (i + 1) * b.r), qrow(q.begin() + j * b.r, q.begin() + (j + 1) * b.r);
        ref.out[0][b.offset + i * b.m + j] = ref.out[1][b.offset + i * b.m + j] = eb::Dot(prow, qrow);
      }
    }
  }
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < mtx[r].size(); ++i) ref.error[r].push_back(eb::Sub(mtx[r][i], ref.out[r][i]));
  }
  return ref;
}

// A bucket over parameters of the golden shapes.
GradBucket MakeBucket() {
  std::vector<Tensor> members;
  std::vector<size_t> indices;
  for (const Shape& s : Shapes()) {
    members.push_back(*Tensor::Zeros(s, DType::kF32));
    indices.push_back(indices.size());
  }
  return *GradBucket::Create(0, /*is_last=*/true, members, indices);
}

struct RankResult {
  std::vector<float> out, error, p, q;
};

void RunCase(const std::string& c) {
  const int64_t rank = std::stoll(G().meta(c + ".rank"));
  const int iterations = std::stoi(G().meta("iterations"));
  const int start = std::stoi(G().meta("start"));
  for (int it = 0; it < iterations; ++it) {
    SCOPED_TRACE(absl::StrCat(c, " iteration ", it));
    RankResult got[2];
    testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
      const int r = comm.rank();
      PowerSgdOptions o;
      o.matrix_approximation_rank = static_cast<int>(rank);
      o.start_powersgd_iter = start;
      LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<PowerSgdHook> hook, PowerSgdHook::Create(o));
      hook->set_iteration(it);
      if (it > start) {
        PowerSgdHook::BucketState s;
        LOCKSTEP_ASSIGN_OR_RETURN(s.error, G().at(absl::StrCat(c, ".error.", r, ".", it - 1)).Clone());
        LOCKSTEP_ASSIGN_OR_RETURN(s.p, G().at(absl::StrCat(c, ".p.", it - 1)).Clone());
        LOCKSTEP_ASSIGN_OR_RETURN(s.q, G().at(absl::StrCat(c, ".q.", it - 1)).Clone());
        hook->set_state(0, s);
      }
      hook->SetQInitializer([&](size_t bucket, size_t block, float* q, int64_t count) -> absl::Status {
        const Tensor& init = G().at(absl::StrCat(c, ".qinit.", block));
        if (init.numel() != count) return absl::InternalError(absl::StrCat("block ", block, " has ", count, " values"));
        std::copy(init.data<float>(), init.data<float>() + count, q);
        return absl::OkStatus();
      });
      GradBucket bucket = MakeBucket();
      LOCKSTEP_RETURN_IF_ERROR(bucket.buffer().CopyFrom(G().at(absl::StrCat(c, ".in.", r, ".", it))));
      LOCKSTEP_RETURN_IF_ERROR(hook->Run(comm, bucket)->Wait());
      got[r].out = Values(bucket.buffer());
      const PowerSgdHook::BucketState s = hook->state(0);
      if (s.error.defined()) got[r].error = Values(s.error);
      if (s.p.defined()) got[r].p = Values(s.p);
      if (s.q.defined()) got[r].q = Values(s.q);
      if (it >= start && hook->iteration() != it + 1) return absl::InternalError("the iteration did not advance");
      return absl::OkStatus();
    }));
    if (it < start) {
      // Divide by 2, then sum two values: one rounding, any order.
      for (int r = 0; r < 2; ++r) EXPECT_EQ(got[r].out, Values(G().at(absl::StrCat(c, ".out.", r, ".", it))));
      continue;
    }
    Vec in[2], err[2];
    for (int r = 0; r < 2; ++r) {
      in[r] = Exact(G().at(absl::StrCat(c, ".in.", r, ".", it)));
      err[r] = it > start ? Exact(G().at(absl::StrCat(c, ".error.", r, ".", it - 1))) : Vec(in[r].size(), eb::Exact(0));
    }
    Vec q_start;
    if (it > start) {
      q_start = Exact(G().at(absl::StrCat(c, ".q.", it - 1)));
    } else {
      for (int k = 0; G().has(absl::StrCat(c, ".qinit.", k)); ++k) {
        for (float v : Values(G().at(absl::StrCat(c, ".qinit.", k)))) q_start.push_back(eb::Exact(v));
      }
    }
    const Reference ref = Round(in, err, q_start, rank);
    for (int r = 0; r < 2; ++r) {
      ExpectWithin(got[r].out, ref.out[r], absl::StrCat("our output, rank ", r));
      ExpectWithin(Values(G().at(absl::StrCat(c, ".out.", r, ".", it))), ref.out[r],
                   absl::StrCat("PyTorch's output, rank ", r));
      ExpectWithin(got[r].error, ref.error[r], absl::StrCat("our error, rank ", r));
      ExpectWithin(Values(G().at(absl::StrCat(c, ".error.", r, ".", it))), ref.error[r],
                   absl::StrCat("PyTorch's error, rank ", r));
      ExpectWithin(got[r].p, ref.p, "our P");
      ExpectWithin(got[r].q, ref.q, "our Q");
    }
    ExpectWithin(Values(G().at(absl::StrCat(c, ".p.", it))), ref.p, "PyTorch's P");
    ExpectWithin(Values(G().at(absl::StrCat(c, ".q.", it))), ref.q, "PyTorch's Q");
  }
}

TEST(PowerSgdGoldenTest, RankOneMatchesPyTorch) { RunCase("r1"); }
TEST(PowerSgdGoldenTest, RankTwoMatchesPyTorch) { RunCase("r2"); }

// batched_powerSGD_hook (PyTorch 1.13's own fails at its first compression,
// so its algorithm, as its code spells it out, is the reference): a bucket
// of 22 elements padded to 5 x 5, rank 2, on 2 ranks, two compressed
// iterations (the second warm-started from the first's Q), each against
// the derived radius of that definition.
TEST(PowerSgdTest, BatchedCompressesTheWholeBucketAsOneSquareMatrix) {
  constexpr int64_t kSide = 5, kRank = 2, kTotal = 22;
  std::vector<float> inputs[2][2];  // [iteration][rank]
  for (int it = 0; it < 2; ++it) {
    for (int r = 0; r < 2; ++r) {
      Mt19937 gen(static_cast<uint64_t>(50 + 10 * it + r));
      for (int64_t i = 0; i < kTotal; ++i)
        inputs[it][r].push_back(static_cast<float>(gen.Next32() / 4294967296.0 - 0.5));
    }
  }
  std::vector<float> qinit;
  {
    Mt19937 gen(77);
    for (int64_t i = 0; i < kSide * kRank; ++i) qinit.push_back(static_cast<float>(gen.Next32() / 4294967296.0 - 0.5));
  }
  std::vector<float> out[2][2], error[2][2], q_after[2][2];
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    PowerSgdOptions o;
    o.batched = true;
    o.matrix_approximation_rank = kRank;
    o.start_powersgd_iter = 2;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<PowerSgdHook> hook, PowerSgdHook::Create(o));
    hook->set_iteration(2);
    hook->SetQInitializer([&](size_t, size_t block, float* q, int64_t count) -> absl::Status {
      if (block != 0 || count != kSide * kRank) return absl::InternalError("unexpected Q block");
      std::copy(qinit.begin(), qinit.end(), q);
      return absl::OkStatus();
    });
    std::vector<Tensor> members = {*Tensor::Zeros({5, 3}, DType::kF32), *Tensor::Zeros({7}, DType::kF32)};
    GradBucket bucket = *GradBucket::Create(0, true, members, {0, 1});
    for (int it = 0; it < 2; ++it) {
      std::copy(inputs[it][r].begin(), inputs[it][r].end(), bucket.buffer().data<float>());
      LOCKSTEP_RETURN_IF_ERROR(hook->Run(comm, bucket)->Wait());
      out[it][r] = Values(bucket.buffer());
      const PowerSgdHook::BucketState st = hook->state(0);
      error[it][r] = Values(st.error);
      q_after[it][r] = Values(st.q);
    }
    return absl::OkStatus();
  }));
  // The definition, from exact inputs (the second iteration from the first's
  // error and Q as the hook left them).
  for (int it = 0; it < 2; ++it) {
    SCOPED_TRACE(absl::StrCat("iteration ", it));
    Vec m[2];
    for (int r = 0; r < 2; ++r) {
      for (int64_t i = 0; i < kSide * kSide; ++i) {
        const eb::Bounded x = eb::Exact(i < kTotal ? inputs[it][r][i] : 0.0f);
        m[r].push_back(it == 0 ? x : eb::Add(x, eb::Exact(error[0][r][i])));
      }
    }
    Vec q0;
    for (float v : it == 0 ? qinit : q_after[0][0]) q0.push_back(eb::Exact(v));
    Orthogonalize(q0, kSide, kRank);
    Vec p(kSide * kRank), q(kSide * kRank);
    for (int64_t i = 0; i < kSide; ++i) {
      for (int64_t c = 0; c < kRank; ++c) {
        eb::Bounded sum;
        for (int r = 0; r < 2; ++r) {
          Vec row(m[r].begin() + i * kSide, m[r].begin() + (i + 1) * kSide), col;
          for (int64_t j = 0; j < kSide; ++j) col.push_back(q0[j * kRank + c]);
          sum = r == 0 ? eb::Dot(row, col) : eb::Add(sum, eb::Dot(row, col));
        }
        p[i * kRank + c] = sum;
      }
    }
    Orthogonalize(p, kSide, kRank);
    for (int64_t j = 0; j < kSide; ++j) {
      for (int64_t c = 0; c < kRank; ++c) {
        eb::Bounded sum;
        for (int r = 0; r < 2; ++r) {
          Vec colm, colp;
          for (int64_t i = 0; i < kSide; ++i) colm.push_back(m[r][i * kSide + j]), colp.push_back(p[i * kRank + c]);
          sum = r == 0 ? eb::Dot(colm, colp) : eb::Add(sum, eb::Dot(colm, colp));
        }
        q[j * kRank + c] = eb::Div(sum, eb::Exact(2.0));
      }
    }
    Vec approx;
    for (int64_t i = 0; i < kSide; ++i) {
      for (int64_t j = 0; j < kSide; ++j) {
        approx.push_back(eb::Dot(Vec(p.begin() + i * kRank, p.begin() + (i + 1) * kRank),
                                 Vec(q.begin() + j * kRank, q.begin() + (j + 1) * kRank)));
      }
    }
    for (int r = 0; r < 2; ++r) {
      ExpectWithin(out[it][r], Vec(approx.begin(), approx.begin() + kTotal), absl::StrCat("output, rank ", r));
      ExpectWithin(q_after[it][r], q, absl::StrCat("Q, rank ", r));
      Vec e;
      for (int64_t i = 0; i < kSide * kSide; ++i) e.push_back(eb::Sub(m[r][i], approx[i]));
      ExpectWithin(error[it][r], e, absl::StrCat("error, rank ", r));
    }
  }
}

TEST(PowerSgdTest, SeedsAreNumpysRandomStateDraws) {
  const std::vector<uint32_t> draws = PowerSgdSeedDraws(0, 4);
  EXPECT_EQ(draws[0], std::stoul(G().meta("r1.seed_draw")));
  EXPECT_EQ(draws, (std::vector<uint32_t>{209652396, 398764591, 924231285, 404868288}));
}

TEST(PowerSgdTest, StartBelowTwoIsRefusedInPyTorchsWords) {
  PowerSgdOptions o;
  o.start_powersgd_iter = 1;
  absl::StatusOr<std::unique_ptr<PowerSgdHook>> hook = PowerSgdHook::Create(o);
  ASSERT_FALSE(hook.ok());
  EXPECT_NE(hook.status().message().find("Expect `start_powerSGD_iter` > 1"), std::string::npos) << hook.status();
  o.use_error_feedback = o.warm_start = false;
  EXPECT_TRUE(PowerSgdHook::Create(o).ok());
}

// DDP over 2 ranks with PowerSGD from iteration 2: the ranks stay equal,
// the loss falls, the rounds are chained (nothing blocks) and the
// compressed iterations send fewer elements than they would plainly.
TEST(PowerSgdTest, DdpTrainsWithCompressedGradients) {
  std::vector<float> losses[2];
  int64_t before[2] = {0, 0}, after[2] = {0, 0};
  std::vector<std::vector<float>> final_params[2];
  testing::ExpectAllOk(testing::RunThreads(2, [&](Communicator& comm) -> absl::Status {
    const int r = comm.rank();
    Mt19937 gen(0);
    MlpOptions mlp;
    mlp.sizes = {32, 64, 32, 4};
    mlp.flatten = false;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
    DdpOptions options;
    options.bucket_cap_mb = 0.004;  // A few buckets, each with its own chain.
    options.first_bucket_bytes = 4000;
    LOCKSTEP_ASSIGN_OR_RETURN(auto ddp, DistributedDataParallel::Create(*model, comm, options));
    PowerSgdOptions o;
    o.matrix_approximation_rank = 2;
    o.start_powersgd_iter = 2;
    LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<PowerSgdHook> hook, PowerSgdHook::Create(o));
    PowerSgdHook* h = hook.get();
    LOCKSTEP_RETURN_IF_ERROR(ddp->RegisterCommHook(std::move(hook)));
    SgdOptions sgd;
    sgd.lr = 0.3;
    sgd.momentum = 0.9;
    LOCKSTEP_ASSIGN_OR_RETURN(auto opt, Sgd::Create(model->NamedParameters(), sgd));
    Mt19937 data(99);  // The same batches on both ranks' streams, split by rank below.
    for (int step = 0; step < 40; ++step) {
      Tensor x = *Tensor::Empty({16, 32}, DType::kF32), y = *Tensor::Empty({16}, DType::kI64);
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t label = static_cast<int64_t>(data.Next32() % 4);
        y.data<int64_t>()[i] = label;
        for (int64_t j = 0; j < 32; ++j) {
          const float noise = static_cast<float>(data.Next32() / 4294967296.0 - 0.5);
          x.data<float>()[i * 32 + j] = (j % 4 == label ? 1.0f : 0.0f) + noise + 0.01f * r;
        }
      }
      LOCKSTEP_RETURN_IF_ERROR(model->ZeroGrad(true));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, ddp->Forward(x));
      LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, y));
      losses[r].push_back(ce.loss);
      LOCKSTEP_RETURN_IF_ERROR(ddp->Backward(ce.grad_logits));
      LOCKSTEP_RETURN_IF_ERROR(opt->Step());
    }
    before[r] = h->numel_before_compression();
    after[r] = h->numel_after_compression();
    for (Parameter* p : model->Parameters()) final_params[r].push_back(*p->value.ToVector<float>());
    return absl::OkStatus();
  }));
  EXPECT_EQ(final_params[0], final_params[1]);
  EXPECT_LT(after[0] * 3, before[0]) << "compressed " << before[0] << " elements to " << after[0];
  EXPECT_EQ(before[0], before[1]);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) first += losses[0][i], last += losses[0][35 + i];
  EXPECT_LT(last, 0.5 * first) << "the loss did not fall: " << first / 5 << " -> " << last / 5;
}

}  // namespace
}  // namespace lockstep
