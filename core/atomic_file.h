// Crash-safe whole-file writes, and bounded whole-file reads.
//
//   LOCKSTEP_RETURN_IF_ERROR(WriteFileAtomically("/ckpt/model.safetensors", bytes));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::string back,
//                             ReadFileToString("/ckpt/model.safetensors", /*max_bytes=*/1 << 30));
//
// `WriteFileAtomically` never leaves a half-written file at `path`: it writes
// a temporary file in the same directory, fsyncs it, renames it over `path`
// (atomic within one file system) and fsyncs the directory so that the rename
// itself survives a power loss. A reader sees either the old contents or the
// new ones.
//
// The temporary file is `<path>.tmp.<16 hex digits from getrandom>`, created
// with O_CREAT|O_EXCL|O_NOFOLLOW: a file or symlink planted at any name,
// guessable or not, is never opened or followed (a collision just draws
// another name), so the write cannot be redirected. A failed write removes
// its temporary file. If the process dies mid-write, the old file is
// untouched and the temporary file stays behind. A failed write removes its
// own temporary file; other writers' files are not guessed at. Opt in with
// `stale_temp_age` to have the next write of the same `path` remove such
// leftovers: regular files whose name is exactly `<basename>.tmp.` + 16
// lowercase hex digits and that were last modified more than
// `stale_temp_age` before that write started. Nothing else is ever touched
// (older `<path>.tmp.<pid>` files of earlier versions included).
//
// Concurrent writers of one `path` each use their own temporary file; the
// last rename wins. A write that runs longer than `stale_temp_age` while
// another write of the same path starts may lose its temporary file and fail
// with an error (never a corrupt file).
#ifndef LOCKSTEP_CORE_ATOMIC_FILE_H_
#define LOCKSTEP_CORE_ATOMIC_FILE_H_

#include <chrono>
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
  // Leftover temporary files of this path older than this are removed (see
  // above). Negative (the default): leave them.
  std::chrono::seconds stale_temp_age{-1};
  // Testing only: when non-empty, the first temporary name tried is
  // `<path>.tmp.<this>` (later tries are random), to plant files at it.
  std::string testing_first_temp_suffix;
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

#endif  // LOCKSTEP_CORE_ATOMIC_FILE_H_
