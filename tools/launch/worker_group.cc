#include "tools/launch/worker_group.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "tools/launch/worker_guard.h"

namespace lockstep {
namespace launch {
namespace {

absl::Status MakeDirs(const std::string& path) {
  std::string prefix;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      prefix = path.substr(0, i);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::PermissionDeniedError(absl::StrCat("lockstep-run: cannot create the log directory ", prefix, ": ",
                                                        std::strerror(errno), "; give a writable --log_dir"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Fd> OpenLog(const std::string& path) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) {
    return absl::PermissionDeniedError(
        absl::StrCat("lockstep-run: cannot open the log file ", path, ": ", std::strerror(errno)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(const WorkerSpec& spec, const GroupAssignment& group) {
  std::unique_ptr<WorkerGroup> g(new WorkerGroup(spec.tail_lines));
  for (int local_rank = 0; local_rank < spec.nproc; ++local_rank) {
    const int rank = group.rank_offset + local_rank;
    std::string dir;
    if (!spec.attempt_log_dir.empty()) {
      dir = absl::StrCat(spec.attempt_log_dir, "/", local_rank);
      LOCKSTEP_RETURN_IF_ERROR(MakeDirs(dir));
    }
    SubprocessOptions options;
    // The guard leads the worker's process group and ends it if this agent
    // dies (tools/launch/worker_guard.h).
    options.argv = GuardedArgv(spec.argv);
    options.env = WorkerEnvironment(group, local_rank, spec.env);
    options.new_process_group = true;
    options.parent_death_signal = WorkerGuardDeathSignal();
    Fd write_ends[2];
    for (int stream = 0; stream < 2; ++stream) {
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) {
        return absl::InternalError(absl::StrCat("lockstep-run: pipe2 for rank ", rank, ": ", std::strerror(errno)));
      }
      const int bit = stream == 0 ? kStdOut : kStdErr;
      OutputStream out;
      out.read_end = Fd(p[0]);
      write_ends[stream] = Fd(p[1]);
      out.rank = rank;
      out.local_rank = local_rank;
      out.is_stderr = stream == 1;
      out.to_console = (spec.redirects.For(local_rank) & bit) == 0 || (spec.tee.For(local_rank) & bit) != 0;
      if (!dir.empty()) {
        LOCKSTEP_ASSIGN_OR_RETURN(out.log_file,
                                  OpenLog(absl::StrCat(dir, stream == 0 ? "/stdout.log" : "/stderr.log")));
      }
      g->pump_.Add(std::move(out));
    }
    options.stdout_fd = write_ends[0].get();
    options.stderr_fd = write_ends[1].get();
    absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
    if (!child.ok()) {
      return absl::Status(child.status().code(), absl::StrCat("lockstep-run: starting rank ", rank, " (local_rank ",
                                                              local_rank, "): ", child.status().message()));
    }
    g->workers_.push_back(*std::move(child));
  }  // The write ends close here: the pipes reach EOF when the workers end.
  g->pump_.Start();
  return g;
}

WorkerGroup::~WorkerGroup() { Stop(std::chrono::milliseconds(0)); }

absl::StatusOr<std::optional<WorkerExit>> WorkerGroup::WaitNext(Subprocess::Deadline deadline) {
  if (AllEnded()) return std::optional<WorkerExit>();
  absl::StatusOr<WaitAnyResult> ended = WaitAny(absl::MakeSpan(workers_), deadline);
  if (absl::IsDeadlineExceeded(ended.status())) return std::optional<WorkerExit>();
  if (!ended.ok()) return ended.status();
  return std::optional<WorkerExit>(WorkerExit{static_cast<int>(ended->index), ended->status});
}

bool WorkerGroup::AllEnded() const {
  for (const Subprocess& w : workers_) {
    if (!w.reaped()) return false;
  }
  return true;
}

std::vector<pid_t> WorkerGroup::RunningGroups() const {
  std::vector<pid_t> groups;
  for (const Subprocess& w : workers_) {
    if (!w.reaped()) groups.push_back(w.pid());
  }
  return groups;
}

void WorkerGroup::Stop(std::chrono::milliseconds grace) {
  if (!AllEnded()) {
    for (Subprocess& w : workers_) (void)w.SignalGroup(SIGTERM);
    const auto deadline = Subprocess::Clock::now() + grace;
    while (!AllEnded()) {
      if (!WaitAny(absl::MakeSpan(workers_), deadline).ok()) break;
    }
    for (Subprocess& w : workers_) {
      if (!w.reaped()) {
        (void)w.Kill();
        (void)w.Wait();
      }
    }
  }
  if (!drained_) {
    drained_ = true;
    pump_.Finish(DeadlineIn(std::chrono::milliseconds(2000)));
  }
}

}  // namespace launch
}  // namespace lockstep
