#include "tools/scale_lab/delay_queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace lockstep {
namespace scale_lab {
namespace {

DelayQueue::Options Opts(int hosts, int64_t delay_ns, int64_t rate_bps = 0, int buffers = 8) {
  DelayQueue::Options o;
  o.hosts = hosts;
  o.delay_ns = delay_ns;
  o.rate_bps = rate_bps;
  o.buffers = buffers;
  o.buffer_bytes = 64;
  return o;
}

TEST(DelayQueue, EmptyHasNoEarliest) {
  DelayQueue q(Opts(3, 100));
  EXPECT_EQ(q.Earliest(), -1);
  EXPECT_EQ(q.queued(), 0);
  q.PopEarliest();  // harmless
  EXPECT_EQ(q.queued(), 0);
}

TEST(DelayQueue, DeadlineIsArrivalPlusDelayWithoutRate) {
  DelayQueue q(Opts(2, 2000));
  int s = q.Acquire();
  ASSERT_GE(s, 0);
  EXPECT_EQ(q.Push(s, 0, 1, 1500, 10'000), 12'000);
  EXPECT_EQ(q.Earliest(), s);
  EXPECT_EQ(q.dst(s), 1);
  EXPECT_EQ(q.bytes(s), 1500);
}

TEST(DelayQueue, RateSerializesPerSourceNic) {
  // 1 Gbit/s: 1250 bytes take 10 us.
  DelayQueue q(Opts(3, 1000, 1'000'000'000));
  int a = q.Acquire(), b = q.Acquire(), c = q.Acquire(), d = q.Acquire();
  // Back-to-back on host 0's NIC: the second waits for the first.
  EXPECT_EQ(q.Push(a, 0, 1, 1250, 0), 10'000 + 1000);
  EXPECT_EQ(q.Push(b, 0, 2, 1250, 0), 20'000 + 1000);
  // Host 1's NIC is idle: no wait.
  EXPECT_EQ(q.Push(c, 1, 0, 1250, 5'000), 15'000 + 1000);
  // Host 0's NIC free again (nic_free = 20 us < 50 us).
  EXPECT_EQ(q.Push(d, 0, 1, 1250, 50'000), 60'000 + 1000);
}

TEST(DelayQueue, EarliestAcrossFifosAndFifoOrderWithin) {
  DelayQueue q(Opts(3, 100));
  std::vector<int> order;
  int s0 = q.Acquire();
  q.Push(s0, 2, 0, 10, 5);
  int s1 = q.Acquire();
  q.Push(s1, 0, 1, 10, 7);
  int s2 = q.Acquire();
  q.Push(s2, 2, 1, 10, 9);
  int s3 = q.Acquire();
  q.Push(s3, 1, 2, 10, 6);
  while (q.Earliest() >= 0) {
    order.push_back(q.Earliest());
    q.PopEarliest();
  }
  EXPECT_EQ(order, (std::vector<int>{s0, s3, s1, s2}));
}

TEST(DelayQueue, PoolRunsOutAndRecycles) {
  DelayQueue q(Opts(2, 0, 0, 4));
  std::vector<int> slots;
  for (int i = 0; i < 4; ++i) slots.push_back(q.Acquire());
  for (int s : slots) EXPECT_GE(s, 0);
  EXPECT_EQ(q.Acquire(), -1);
  // Buffers do not overlap.
  for (size_t i = 0; i < slots.size(); ++i) {
    for (size_t j = i + 1; j < slots.size(); ++j) {
      EXPECT_GE(std::abs(q.data(slots[i]) - q.data(slots[j])), q.buffer_bytes());
    }
  }
  q.Release(slots[0]);  // a dropped packet
  q.Push(slots[1], 0, 1, 1, 0);
  EXPECT_EQ(q.queued(), 1);
  q.PopEarliest();
  EXPECT_EQ(q.queued(), 0);
  EXPECT_GE(q.Acquire(), 0);
  EXPECT_GE(q.Acquire(), 0);
  EXPECT_EQ(q.Acquire(), -1);
}

}  // namespace
}  // namespace scale_lab
}  // namespace lockstep
