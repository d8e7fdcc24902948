// A fixed-size pool of worker threads running tasks in FIFO order.
//
//   ThreadPool pool(4);
//   for (auto& replica : replicas) pool.Schedule([&] { replica.Forward(); });
//   pool.Wait();  // until every scheduled task has finished
//
//   pool.ParallelFor(n, [&](int64_t begin, int64_t end) { ... });
//
// The destructor finishes the tasks already queued and joins the threads.
// Tasks must not throw. Uses std::mutex and std::condition_variable (not
// absl::Mutex) so that ThreadSanitizer understands it with Debian's
// uninstrumented Abseil.
#ifndef LOCKSTEP_CORE_THREAD_POOL_H_
#define LOCKSTEP_CORE_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lockstep {

class ThreadPool {
 public:
  // At least one thread.
  explicit ThreadPool(int num_threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  void Schedule(std::function<void()> task);

  // Blocks until every task scheduled so far (and any they scheduled) has run.
  void Wait();

  // Splits [0, n) into at most size() contiguous ranges, runs fn(begin, end)
  // on each (one on the calling thread) and returns when all are done. Not to
  // be called from inside a task of the same pool.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  int size() const { return static_cast<int>(threads_.size()); }

 private:
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable work_available_;
  std::condition_variable all_done_;
  std::deque<std::function<void()>> queue_;
  int64_t pending_ = 0;  // Queued plus running tasks.
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_CORE_THREAD_POOL_H_
