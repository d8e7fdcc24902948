// store_probe: what an attacker on the same host tries against a store of
// lockstep-run's (for tools/launch/launcher_hardening_test.sh).
//
//   store_probe HOST PORT TOKEN KEY [VALUE]
//
// Connects as a client with TOKEN ("" for none), then reads KEY (or, with
// VALUE, writes it). Prints "refused: <why>" and exits 3 when the store
// refused the connection or the request, "read: <value>" / "wrote" and
// exits 0 when it was allowed, and exits 1 on anything else.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "collectives/store/tcp_store.h"

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: store_probe HOST PORT TOKEN KEY [VALUE]\n");
    return 1;
  }
  lockstep::TcpStoreOptions options;
  options.host = argv[1];
  options.port = std::atoi(argv[2]);
  options.token = argv[3];
  options.timeout = lockstep::Milliseconds(3000);
  auto store = lockstep::TcpStore::Create(options);
  if (!store.ok()) {
    std::printf("refused: %s\n", std::string(store.status().message()).c_str());
    return 3;
  }
  if (argc == 6) {
    const absl::Status s = (*store)->Set(argv[4], argv[5]);
    if (!s.ok()) {
      std::printf("refused: %s\n", std::string(s.message()).c_str());
      return 3;
    }
    std::printf("wrote\n");
    return 0;
  }
  auto value = (*store)->Get(argv[4], lockstep::Milliseconds(1000));
  if (!value.ok()) {
    std::printf("refused: %s\n", std::string(value.status().message()).c_str());
    return 3;
  }
  std::printf("read: %s\n", value->c_str());
  return 0;
}
