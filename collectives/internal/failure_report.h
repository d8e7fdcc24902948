// Failure sharing: when an operation fails, each failing rank posts its error
// and its flight recorder in the group's store and, for a bounded window,
// reads the others', so every error names who failed first and what every
// rank was doing. Internal to //collectives:communicator.
//
//   absl::Status shared = ShareFailure(status, reporter);
//   // "...: connection closed. rank 2 is behind: ... Other ranks reported: ..."
#ifndef LOCKSTEP_COLLECTIVES_INTERNAL_FAILURE_REPORT_H_
#define LOCKSTEP_COLLECTIVES_INTERNAL_FAILURE_REPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/flight_recorder.h"
#include "collectives/store/store.h"
#include "core/deadline.h"

namespace lockstep {
namespace communicator_internal {

// Who reports, where, and for how long.
struct FailureReporter {
  std::shared_ptr<Store> store;  // The group's prefix; null: nothing shared.
  const FlightRecorder* recorder = nullptr;
  int rank = 0;
  int size = 1;
  // How long to collect the other ranks' reports: a bound, so that a hung
  // store does not delay the error further.
  Milliseconds window{1000};
  // When not empty, the directory that gets
  // flight_recorder_rank<rank>.json (WriteFlightRecorderDump).
  std::string dump_dir;
};

// `status` with what the other failing ranks reported within the window and,
// where the recorder keeps entries, every rank's place (flight_recorder.h:
// AnalyzeFlightRecords) appended; the code is status's.
absl::Status ShareFailure(const absl::Status& status, const FailureReporter& reporter);

// Writes this rank's whole flight recorder and the `peers`' reports (JSON)
// to <dump_dir>/flight_recorder_rank<rank>.json atomically: a temporary file
// that is never a planted file or symlink (core/atomic_file.h), renamed.
// Says on stderr where it went, or why it could not.
void WriteFlightRecorderDump(const FailureReporter& reporter, const std::vector<std::string>& peers);

}  // namespace communicator_internal
}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_INTERNAL_FAILURE_REPORT_H_
