// store_load: the rendezvous store under a job's start-up pattern, at
// thousands of clients, beside PyTorch's TCPStore.
//
//   bazel run -c opt //tools/bench:store_load -- --clients=4096 --peer=torch
//
// Every client runs what a rank does at set-up: connect, set its own key
// (an address), wait for all N keys, read every one, and leave through a
// barrier (ADD on a counter; the last one in sets a key the others wait
// for). lockstep's clients wait and read with one MULTI_GET (Store::MultiGet;
// --batched=false: WAIT, then a GET per key). They are non-blocking sockets
// multiplexed by a few
// threads (epoll), so 16,384 of them fit in one process; the server
// (collectives/store:tcp_store's TcpStoreServer) runs in a child process of
// its own, whose CPU time and peak RSS are reported. Every value read is
// checked against the one its owner set. With --peer=torch the same
// pattern at the same N runs on PyTorch 1.13's torch.distributed.TCPStore
// (store_load_torch.py: its server in a process of its own, clients in
// several processes of threads; TCPStore has no multi-get, so each client
// gets the N keys one by one, as its users' code does), and the last line
// is `ratio R` (TCPStore's time / lockstep's), or `ratio >R` when TCPStore
// did not finish within --peer_timeout_s.
//
// Both raise RLIMIT_NOFILE to its hard limit. Figures and the command:
// docs/PERFORMANCE.md.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/store/store_wire.h"
#include "collectives/store/tcp_store.h"
#include "core/fd.h"
#include "core/status.h"
#include "core/subprocess.h"

ABSL_FLAG(int, clients, 1024, "how many clients run the set-up pattern at once");
ABSL_FLAG(int, threads, 4, "lockstep's client threads (each multiplexes clients/threads sockets)");
ABSL_FLAG(std::string, peer, "", "\"torch\": run PyTorch's TCPStore with the same pattern and N too");
ABSL_FLAG(int, timeout_s, 600, "lockstep's run fails after this many seconds");
ABSL_FLAG(int, peer_timeout_s, 600, "TCPStore's run is stopped after this many seconds (then: ratio >R)");
ABSL_FLAG(std::string, python, "/usr/bin/python3", "the Python with PyTorch, for --peer=torch");
ABSL_FLAG(std::string, torch_script, "", "store_load_torch.py (found beside this binary when empty)");
ABSL_FLAG(bool, batched, true,
          "lockstep's clients read all N addresses with one MULTI_GET (false: WAIT, then one GET per key, as "
          "TCPStore's clients must)");
ABSL_FLAG(bool, serve, false, "internal: run the server and print its port");

namespace lockstep {
namespace {

namespace wire = store_wire;
using Clock = std::chrono::steady_clock;

void RaiseFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
}

std::string Key(int i) { return absl::StrCat("addr/", i); }
std::string Value(int i) { return absl::StrCat("10.", (i >> 16) & 255, ".", (i >> 8) & 255, ".", i & 255, ":29500"); }

// --serve: the server, until killed.
int Serve(int clients) {
  RaiseFileLimit();
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  options.limits.max_connections = clients + 64;
  options.limits.frame_timeout = Milliseconds(600'000);
  options.limits.hello_timeout = Milliseconds(600'000);
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "store_load --serve: %s\n", server.status().ToString().c_str());
    return 1;
  }
  std::printf("port %d\n", (*server)->port());
  std::fflush(stdout);
  for (;;) ::pause();
}

// The server child's CPU seconds (user + system) and resident memory.
struct ProcessUsage {
  double cpu_s = 0;
  double rss_mib = 0;   // VmRSS now
  double peak_mib = 0;  // VmHWM
};

absl::StatusOr<ProcessUsage> UsageOf(pid_t pid) {
  ProcessUsage usage;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return absl::NotFoundError(absl::StrCat("store_load: no /proc/", pid, "/stat"));
  std::istringstream fields(text.substr(close + 2));
  std::vector<std::string> f((std::istream_iterator<std::string>(fields)), std::istream_iterator<std::string>());
  // Fields 14 and 15 (utime, stime) are at 11 and 12 after the state (3).
  if (f.size() < 13) return absl::InternalError("store_load: short /proc/PID/stat");
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  usage.cpu_s = (std::stod(f[11]) + std::stod(f[12])) / tick;
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    double kib = 0;
    if (line.rfind("VmRSS:", 0) == 0 &&
        absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kib)) {
      usage.rss_mib = kib / 1024;
    }
    if (line.rfind("VmHWM:", 0) == 0 &&
        absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kib)) {
      usage.peak_mib = kib / 1024;
    }
  }
  return usage;
}

// One client's way through the pattern, one request in flight at a time.
struct Client {
  enum Step { kConnect, kHello, kSet, kWaitAll, kGet, kMultiGet, kAdd, kSetDone, kWaitDone, kDone };
  Fd fd;
  int index = 0;
  Step step = kConnect;
  int next_get = 0;
  std::string out;
  size_t out_sent = 0;
  std::string in;
};

class ClientThread {
 public:
  ClientThread(int port, int total, bool batched, std::vector<int> indices, Clock::time_point deadline)
      : port_(port), total_(total), batched_(batched), indices_(std::move(indices)), deadline_(deadline) {}

  absl::Status Run() {
    epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) return absl::InternalError(absl::StrCat("store_load: epoll_create1: ", std::strerror(errno)));
    clients_.resize(indices_.size());
    size_t started = 0;
    int connecting = 0;
    std::vector<epoll_event> events(256);
    while (finished_ < clients_.size()) {
      // At most 128 connects in flight per thread: a burst of thousands
      // overflows the listen backlog, and a dropped SYN costs a second.
      while (started < clients_.size() && connecting < 128) {
        LOCKSTEP_RETURN_IF_ERROR(Connect(started, clients_[started]));
        ++started;
        ++connecting;
      }
      if (Clock::now() > deadline_) {
        return absl::DeadlineExceededError(absl::StrCat("store_load: ", clients_.size() - finished_, " of ",
                                                        clients_.size(), " clients of a thread did not finish"));
      }
      const int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), 100);
      if (n < 0 && errno != EINTR)
        return absl::InternalError(absl::StrCat("store_load: epoll_wait: ", std::strerror(errno)));
      for (int e = 0; e < n; ++e) {
        Client& c = clients_[events[e].data.u64];
        if (c.step == Client::kConnect) {
          int err = 0;
          socklen_t len = sizeof(err);
          ::getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            return absl::UnavailableError(
                absl::StrCat("store_load: client ", c.index, " could not connect: ", std::strerror(err)));
          }
          --connecting;
          LOCKSTEP_RETURN_IF_ERROR(Send(c, Request(c, Client::kHello)));
          continue;
        }
        if (events[e].events & EPOLLOUT) LOCKSTEP_RETURN_IF_ERROR(Flush(c));
        if (events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) LOCKSTEP_RETURN_IF_ERROR(Read(c));
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Connect(size_t slot, Client& c) {
    c.index = indices_[slot];
    c.fd = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!c.fd.valid()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("store_load: socket() for client ", c.index, ": ", std::strerror(errno), " (raise ulimit -n)"));
    }
    const int one = 1;
    ::setsockopt(c.fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(c.fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
      return absl::UnavailableError(absl::StrCat("store_load: client ", c.index, " connect: ", std::strerror(errno)));
    }
    epoll_event ev{};
    ev.events = EPOLLOUT;
    ev.data.u64 = slot;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.fd.get(), &ev) != 0) {
      return absl::InternalError(absl::StrCat("store_load: epoll_ctl: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  std::string Request(Client& c, Client::Step step) {
    c.step = step;
    wire::Request r;
    switch (step) {
      case Client::kHello:
        r.op = wire::Op::kHello;
        break;
      case Client::kSet:
        r.op = wire::Op::kSet;
        r.keys = {Key(c.index)};
        r.value = Value(c.index);
        break;
      case Client::kWaitAll:
        r.op = wire::Op::kWait;
        for (int i = 0; i < total_; ++i) r.keys.push_back(Key(i));
        r.integer = 600'000;
        break;
      case Client::kMultiGet: {
        // As TcpStore::MultiGet asks: at most kMultiGetKeysPerRequest keys
        // a request, from next_get on.
        r.op = wire::Op::kMultiGet;
        const int end = std::min(total_, c.next_get + static_cast<int>(wire::kMultiGetKeysPerRequest));
        for (int i = c.next_get; i < end; ++i) r.keys.push_back(Key(i));
        r.integer = 600'000;
        break;
      }
      case Client::kGet:
        r.op = wire::Op::kGet;
        r.keys = {Key(c.next_get)};
        r.integer = 600'000;
        break;
      case Client::kAdd:
        r.op = wire::Op::kAdd;
        r.keys = {"barrier/count"};
        r.integer = 1;
        break;
      case Client::kSetDone:
        r.op = wire::Op::kSet;
        r.keys = {"barrier/done"};
        r.value = "1";
        break;
      case Client::kWaitDone:
        r.op = wire::Op::kWait;
        r.keys = {"barrier/done"};
        r.integer = 600'000;
        break;
      case Client::kConnect:
      case Client::kDone:
        break;
    }
    return wire::EncodeRequest(r);
  }

  absl::Status Send(Client& c, std::string frame) {
    c.out = std::move(frame);
    c.out_sent = 0;
    LOCKSTEP_RETURN_IF_ERROR(Flush(c));
    return absl::OkStatus();
  }

  // Writes what it can; waits for EPOLLOUT while a frame is left, else for input.
  absl::Status Flush(Client& c) {
    while (c.out_sent < c.out.size()) {
      const ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EAGAIN) break;
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        return absl::UnavailableError(absl::StrCat("store_load: client ", c.index, " send: ", std::strerror(errno)));
      c.out_sent += static_cast<size_t>(n);
    }
    epoll_event ev{};
    ev.events = c.out_sent < c.out.size() ? EPOLLOUT : EPOLLIN;
    ev.data.u64 = static_cast<uint64_t>(&c - clients_.data());
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) != 0) {
      return absl::InternalError(absl::StrCat("store_load: epoll_ctl: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  absl::Status Read(Client& c) {
    char buffer[16384];
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), buffer, sizeof(buffer), 0);
      if (n < 0 && errno == EAGAIN) break;
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::UnavailableError(absl::StrCat("store_load: client ", c.index,
                                                   ": the server closed the connection (",
                                                   n == 0 ? "EOF" : std::strerror(errno), ") at step ", c.step));
      }
      c.in.append(buffer, static_cast<size_t>(n));
    }
    while (c.in.size() >= wire::kHeaderBytes) {
      LOCKSTEP_ASSIGN_OR_RETURN(wire::FrameHeader header,
                                wire::ParseHeader(absl::string_view(c.in).substr(0, wire::kHeaderBytes)));
      if (c.in.size() < wire::kHeaderBytes + header.body_bytes) break;
      LOCKSTEP_ASSIGN_OR_RETURN(wire::Response response, wire::ParseResponse(absl::string_view(c.in).substr(
                                                             wire::kHeaderBytes, header.body_bytes)));
      c.in.erase(0, wire::kHeaderBytes + header.body_bytes);
      LOCKSTEP_RETURN_IF_ERROR(Advance(c, response));
    }
    return absl::OkStatus();
  }

  absl::Status Advance(Client& c, const wire::Response& r) {
    if (r.code != absl::StatusCode::kOk) {
      return absl::Status(r.code, absl::StrCat("store_load: client ", c.index, " at step ", c.step, ": ", r.value));
    }
    switch (c.step) {
      case Client::kHello:
        return Send(c, Request(c, Client::kSet));
      case Client::kSet:
        c.next_get = 0;
        return Send(c, Request(c, batched_ ? Client::kMultiGet : Client::kWaitAll));
      case Client::kMultiGet: {
        const int n = std::min(total_ - c.next_get, static_cast<int>(wire::kMultiGetKeysPerRequest));
        LOCKSTEP_ASSIGN_OR_RETURN(std::vector<std::string> values, wire::UnpackValues(r.value, n));
        for (int k = 0; k < n; ++k) {
          const int i = c.next_get + k;
          if (values[static_cast<size_t>(k)] != Value(i)) {
            return absl::DataLossError(absl::StrCat("store_load: client ", c.index, " read '", values[k], "' for ",
                                                    Key(i), ", expected '", Value(i), "'"));
          }
        }
        c.next_get += n;
        if (c.next_get < total_) return Send(c, Request(c, Client::kMultiGet));
        return Send(c, Request(c, Client::kAdd));
      }
      case Client::kWaitAll:
        c.next_get = 0;
        return Send(c, Request(c, Client::kGet));
      case Client::kGet:
        if (r.value != Value(c.next_get)) {
          return absl::DataLossError(absl::StrCat("store_load: client ", c.index, " read '", r.value, "' for ",
                                                  Key(c.next_get), ", expected '", Value(c.next_get), "'"));
        }
        if (++c.next_get < total_) return Send(c, Request(c, Client::kGet));
        return Send(c, Request(c, Client::kAdd));
      case Client::kAdd:
        if (r.integer == total_) return Send(c, Request(c, Client::kSetDone));
        return Send(c, Request(c, Client::kWaitDone));
      case Client::kSetDone:
      case Client::kWaitDone:
        c.step = Client::kDone;
        c.fd = Fd();
        ++finished_;
        return absl::OkStatus();
      case Client::kConnect:
      case Client::kDone:
        break;
    }
    return absl::InternalError(absl::StrCat("store_load: client ", c.index, ": a response at step ", c.step));
  }

  const int port_;
  const int total_;
  const bool batched_;
  const std::vector<int> indices_;
  const Clock::time_point deadline_;
  Fd epoll_;
  std::vector<Client> clients_;
  size_t finished_ = 0;
};

struct Measured {
  double seconds = 0;
  ProcessUsage server;
  double idle_rss_mib = 0;
};

absl::StatusOr<Measured> RunLockstep(int clients, int threads, bool batched, std::chrono::seconds timeout) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError("store_load: pipe2 failed");
  Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  SubprocessOptions options;
  options.argv = {"/proc/self/exe", "--serve", absl::StrCat("--clients=", clients)};
  options.stdout_fd = write_end.get();
  options.parent_death_signal = SIGKILL;
  LOCKSTEP_ASSIGN_OR_RETURN(Subprocess server, Subprocess::Spawn(options));
  write_end = Fd();
  std::string line;
  pollfd pfd{read_end.get(), POLLIN, 0};
  while (line.find('\n') == std::string::npos) {
    if (::poll(&pfd, 1, 30'000) <= 0)
      return absl::DeadlineExceededError("store_load: the server did not start in 30 s");
    char buffer[64];
    const ssize_t n = ::read(read_end.get(), buffer, sizeof(buffer));
    if (n <= 0) return absl::InternalError("store_load: the server exited before printing its port");
    line.append(buffer, static_cast<size_t>(n));
  }
  int port = 0;
  if (line.rfind("port ", 0) != 0 || !absl::SimpleAtoi(line.substr(5, line.find('\n') - 5), &port)) {
    return absl::InternalError(absl::StrCat("store_load: the server said '", line, "'"));
  }
  Measured measured;
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessUsage idle, UsageOf(server.pid()));
  measured.idle_rss_mib = idle.rss_mib;

  const Clock::time_point start = Clock::now();
  std::vector<std::vector<int>> shares(static_cast<size_t>(threads));
  for (int i = 0; i < clients; ++i) shares[static_cast<size_t>(i % threads)].push_back(i);
  std::vector<absl::Status> results(shares.size());
  std::vector<std::thread> workers;
  for (size_t t = 0; t < shares.size(); ++t) {
    workers.emplace_back([&, t] {
      ClientThread thread(port, clients, batched, shares[t], start + timeout);
      results[t] = thread.Run();
    });
  }
  for (std::thread& w : workers) w.join();
  measured.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const absl::Status& s : results) LOCKSTEP_RETURN_IF_ERROR(s);
  LOCKSTEP_ASSIGN_OR_RETURN(ProcessUsage after, UsageOf(server.pid()));
  measured.server = after;
  measured.server.cpu_s -= idle.cpu_s;
  return measured;
}

std::string TorchScript() {
  std::string script = absl::GetFlag(FLAGS_torch_script);
  if (!script.empty()) return script;
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string();
  dir = dir.substr(0, dir.rfind('/'));
  for (const std::string& candidate :
       {dir + "/store_load.runfiles/lockstep/tools/bench/store_load_torch.py", dir + "/store_load_torch.py"}) {
    if (::access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return "tools/bench/store_load_torch.py";
}

// TCPStore's run: the script prints "duration_s D server_cpu_s C server_peak_mib M server_idle_mib I" or
// "timeout T".
absl::StatusOr<std::string> RunTorch(int clients, int timeout_s) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError("store_load: pipe2 failed");
  Fd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  SubprocessOptions options;
  options.argv = {absl::GetFlag(FLAGS_python), TorchScript(), absl::StrCat("--clients=", clients),
                  absl::StrCat("--timeout_s=", timeout_s)};
  options.stdout_fd = write_end.get();
  options.new_process_group = true;
  options.parent_death_signal = SIGKILL;
  LOCKSTEP_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(options));
  write_end = Fd();
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(read_end.get(), buffer, sizeof(buffer))) > 0;) out.append(buffer, static_cast<size_t>(n));
  LOCKSTEP_ASSIGN_OR_RETURN(ExitStatus status,
                            child.Wait(Subprocess::Clock::now() + std::chrono::seconds(timeout_s + 120)));
  if (!status.success()) {
    return absl::InternalError(absl::StrCat("store_load: the TCPStore run failed (", status.ToString(), "): ", out));
  }
  return out;
}

int Main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int clients = absl::GetFlag(FLAGS_clients);
  if (absl::GetFlag(FLAGS_serve)) return Serve(clients);
  const int threads = absl::GetFlag(FLAGS_threads);
  const std::string peer = absl::GetFlag(FLAGS_peer);
  if (clients < 1 || clients > static_cast<int>(wire::kMaxKeys) || threads < 1 || (!peer.empty() && peer != "torch")) {
    std::fprintf(stderr,
                 "store_load: --clients must be in [1, %u], --threads >= 1 and --peer empty or \"torch\" (got %d, %d, "
                 "\"%s\")\n",
                 wire::kMaxKeys, clients, threads, peer.c_str());
    return 2;
  }
  RaiseFileLimit();
  const bool batched = absl::GetFlag(FLAGS_batched);
  std::printf("store_load: %d clients, set-up pattern: connect, set own key, wait for all %d, get each, barrier%s\n",
              clients, clients, batched ? " (lockstep: wait and get as one MULTI_GET)" : "");
  absl::StatusOr<Measured> ours =
      RunLockstep(clients, threads, batched, std::chrono::seconds(absl::GetFlag(FLAGS_timeout_s)));
  if (!ours.ok()) {
    std::fprintf(stderr, "%s\n", ours.status().ToString().c_str());
    return 1;
  }
  std::printf("lockstep TcpStore: %.3f s (server: %.2f s CPU, peak RSS %.1f MiB, %.1f MiB idle: %.1f KiB per client)\n",
              ours->seconds, ours->server.cpu_s, ours->server.peak_mib, ours->idle_rss_mib,
              (ours->server.peak_mib - ours->idle_rss_mib) * 1024 / clients);
  if (peer != "torch") return 0;
  std::fflush(stdout);
  const int peer_timeout = absl::GetFlag(FLAGS_peer_timeout_s);
  absl::StatusOr<std::string> theirs = RunTorch(clients, peer_timeout);
  if (!theirs.ok()) {
    std::fprintf(stderr, "%s\n", theirs.status().ToString().c_str());
    return 1;
  }
  double seconds = 0, cpu = 0, peak = 0, idle = 0;
  if (std::sscanf(theirs->c_str(), "duration_s %lf server_cpu_s %lf server_peak_mib %lf server_idle_mib %lf", &seconds,
                  &cpu, &peak, &idle) == 4) {
    std::printf(
        "torch TCPStore:    %.3f s (server: %.2f s CPU, peak RSS %.1f MiB, %.1f MiB idle: %.1f KiB per client)\n",
        seconds, cpu, peak, idle, (peak - idle) * 1024 / clients);
    std::printf("ratio %.2f\n", seconds / ours->seconds);
    return 0;
  }
  if (std::sscanf(theirs->c_str(), "timeout %lf", &seconds) == 1) {
    std::printf("torch TCPStore:    not done after %.0f s\n", seconds);
    std::printf("ratio >%.2f\n", seconds / ours->seconds);
    return 0;
  }
  std::fprintf(stderr, "store_load: the TCPStore run printed '%s'\n", theirs->c_str());
  return 1;
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) { return lockstep::Main(argc, argv); }
