// The in-place receive paths (Transfer::consume, used over shared memory):
// over a transport that hands received bytes over in odd-sized pieces that
// split elements, the ring's all-reduce and reduce-scatter (in place and
// from a separate input) and the recursive-doubling all-reduce still give
// exact results for 1-, 2-, 4- and 8-byte
// elements and every world size 1..5.
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/algorithms/algorithm.h"
#include "collectives/algorithms/recursive_doubling_all_reduce.h"
#include "collectives/algorithms/reduce_scatter.h"
#include "collectives/algorithms/ring_all_reduce.h"
#include "collectives/testing/fake_transport.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Wraps a transport that does not consume in place: a receive with
// `consume` lands in a private buffer, and before each on_segment the newly
// arrived bytes are handed to consume in pieces of 1, 2, 3, ... 13 bytes.
class PieceByPieceTransport : public Transport {
 public:
  explicit PieceByPieceTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string PeerName(int peer) const override { return inner_->PeerName(peer); }
  TrafficCounters Traffic() const override { return inner_->Traffic(); }
  void Abort(absl::string_view reason) override { inner_->Abort(reason); }
  bool ConsumesInPlace() const override { return true; }
  absl::Status ExchangeOpen(TransferFeed& feed, Deadline deadline) override {
    return inner_->ExchangeOpen(feed, deadline);
  }

  absl::Status Exchange(absl::Span<Transfer> transfers, MessageTag tag, Deadline deadline) override {
    std::vector<Transfer> adapted(transfers.begin(), transfers.end());
    std::vector<std::unique_ptr<std::vector<char>>> buffers;
    for (Transfer& t : adapted) {
      if (!t.consume) continue;
      buffers.push_back(std::make_unique<std::vector<char>>(t.bytes));
      const char* data = buffers.back()->data();
      t.data = buffers.back()->data();
      auto consumed = std::make_shared<size_t>(0);
      auto piece = std::make_shared<size_t>(1);
      auto consume = std::move(t.consume);
      auto on_segment = std::move(t.on_segment);
      t.consume = nullptr;
      t.on_segment = [=](size_t offset, size_t length) -> absl::Status {
        while (*consumed < offset + length) {
          const size_t n = std::min(*piece, offset + length - *consumed);
          LOCKSTEP_RETURN_IF_ERROR(consume(*consumed, data + *consumed, n));
          *consumed += n;
          *piece = *piece % 13 + 1;
        }
        return on_segment ? on_segment(offset, length) : absl::OkStatus();
      };
    }
    return inner_->Exchange(absl::MakeSpan(adapted), tag, deadline);
  }

 private:
  std::unique_ptr<Transport> inner_;
};

std::vector<absl::Status> RunRanks(int n, size_t segment_bytes,
                                   const std::function<absl::Status(AlgorithmContext& ctx)>& body) {
  std::vector<std::unique_ptr<Transport>> inner = testing::FakeNetwork::Create(n, {4096});
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      PieceByPieceTransport transport(std::move(inner[r]));
      Scratch scratch;
      AlgorithmContext ctx{transport,     /*seq=*/1, 0, DeadlineIn(std::chrono::milliseconds(30000)),
                           segment_bytes, &scratch};
      results[r] = body(ctx);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

int64_t Value(int rank, int64_t i) { return (rank * 3 + i * 7) % 11; }

template <typename T>
Tensor Input(int rank, int64_t count) {
  Tensor t = *Tensor::Empty({count}, DTypeOf<T>::value);
  for (int64_t i = 0; i < count; ++i) t.data<T>()[i] = static_cast<T>(Value(rank, i));
  return t;
}

template <typename T>
void CheckAllReduceAndReduceScatter() {
  for (int n = 1; n <= 5; ++n) {
    for (int64_t count : {int64_t{1}, int64_t{5} * n + 3, int64_t{4099}}) {
      auto want = [n](int64_t i) {
        int64_t sum = 0;
        for (int r = 0; r < n; ++r) sum += Value(r, i);
        return static_cast<T>(sum);
      };
      auto results = RunRanks(n, /*segment_bytes=*/200, [&](AlgorithmContext& ctx) -> absl::Status {
        Tensor t = Input<T>(ctx.rank(), count);
        LOCKSTEP_RETURN_IF_ERROR(RingAllReduce(ctx, t, ReduceOp::kSum));
        for (int64_t i = 0; i < count; ++i) {
          if (t.data<T>()[i] != want(i)) {
            return absl::InternalError(absl::StrCat("all-reduce element ", i, " is wrong"));
          }
        }
        // Recursive doubling (the small-message all-reduce) reduces the
        // partner's pieces in place too.
        Tensor small = Input<T>(ctx.rank(), count);
        LOCKSTEP_RETURN_IF_ERROR(RecursiveDoublingAllReduce(ctx, small, ReduceOp::kSum));
        for (int64_t i = 0; i < count; ++i) {
          if (small.data<T>()[i] != want(i)) {
            return absl::InternalError(absl::StrCat("recursive-doubling all-reduce element ", i, " is wrong"));
          }
        }
        // Reduce-scatter from a separate input: chunk r of the result is final.
        const Tensor input = Input<T>(ctx.rank(), count * n);
        Tensor out = *Tensor::Empty({count * n}, DTypeOf<T>::value);
        LOCKSTEP_RETURN_IF_ERROR(RingReduceScatter(ctx, input, out, ReduceOp::kSum));
        for (int64_t i = ctx.rank() * count; i < (ctx.rank() + 1) * count; ++i) {
          if (out.data<T>()[i] != want(i)) {
            return absl::InternalError(absl::StrCat("reduce-scatter element ", i, " is wrong"));
          }
        }
        return absl::OkStatus();
      });
      for (int r = 0; r < n; ++r) ASSERT_TRUE(results[r].ok()) << n << " ranks, " << count << ": " << results[r];
    }
  }
}

TEST(RingInPlaceTest, PiecesThatSplitElementsGiveExactResults) {
  CheckAllReduceAndReduceScatter<uint8_t>();
  CheckAllReduceAndReduceScatter<int32_t>();
  CheckAllReduceAndReduceScatter<float>();
  CheckAllReduceAndReduceScatter<int64_t>();
  CheckAllReduceAndReduceScatter<double>();
}

}  // namespace
}  // namespace lockstep
