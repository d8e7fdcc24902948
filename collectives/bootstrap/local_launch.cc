#include "collectives/bootstrap/local_launch.h"

#include <sys/random.h>

#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "collectives/store/tcp_store.h"
#include "core/status.h"
#include "core/subprocess.h"

namespace lockstep {

std::string RandomStoreToken() {
  unsigned char bytes[16];
  if (getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) return "";
  std::string token;
  for (unsigned char b : bytes) token += absl::StrFormat("%02x", b);
  return token;
}

absl::Status RunLocalRanks(const LocalLaunchOptions& options) {
  if (options.nproc < 1 || options.argv.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.name, ": nproc (", options.nproc, ") must be >= 1 and argv non-empty"));
  }
  TcpStoreServerOptions server_options;
  server_options.host = "127.0.0.1";
  server_options.token = RandomStoreToken();
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStoreServer> server, TcpStoreServer::Start(server_options));
  const std::vector<int> cpus = AllowedCpus();
  const bool bind = options.bind_to_core && options.nproc <= static_cast<int>(cpus.size());
  // Destroying `children` (any return) kills and reaps the ranks still running.
  std::vector<Subprocess> children;
  for (int rank = 0; rank < options.nproc; ++rank) {
    SubprocessOptions child_options;
    child_options.argv = options.argv;
    if (bind) child_options.cpus = {cpus[rank]};
    child_options.env = {{"RANK", absl::StrCat(rank)},
                         {"LOCAL_RANK", absl::StrCat(rank)},
                         {"WORLD_SIZE", absl::StrCat(options.nproc)},
                         {"LOCAL_WORLD_SIZE", absl::StrCat(options.nproc)},
                         {"MASTER_ADDR", "127.0.0.1"},
                         {"MASTER_PORT", absl::StrCat(server->port())},
                         {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                         {"LOCKSTEP_STORE_TOKEN", server_options.token}};
    absl::StatusOr<Subprocess> child = Subprocess::Spawn(child_options);
    if (!child.ok()) {
      return absl::Status(child.status().code(),
                          absl::StrCat(options.name, ": cannot start rank ", rank, ": ", child.status().message()));
    }
    children.push_back(*std::move(child));
  }
  absl::Status first_failure;
  for (int running = options.nproc; running > 0; --running) {
    LOCKSTEP_ASSIGN_OR_RETURN(WaitAnyResult ended, WaitAny(absl::MakeSpan(children), Subprocess::Deadline::max()));
    if (ended.status.success() || !first_failure.ok()) continue;
    first_failure = absl::InternalError(
        absl::StrCat(options.name, ": rank ", ended.index, " ", ended.status.ToString(), "; stopped the other ranks"));
    for (Subprocess& child : children) (void)child.Kill();
  }
  return first_failure;
}

}  // namespace lockstep
