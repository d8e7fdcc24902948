#include "collectives/nccl/nccl_fake.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

class FakeNcclEvent final : public NcclEvent {
 public:
  explicit FakeNcclEvent(std::shared_ptr<FakeNcclState> state) : state_(std::move(state)) {}
  absl::StatusOr<bool> Query() override { return !state_->hang.load(); }
  absl::Status MakeStreamWait(void* stream) override {
    state_->Record(absl::StrCat("MakeStreamWait ", reinterpret_cast<uintptr_t>(stream)));
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<FakeNcclState> state_;
};

std::string Op(ReduceOp op) { return std::string(ReduceOpName(op)); }
std::string Type(DType dtype) { return std::string(DTypeName(dtype)); }

// (A null `out`: a non-root's reduce, whose receive buffer NCCL ignores.)
void CopyIfApart(void* out, const void* in, size_t bytes) {
  if (out != nullptr && out != in && bytes > 0) std::memmove(out, in, bytes);
}

}  // namespace

void FakeNcclState::SetAsyncError(absl::Status error) {
  std::lock_guard<std::mutex> lock(mu_);
  async_error_ = std::move(error);
}
absl::Status FakeNcclState::async_error() {
  std::lock_guard<std::mutex> lock(mu_);
  return async_error_;
}
void FakeNcclState::Record(std::string call) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.push_back(std::move(call));
}
std::vector<std::string> FakeNcclState::Calls() {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}
void FakeNcclState::RecordInit(std::string init) {
  std::lock_guard<std::mutex> lock(mu_);
  inits_.push_back(std::move(init));
}
std::vector<std::string> FakeNcclState::Inits() {
  std::lock_guard<std::mutex> lock(mu_);
  return inits_;
}

absl::Status FakeNcclComm::WaitFor(void*) {
  state_->Record("WaitFor");
  return absl::OkStatus();
}
absl::Status FakeNcclComm::AllReduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op) {
  state_->Record(absl::StrCat("AllReduce ", Op(op), " ", Type(dtype), " ", count));
  if (state_->fail_call == "AllReduce") return absl::InternalError("ncclAllReduce: invalid argument (fake)");
  CopyIfApart(out, in, count * DTypeSize(dtype));
  return absl::OkStatus();
}
absl::Status FakeNcclComm::Broadcast(const void* in, void* out, size_t count, DType dtype, int root) {
  state_->Record(absl::StrCat("Broadcast ", Type(dtype), " ", count, " from ", root));
  CopyIfApart(out, in, count * DTypeSize(dtype));
  return absl::OkStatus();
}
absl::Status FakeNcclComm::Reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root) {
  state_->Record(absl::StrCat("Reduce ", Op(op), " ", Type(dtype), " ", count, " to ", root));
  CopyIfApart(out, in, count * DTypeSize(dtype));
  return absl::OkStatus();
}
absl::Status FakeNcclComm::AllGather(const void* in, void* out, size_t count, DType dtype) {
  state_->Record(absl::StrCat("AllGather ", Type(dtype), " ", count));
  CopyIfApart(out, in, count * DTypeSize(dtype));
  return absl::OkStatus();
}
absl::Status FakeNcclComm::ReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) {
  state_->Record(absl::StrCat("ReduceScatter ", Op(op), " ", Type(dtype), " ", count));
  CopyIfApart(out, in, count * DTypeSize(dtype));
  return absl::OkStatus();
}
absl::Status FakeNcclComm::Send(const void*, size_t count, DType dtype, int peer) {
  state_->Record(absl::StrCat("Send ", Type(dtype), " ", count, " to ", peer));
  return absl::OkStatus();
}
absl::Status FakeNcclComm::Recv(void*, size_t count, DType dtype, int peer) {
  state_->Record(absl::StrCat("Recv ", Type(dtype), " ", count, " from ", peer));
  return absl::OkStatus();
}
absl::Status FakeNcclComm::GroupStart() {
  state_->Record("GroupStart");
  return absl::OkStatus();
}
absl::Status FakeNcclComm::GroupEnd() {
  state_->Record("GroupEnd");
  if (state_->fail_call == "GroupEnd") return absl::InternalError("ncclGroupEnd: unhandled system error (fake)");
  return absl::OkStatus();
}
absl::Status FakeNcclComm::Divide(void*, size_t count, DType dtype, int divisor) {
  state_->Record(absl::StrCat("Divide ", Type(dtype), " ", count, " by ", divisor));
  return absl::OkStatus();
}
absl::Status FakeNcclComm::Copy(void* dst, const void* src, size_t bytes) {
  state_->Record(absl::StrCat("Copy ", bytes));
  CopyIfApart(dst, src, bytes);
  return absl::OkStatus();
}
absl::StatusOr<void*> FakeNcclComm::Scratch(size_t bytes) {
  if (scratch_.size() < bytes) scratch_.resize(bytes);
  return static_cast<void*>(scratch_.data());
}
absl::StatusOr<std::unique_ptr<NcclEvent>> FakeNcclComm::Record() {
  state_->Record("Record");
  return std::unique_ptr<NcclEvent>(std::make_unique<FakeNcclEvent>(state_));
}
absl::Status FakeNcclComm::AsyncError() { return state_->async_error(); }
absl::StatusOr<std::unique_ptr<NcclComm>> FakeNcclComm::Split(int color, int key, Deadline) {
  state_->Record(absl::StrCat("Split color ", color, " key ", key));
  if (state_->fail_call == "Split") return absl::InternalError("ncclCommSplit: invalid usage (fake)");
  if (color < 0) return std::unique_ptr<NcclComm>();
  return std::unique_ptr<NcclComm>(std::make_unique<FakeNcclComm>(state_));
}

void FakeNcclComm::Abort() {
  state_->aborts.fetch_add(1);
  // What ncclCommAbort does to a stuck kernel: the stream drains.
  state_->hang.store(false);
}

absl::StatusOr<std::string> FakeNcclRuntime::NewUniqueId() {
  const int n = state_->unique_ids.fetch_add(1);
  std::string id(kNcclUniqueIdBytes, '\0');
  id[0] = static_cast<char>('A' + n % 26);
  return id;
}

absl::StatusOr<std::unique_ptr<NcclComm>> FakeNcclRuntime::InitRank(const std::string& unique_id, int rank, int size,
                                                                    int device, bool non_blocking, Deadline) {
  state_->RecordInit(absl::StrCat("rank ", rank, " of ", size, " on ", device,
                                  non_blocking ? " non-blocking" : " blocking", " id ", unique_id.substr(0, 1)));
  if (!state_->init_error.ok()) return state_->init_error;
  return std::unique_ptr<NcclComm>(std::make_unique<FakeNcclComm>(state_));
}

}  // namespace lockstep
