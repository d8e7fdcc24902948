// The few NCCL and CUDA calls that NcclBackend makes, behind two small
// interfaces. Why: the backend's logic (version checks, op mapping, AVG
// fallback, the watchdog, the unique-id exchange) is then tested without a
// GPU through a fake (collectives/nccl/nccl_fake.h), and no file but
// nccl_api_cuda.cc includes nccl.h or the CUDA runtime.
//
//   std::unique_ptr<NcclRuntime> nccl = SystemNcclRuntime();
//   if (nccl->Version() == 0) ...               // no NCCL in this build
//   LOCKSTEP_ASSIGN_OR_RETURN(std::string id, nccl->NewUniqueId());   // rank 0
//   ...                                         // share id through a store
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> comm,
//       nccl->InitRank(id, rank, size, /*device=*/0, /*non_blocking=*/true, deadline));
//
// Every NcclComm call queues work on the communicator's own stream and
// returns at once, as NCCL does; completion is observed through NcclEvent.
#ifndef LOCKSTEP_COLLECTIVES_NCCL_NCCL_API_H_
#define LOCKSTEP_COLLECTIVES_NCCL_NCCL_API_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/stream_marker.h"
#include "core/deadline.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace lockstep {

// NCCL's version code, as ncclGetVersion reports it (22809 for 2.28.9;
// releases up to 2.8 used major*1000 + minor*100 + patch).
constexpr int NcclVersionCode(int major, int minor, int patch) {
  return (major <= 2 && minor <= 8) ? major * 1000 + minor * 100 + patch : major * 10000 + minor * 100 + patch;
}
// "2.28.9" for 22809; "none" for 0.
std::string NcclVersionString(int code);

// Send/recv (and so scatter/gather) exist from this version on.
inline constexpr int kNcclMinimumVersion = NcclVersionCode(2, 7, 0);
// ncclAvg exists from this version on; before it AVG is a sum and a division.
inline constexpr int kNcclAvgVersion = NcclVersionCode(2, 10, 0);
// ncclCommInitRankConfig with blocking = 0 (non-blocking init that can be
// abandoned at a deadline) exists from this version on.
inline constexpr int kNcclNonBlockingInitVersion = NcclVersionCode(2, 14, 0);
// ncclCommSplit (subgroups without a new unique id) exists from this
// version on.
inline constexpr int kNcclSplitVersion = NcclVersionCode(2, 18, 0);
// sizeof(ncclUniqueId).
inline constexpr size_t kNcclUniqueIdBytes = 128;

// A marker recorded on a communicator's stream (a CUDA event); its
// MakeStreamWait (StreamMarker) orders another stream after it.
class NcclEvent : public StreamMarker {
 public:
  // True once everything queued before the marker has finished; an error if
  // the device failed.
  virtual absl::StatusOr<bool> Query() = 0;
};

// One NCCL communicator and its own stream on one device.
class NcclComm {
 public:
  virtual ~NcclComm() = default;  // ncclCommDestroy, or nothing after Abort.

  // Orders this communicator's stream after the work already queued on
  // `stream` (an event: the host does not wait).
  virtual absl::Status WaitFor(void* stream) = 0;

  // NCCL's collectives with `count` elements of `dtype` (per rank for
  // AllGather's input and ReduceScatter's output). `op` is passed through:
  // the caller checks the version for kAvg.
  virtual absl::Status AllReduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op) = 0;
  virtual absl::Status Broadcast(const void* in, void* out, size_t count, DType dtype, int root) = 0;
  virtual absl::Status Reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root) = 0;
  virtual absl::Status AllGather(const void* in, void* out, size_t count, DType dtype) = 0;
  virtual absl::Status ReduceScatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op) = 0;
  virtual absl::Status Send(const void* buffer, size_t count, DType dtype, int peer) = 0;
  virtual absl::Status Recv(void* buffer, size_t count, DType dtype, int peer) = 0;
  // ncclGroupStart / ncclGroupEnd around sends and receives that progress together.
  virtual absl::Status GroupStart() = 0;
  virtual absl::Status GroupEnd() = 0;

  // Divides `count` elements by `divisor` exactly (core's Divide kernel):
  // AVG where ncclAvg is missing or the dtype is an integer.
  virtual absl::Status Divide(void* data, size_t count, DType dtype, int divisor) = 0;
  // Copies `bytes` between host and device memory, or within the device.
  virtual absl::Status Copy(void* dst, const void* src, size_t bytes) = 0;
  // Device memory owned by the communicator, at least `bytes`, reused
  // across calls (the barrier's word, the fingerprints' exchange).
  virtual absl::StatusOr<void*> Scratch(size_t bytes) = 0;

  // Marks the end of what is queued so far.
  virtual absl::StatusOr<std::unique_ptr<NcclEvent>> Record() = 0;
  // ncclCommGetAsyncError: OK, or the error NCCL found in the background
  // (a peer that left, a network failure).
  virtual absl::Status AsyncError() = 0;
  // ncclCommSplit (NCCL >= 2.18): every rank of this communicator calls it;
  // ranks of one color >= 0 get a communicator of their own, ordered by
  // key; color < 0 (NCCL_SPLIT_NOCOLOR) gets nullptr. A communicator made
  // without blocking gives up at `deadline`.
  virtual absl::StatusOr<std::unique_ptr<NcclComm>> Split(int color, int key, Deadline deadline) = 0;
  // ncclCommAbort: stops what is queued and frees the communicator's
  // resources. Safe from any thread, concurrently with a running call;
  // calls after the first do nothing.
  virtual void Abort() = 0;
};

// Creates communicators.
class NcclRuntime {
 public:
  virtual ~NcclRuntime() = default;
  // The linked library's version (ncclGetVersion, which may differ from the
  // headers the build saw); 0 when this build has no NCCL.
  virtual int Version() = 0;
  // Visible CUDA devices.
  virtual int DeviceCount() = 0;
  // Names `device` uniquely among all ranks' devices: host name and PCI bus
  // id ("node3/0000:1A:00.0"), so that ranks sharing a GPU are found before
  // NCCL init.
  virtual absl::StatusOr<std::string> DeviceId(int device) = 0;
  // ncclGetUniqueId: kNcclUniqueIdBytes opaque bytes (rank 0 makes it).
  virtual absl::StatusOr<std::string> NewUniqueId() = 0;
  // Joins the communicator named by `unique_id` as `rank` of `size` on
  // `device`. With `non_blocking` (NCCL >= 2.14) the call returns an error
  // at `deadline` (the half-made communicator aborted) instead of hanging
  // while a rank is missing.
  virtual absl::StatusOr<std::unique_ptr<NcclComm>> InitRank(const std::string& unique_id, int rank, int size,
                                                             int device, bool non_blocking, Deadline deadline) = 0;
};

// The NCCL this binary links (nccl_api_cuda.cc), or, in a build without
// CUDA, a runtime with Version() 0 whose calls say how to get NCCL.
std::unique_ptr<NcclRuntime> SystemNcclRuntime();

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_NCCL_NCCL_API_H_
