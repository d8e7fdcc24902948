#include "core/thread_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskAndWaitSeesThemAll) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4);
  std::atomic<int> sum{0};
  for (int i = 1; i <= 1000; ++i) pool.Schedule([&sum, i] { sum += i; });
  pool.Wait();
  EXPECT_EQ(sum.load(), 500500);
}

TEST(ThreadPoolTest, TasksMayScheduleMoreTasks) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  for (int i = 0; i < 10; ++i) {
    pool.Schedule([&] {
      ++count;
      pool.Schedule([&] { ++count; });
    });
  }
  pool.Wait();
  EXPECT_EQ(count.load(), 20);
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  ThreadPool pool(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Each task blocks until three distinct threads have arrived, so this only
  // completes if the pool really runs three tasks at once.
  std::condition_variable cv;
  for (int i = 0; i < 3; ++i) {
    pool.Schedule([&] {
      std::unique_lock<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
      cv.notify_all();
      cv.wait(lock, [&] { return ids.size() == 3; });
    });
  }
  pool.Wait();
  EXPECT_EQ(ids.size(), 3u);
}

TEST(ThreadPoolTest, ParallelForCoversTheRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 5, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
      ASSERT_LE(begin, end);
      for (int64_t i = begin; i < end; ++i) ++hits[i];
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, DestructorDrainsQueuedTasks) {
  std::atomic<int> done{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 100; ++i) pool.Schedule([&] { ++done; });
  }
  EXPECT_EQ(done.load(), 100);
}

}  // namespace
}  // namespace lockstep
