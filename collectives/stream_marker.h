// StreamMarker: a point on a device stream that an operation's completion
// is tied to (for NCCL, a CUDA event recorded after the operation's
// kernels). Work::SynchronizeStream (collectives/work.h) uses it to order a
// caller's stream after the operation without blocking the host.
#ifndef LOCKSTEP_COLLECTIVES_STREAM_MARKER_H_
#define LOCKSTEP_COLLECTIVES_STREAM_MARKER_H_

#include "absl/status/status.h"

namespace lockstep {

class StreamMarker {
 public:
  virtual ~StreamMarker() = default;
  // Makes work queued later on `stream` (a cudaStream_t; nullptr is the
  // legacy default stream) wait for the marker, without blocking the host.
  virtual absl::Status MakeStreamWait(void* stream) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_STREAM_MARKER_H_
