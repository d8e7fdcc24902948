// The descriptors' pure parts against nccl-tests' definitions: each row's
// count and bytes, each rank's buffer sizes, the busbw factors; and the
// driver's percentiles and tail. (Running every descriptor on real ranks
// with --check is collectives_smoke_test's job.)
#include "tools/bench/collective_descriptor.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tools/bench/driver.h"
#include "tools/bench/ops/registry.h"

namespace lockstep {
namespace bench {
namespace {

const CollectiveDescriptor& Op(const std::string& name) {
  absl::StatusOr<const CollectiveDescriptor*> op = FindCollective(name);
  EXPECT_TRUE(op.ok()) << op.status();
  return **op;
}

TEST(CollectiveDescriptorTest, EveryDescriptorIsComplete) {
  ASSERT_EQ(AllCollectives().size(), 10u);
  for (const CollectiveDescriptor& op : AllCollectives()) {
    SCOPED_TRACE(op.name);
    EXPECT_NE(op.count, nullptr);
    EXPECT_NE(op.bytes, nullptr);
    EXPECT_NE(op.shape, nullptr);
    EXPECT_NE(op.bus_factor, nullptr);
    EXPECT_NE(op.fill, nullptr);
    EXPECT_NE(op.launch, nullptr);
    EXPECT_NE(op.count_wrong, nullptr);
  }
}

TEST(CollectiveDescriptorTest, UnknownOpListsTheNames) {
  const absl::StatusOr<const CollectiveDescriptor*> op = FindCollective("all_reduce_x");
  ASSERT_FALSE(op.ok());
  EXPECT_EQ(op.status().message(),
            "--op=all_reduce_x is not a collective; use all_reduce, all_gather, all_gather_v, reduce_scatter, "
            "broadcast, reduce, gather, scatter, all_to_all or send_recv");
}

TEST(CollectiveDescriptorTest, BusFactorsAreNcclTests) {
  for (int n : {1, 2, 3, 8}) {
    const double share = static_cast<double>(n - 1) / n;
    EXPECT_DOUBLE_EQ(Op("all_reduce").bus_factor(n), 2 * share);
    for (const char* name : {"all_gather", "all_gather_v", "reduce_scatter", "gather", "scatter", "all_to_all"}) {
      EXPECT_DOUBLE_EQ(Op(name).bus_factor(n), share) << name;
    }
    for (const char* name : {"broadcast", "reduce", "send_recv"}) EXPECT_DOUBLE_EQ(Op(name).bus_factor(n), 1) << name;
  }
}

// 1 MiB of f32 on 3 ranks: the row's count and bytes, and rank 1's buffers.
TEST(CollectiveDescriptorTest, RowsAndBuffers) {
  const int64_t bytes = 1 << 20, element = 4;
  const int n = 3;
  struct Want {
    const char* name;
    int64_t count, row_bytes, input, output;
  };
  const int64_t whole = bytes / element, block = bytes / (element * n);
  for (const Want& w : std::vector<Want>{
           {"all_reduce", whole, bytes, whole, whole},
           {"broadcast", whole, bytes, whole, whole},
           {"reduce", whole, bytes, whole, whole},
           {"send_recv", whole, bytes, whole, whole},
           {"all_gather", block, block * n * element, block, block * n},
           {"gather", block, block * n * element, block, block * n},
           {"reduce_scatter", block, block * n * element, block * n, block},
           {"scatter", block, block * n * element, block * n, block},
           {"all_to_all", whole / n * n, whole / n * n * element, whole / n * n, whole / n * n},
       }) {
    const CollectiveDescriptor& op = Op(w.name);
    const int64_t count = op.count(bytes, element, n);
    EXPECT_EQ(count, w.count) << w.name;
    EXPECT_EQ(op.bytes(count, element, n), w.row_bytes) << w.name;
    const BufferShape shape = op.shape(count, n, 1);
    EXPECT_EQ(shape.input, w.input) << w.name;
    EXPECT_EQ(shape.output, w.output) << w.name;
    EXPECT_TRUE(shape.counts.empty()) << w.name;
  }
}

// all_gather_v: rank r's block proportional to r + 1, the last taking the
// rest, together the row's count.
TEST(CollectiveDescriptorTest, AllGatherVBlocks) {
  const CollectiveDescriptor& op = Op("all_gather_v");
  EXPECT_EQ(op.count(4096, 4, 3), 1024);
  for (int rank = 0; rank < 3; ++rank) {
    const BufferShape shape = op.shape(1024, 3, rank);
    EXPECT_EQ(shape.counts, (std::vector<int64_t>{170, 341, 513}));
    EXPECT_EQ(shape.input, shape.counts[rank]);
    EXPECT_EQ(shape.output, 1024);
  }
  EXPECT_EQ(op.shape(0, 2, 0).counts, (std::vector<int64_t>{0, 0}));
}

TEST(CollectiveDescriptorTest, RefusesWhatAnOpCannotRun) {
  EXPECT_FALSE(Op("all_to_all").validate(DType::kBool, 2).ok());
  EXPECT_TRUE(Op("all_to_all").validate(DType::kF32, 2).ok());
  EXPECT_EQ(Op("send_recv").validate(DType::kF32, 1).message(), "--op=send_recv needs at least 2 ranks, not 1");
  EXPECT_TRUE(Op("send_recv").validate(DType::kF32, 2).ok());
  EXPECT_EQ(Op("all_reduce").validate, nullptr);
}

// The known values are small integers, so sums of a few ranks are exact.
TEST(CollectiveDescriptorTest, KnownValues) {
  EXPECT_EQ(InputValue(0, 0), 0);
  EXPECT_EQ(InputValue(2, 3), 4);  // (3 x 3 + 2) % 7
  EXPECT_EQ(ReducedValue(ReduceOp::kSum, 3, 3), 2 + 3 + 4);
  EXPECT_EQ(ReducedValue(ReduceOp::kAvg, 3, 3), 3);
  EXPECT_EQ(ReducedValue(ReduceOp::kMax, 3, 3), 4);
  EXPECT_EQ(ReducedValue(ReduceOp::kMin, 3, 3), 2);
  EXPECT_EQ(ReducedValue(ReduceOp::kProd, 3, 3), 2 * 3 * 4);
}

// The checks' table of one period gives ReducedValue itself at every index.
TEST(CollectiveDescriptorTest, ReducedValuesRepeatReducedValue) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
    for (int n : {1, 2, 7, 64}) {
      const ReducedValues table(op, n);
      for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{6}, int64_t{7}, int64_t{13}, int64_t{1} << 33}) {
        EXPECT_EQ(table(i), ReducedValue(op, n, i)) << ReduceOpName(op) << " n " << n << " i " << i;
      }
    }
  }
}

TEST(CollectiveDescriptorTest, CheckCountsWrongElements) {
  absl::StatusOr<Tensor> t = Tensor::Zeros({8}, DType::kF32);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(FillKnownValues(*t, 1).ok());
  EXPECT_EQ(CountWrongIn(*t, 0, 8, [](int64_t i) { return InputValue(1, i); }), 0);
  t->data<float>()[5] = 100;
  EXPECT_EQ(CountWrongIn(*t, 0, 8, [](int64_t i) { return InputValue(1, i); }), 1);
  EXPECT_EQ(CountWrongIn(*t, 2, 3, [](int64_t i) { return InputValue(1, 2 + i); }), 0);
}

TEST(DriverTest, NearestRankPercentile) {
  const std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_EQ(Percentile(v, 50), 3);
  EXPECT_EQ(Percentile(v, 95), 5);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile({7}, 99), 7);
}

TEST(DriverTest, TailCountsStallsBeyondTenTimesTheMedian) {
  std::vector<double> times(100, 1.0);
  times[10] = 25;  // A stall: 24 over the median.
  times[20] = 9;   // Slow, not a stall.
  const TailFigures tail = TailOf(times, 1.0);
  EXPECT_EQ(tail.max, 25);
  EXPECT_EQ(tail.stalls, 1);
  EXPECT_DOUBLE_EQ(tail.stall, 24.0 / 100);
  EXPECT_EQ(tail.p99, 9);
}

}  // namespace
}  // namespace bench
}  // namespace lockstep
