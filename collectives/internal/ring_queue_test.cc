// RingQueue: FIFO order across wrap-around and growth, insert at any
// position, move-only elements, and every element destroyed exactly once
// (taken, or left in the queue at its end).
#include "collectives/internal/ring_queue.h"

#include <deque>
#include <memory>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace communicator_internal {
namespace {

// Counts live instances; move-only.
struct Counted {
  explicit Counted(int v, int* live) : value(std::make_unique<int>(v)), live(live) { ++*live; }
  Counted(Counted&& other) noexcept : value(std::move(other.value)), live(other.live) { ++*live; }
  Counted& operator=(Counted&& other) noexcept {
    value = std::move(other.value);
    return *this;
  }
  ~Counted() { --*live; }
  std::unique_ptr<int> value;
  int* live;
};

TEST(RingQueueTest, FifoAcrossWrapAndGrowth) {
  int live = 0;
  {
    RingQueue<Counted> q;
    int next_in = 0, next_out = 0;
    // Interleave pushes and pops so that the head wraps at every capacity.
    for (int round = 0; round < 200; ++round) {
      for (int k = 0; k < round % 7 + 1; ++k) q.push_back(Counted(next_in++, &live));
      for (int k = 0; k < round % 5 && !q.empty(); ++k) {
        Counted c = q.pop_front();
        ASSERT_NE(c.value, nullptr);
        EXPECT_EQ(*c.value, next_out++);
      }
      EXPECT_EQ(q.size(), static_cast<size_t>(next_in - next_out));
      EXPECT_EQ(live, next_in - next_out);
    }
    EXPECT_EQ(*q.front().value, next_out);
  }
  EXPECT_EQ(live, 0);  // What was left in the queue was destroyed with it.
}

TEST(RingQueueTest, InsertMatchesDeque) {
  std::mt19937 rng(7);
  RingQueue<std::string> q;
  std::deque<std::string> want;
  for (int i = 0; i < 2000; ++i) {
    const int action = static_cast<int>(rng() % 4);
    if (action == 0 && !want.empty()) {
      EXPECT_EQ(q.pop_front(), want.front());
      want.pop_front();
    } else if (action == 1) {
      const size_t at = rng() % (want.size() + 1);
      q.insert(at, std::to_string(i));
      want.insert(want.begin() + static_cast<std::ptrdiff_t>(at), std::to_string(i));
    } else {
      q.push_back(std::to_string(i));
      want.push_back(std::to_string(i));
    }
    ASSERT_EQ(q.size(), want.size());
    if (!want.empty()) ASSERT_EQ(q.front(), want.front());
  }
  while (!want.empty()) {
    EXPECT_EQ(q.pop_front(), want.front());
    want.pop_front();
  }
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace communicator_internal
}  // namespace lockstep
