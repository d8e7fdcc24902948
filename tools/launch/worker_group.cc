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

absl::StatusOr<Fd> OpenLog(const std::string& path, bool append) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd.valid()) {
    return absl::PermissionDeniedError(
        absl::StrCat("lockstep-run: cannot open the log file ", path, ": ", std::strerror(errno)));
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(const WorkerSpec& spec, const GroupAssignment& group) {
  std::unique_ptr<WorkerGroup> g(new WorkerGroup(spec.tail_lines));
  g->spec_ = spec;
  g->group_ = group;
  if (spec.restartable) g->pump_.AllowLateAdds();
  for (int local_rank = 0; local_rank < spec.nproc; ++local_rank) {
    LOCKSTEP_ASSIGN_OR_RETURN(Subprocess child, g->Spawn(local_rank, {}, /*late=*/false));
    g->workers_.push_back(std::move(child));
  }
  g->pump_.Start();
  return g;
}

absl::Status WorkerGroup::Restart(int local_rank, const std::vector<std::pair<std::string, std::string>>& extra_env) {
  if (!spec_.restartable || local_rank < 0 || local_rank >= static_cast<int>(workers_.size()) ||
      !workers_[local_rank].reaped()) {
    return absl::FailedPreconditionError(absl::StrCat("lockstep-run: local rank ", local_rank,
                                                      " cannot be restarted alone (not ended, or the group ",
                                                      "was not started restartable)"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Subprocess child, Spawn(local_rank, extra_env, /*late=*/true));
  workers_[local_rank] = std::move(child);
  return absl::OkStatus();
}

absl::StatusOr<Subprocess> WorkerGroup::Spawn(int local_rank,
                                              const std::vector<std::pair<std::string, std::string>>& extra_env,
                                              bool late) {
  const int rank = group_.rank_offset + local_rank;
  std::string dir;
  if (!spec_.attempt_log_dir.empty()) {
    dir = absl::StrCat(spec_.attempt_log_dir, "/", local_rank);
    LOCKSTEP_RETURN_IF_ERROR(MakeDirs(dir));
  }
  SubprocessOptions options;
  // The guard leads the worker's process group and ends it if this agent
  // dies (tools/launch/worker_guard.h).
  options.argv = GuardedArgv(spec_.argv);
  options.env = WorkerEnvironment(group_, local_rank, spec_.env);
  for (const auto& kv : spec_.extra_env) options.env.push_back(kv);
  for (const auto& kv : extra_env) options.env.push_back(kv);
  options.new_process_group = true;
  options.parent_death_signal = WorkerGuardDeathSignal();
  Fd write_ends[2];
  std::vector<OutputStream> streams;
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
    out.to_console = (spec_.redirects.For(local_rank) & bit) == 0 || (spec_.tee.For(local_rank) & bit) != 0;
    if (!dir.empty()) {
      // A restarted worker's output follows its predecessor's in the file.
      LOCKSTEP_ASSIGN_OR_RETURN(out.log_file,
                                OpenLog(absl::StrCat(dir, stream == 0 ? "/stdout.log" : "/stderr.log"), late));
    }
    streams.push_back(std::move(out));
  }
  options.stdout_fd = write_ends[0].get();
  options.stderr_fd = write_ends[1].get();
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  if (!child.ok()) {
    return absl::Status(child.status().code(), absl::StrCat("lockstep-run: starting rank ", rank, " (local_rank ",
                                                            local_rank, "): ", child.status().message()));
  }
  for (OutputStream& out : streams) {
    if (late) {
      pump_.AddLate(std::move(out));
    } else {
      pump_.Add(std::move(out));
    }
  }
  return child;
}  // The write ends close here: the pipes reach EOF when the worker ends.

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
