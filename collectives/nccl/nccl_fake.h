// A fake NcclRuntime/NcclComm for tests without a GPU (testonly). It runs a
// world of one on host memory (every collective of one rank is a copy),
// records each call as a line ("AllReduce sum f32 4", "Send 2 f32 to 1"),
// and can be told to never complete (for the watchdog) or to report an
// asynchronous error.
//
//   auto state = std::make_shared<FakeNcclState>();
//   state->version = NcclVersionCode(2, 9, 0);   // before ncclAvg
//   auto backend = *NcclBackend::Create(std::make_unique<FakeNcclComm>(state), 0, 1,
//                                       Device::Cuda(0), state->version);
//   ... backend->AllReduce(...) ...
//   EXPECT_THAT(state->Calls(), ElementsAre("WaitFor", "AllReduce sum f32 4", "Divide f32 4 by 1", "Record"));
#ifndef LOCKSTEP_COLLECTIVES_NCCL_NCCL_FAKE_H_
#define LOCKSTEP_COLLECTIVES_NCCL_NCCL_FAKE_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/nccl/nccl_api.h"

namespace lockstep {

// Shared by a fake runtime, its communicators and the test.
struct FakeNcclState {
  int version = NcclVersionCode(2, 28, 9);
  int device_count = 1;
  // Events never fire (an operation whose peer never comes).
  std::atomic<bool> hang{false};
  // What InitRank answers (OK: a communicator).
  absl::Status init_error;
  // A call ("GroupEnd", "AllReduce", ...) that fails with Internal when made.
  std::string fail_call;
  std::atomic<int> aborts{0};
  std::atomic<int> unique_ids{0};

  void SetAsyncError(absl::Status error);
  absl::Status async_error();
  void Record(std::string call);
  std::vector<std::string> Calls();
  // InitRank's arguments, one line per call: "rank 1 of 2 on 0 non-blocking".
  std::vector<std::string> Inits();
  void RecordInit(std::string init);

 private:
  std::mutex mu_;
  absl::Status async_error_;
  std::vector<std::string> calls_;
  std::vector<std::string> inits_;
};

class FakeNcclComm final : public NcclComm {
 public:
  explicit FakeNcclComm(std::shared_ptr<FakeNcclState> state) : state_(std::move(state)) {}

  absl::Status WaitFor(void* stream) override;
  absl::Status AllReduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op) override;
  absl::Status Broadcast(const void* in, void* out, size_t count, DType dtype, int root) override;
  absl::Status Reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root) override;
  absl::Status AllGather(const void* in, void* out, size_t count, DType dtype) override;
  absl::Status ReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) override;
  absl::Status Send(const void* buffer, size_t count, DType dtype, int peer) override;
  absl::Status Recv(void* buffer, size_t count, DType dtype, int peer) override;
  absl::Status GroupStart() override;
  absl::Status GroupEnd() override;
  absl::Status Divide(void* data, size_t count, DType dtype, int divisor) override;
  absl::Status Copy(void* dst, const void* src, size_t bytes) override;
  absl::StatusOr<void*> Scratch(size_t bytes) override;
  absl::StatusOr<std::unique_ptr<NcclEvent>> Record() override;
  absl::Status AsyncError() override;
  absl::StatusOr<std::unique_ptr<NcclComm>> Split(int color, int key, Deadline deadline) override;
  void Abort() override;

 private:
  std::shared_ptr<FakeNcclState> state_;
  std::vector<char> scratch_;
};

class FakeNcclRuntime final : public NcclRuntime {
 public:
  explicit FakeNcclRuntime(std::shared_ptr<FakeNcclState> state) : state_(std::move(state)) {}
  int Version() override { return state_->version; }
  int DeviceCount() override { return state_->device_count; }
  absl::StatusOr<std::string> DeviceId(int device) override { return "fakehost/gpu" + std::to_string(device); }
  absl::StatusOr<std::string> NewUniqueId() override;
  absl::StatusOr<std::unique_ptr<NcclComm>> InitRank(const std::string& unique_id, int rank, int size, int device,
                                                     bool non_blocking, Deadline deadline) override;

 private:
  std::shared_ptr<FakeNcclState> state_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_NCCL_NCCL_FAKE_H_
