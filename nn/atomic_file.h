// Crash-safe whole-file writes, and bounded whole-file reads.
//
//   LOCKSTEP_RETURN_IF_ERROR(WriteFileAtomically("/ckpt/model.safetensors", bytes));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::string back,
//                             ReadFileToString("/ckpt/model.safetensors", /*max_bytes=*/1 << 30));
//
// `WriteFileAtomically` never leaves a half-written file at `path`: it writes
// `<path>.tmp.<pid>` in the same directory, fsyncs it, renames it over `path`
// (atomic within one file system) and fsyncs the directory so that the rename
// itself survives a power loss. A reader sees either the old contents or the
// new ones. If the process dies mid-write, the old file is untouched and the
// temporary file is left behind (named by the dead process's pid, so it never
// collides with a later writer in another process; delete it at leisure).
//
// Two threads of one process writing the same `path` at the same time share
// the temporary name and are not supported; serialize them.
#ifndef LOCKSTEP_NN_ATOMIC_FILE_H_
#define LOCKSTEP_NN_ATOMIC_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

struct AtomicWriteOptions {
  // Testing only: when >= 0, the writer calls std::_Exit(kSimulatedCrashExitCode)
  // once this many bytes of the temporary file are written (before fsync and
  // rename), simulating a crash mid-write. Run it in a forked child.
  int64_t testing_crash_after_bytes = -1;
};

// The exit status of a simulated crash (see AtomicWriteOptions).
inline constexpr int kSimulatedCrashExitCode = 86;

// Replaces the file at `path` with `contents`, atomically and durably (see
// above). The directory must exist. The new file has mode 0644 (less the
// umask). On error the temporary file is removed, the previous file at `path`
// is unchanged, and the status names the failed step, the path and the OS
// error.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents,
                                 const AtomicWriteOptions& options = {});

// The whole file at `path`. Fails (NotFound for a missing file,
// ResourceExhausted for one larger than `max_bytes`) before reading more than
// `max_bytes` bytes.
absl::StatusOr<std::string> ReadFileToString(const std::string& path, int64_t max_bytes);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_ATOMIC_FILE_H_
