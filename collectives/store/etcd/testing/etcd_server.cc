#include "collectives/store/etcd/testing/etcd_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "collectives/transport/tcp/socket.h"

namespace lockstep {
namespace {

// A port the kernel calls free now. etcd may lose it to another process
// before it binds; Start then tries again with fresh ports.
int FreePort() {
  int port = -1;
  absl::StatusOr<Fd> fd = Listen("127.0.0.1", 0, &port);
  return fd.ok() ? port : -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdServer>> EtcdServer::Start(std::vector<std::string> extra_flags, bool tls) {
  std::string last_log;
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::unique_ptr<EtcdServer> s(new EtcdServer());
    char tmpl[] = "/tmp/lockstep_etcd.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("EtcdServer: mkdtemp failed");
    s->data_dir_ = tmpl;
    const int client = FreePort();
    const int peer = FreePort();
    const std::string scheme = tls ? "https" : "http";
    s->endpoint_ = absl::StrCat("127.0.0.1:", client);
    std::vector<std::string> args = {"etcd",
                                     "--name=test",
                                     absl::StrCat("--data-dir=", s->data_dir_, "/data"),
                                     absl::StrCat("--listen-client-urls=", scheme, "://127.0.0.1:", client),
                                     absl::StrCat("--advertise-client-urls=", scheme, "://127.0.0.1:", client),
                                     absl::StrCat("--listen-peer-urls=http://127.0.0.1:", peer),
                                     absl::StrCat("--initial-advertise-peer-urls=http://127.0.0.1:", peer),
                                     absl::StrCat("--initial-cluster=test=http://127.0.0.1:", peer)};
    args.insert(args.end(), extra_flags.begin(), extra_flags.end());
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError("EtcdServer: pipe failed");
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return absl::InternalError("EtcdServer: fork failed");
    if (pid == 0) {
      // Dies with the test, whatever way the test ends.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(pipe_fds[1], 1);
      ::dup2(pipe_fds[1], 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("etcd", argv.data());
      ::_exit(127);
    }
    ::close(pipe_fds[1]);
    s->pid_ = pid;
    s->log_fd_ = pipe_fds[0];
    EtcdServer* raw = s.get();
    s->drain_ = std::thread([raw] {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(raw->log_fd_, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        std::lock_guard<std::mutex> lock(raw->mu_);
        if (n <= 0) {
          raw->exited_ = true;
          raw->ready_cv_.notify_all();
          return;
        }
        raw->log_.append(buf, static_cast<size_t>(n));
        if (raw->log_.find("ready to serve client requests") != std::string::npos) {
          raw->ready_ = true;
          raw->ready_cv_.notify_all();
        }
      }
    });
    {
      std::unique_lock<std::mutex> lock(s->mu_);
      s->ready_cv_.wait_for(lock, std::chrono::seconds(60), [&] { return s->ready_ || s->exited_; });
      if (s->ready_) return s;
      last_log = s->log_;
    }
    // Not ready: the destructor kills it and cleans up; try fresh ports.
  }
  return absl::UnavailableError(absl::StrCat(
      "EtcdServer: etcd did not become ready in 3 tries (is etcd-server installed? tools/setup.sh installs it); "
      "its last output: ",
      last_log.substr(last_log.size() > 2000 ? last_log.size() - 2000 : 0)));
}

std::string EtcdServer::log() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

EtcdServer::~EtcdServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    // etcd stops within a second on SIGTERM; SIGKILL if it has not in 10.
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      if (::poll(&p, 1, 10000) != 1) ::kill(pid_, SIGKILL);
      ::close(pidfd);
    } else {
      ::kill(pid_, SIGKILL);
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (drain_.joinable()) drain_.join();
  if (log_fd_ >= 0) ::close(log_fd_);
  if (!data_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(data_dir_, ignored);
  }
}

}  // namespace lockstep
