// Which address a rank advertises to its peers (and listens on), chosen
// without flags the way gloo and NCCL do, so that a multi-node job needs
// nothing beyond MASTER_ADDR.
//
//   AddressSelection selection;
//   selection.master_addr = env.master_addr;
//   selection.spans_hosts = env.world_size > env.local_world_size;
//   LOCKSTEP_ASSIGN_OR_RETURN(std::string host, ChooseLocalAddress(selection));
//
// In order:
//   1. `host` (an option, the benchmark's --host, or LOCKSTEP_SOCKET_ADDR):
//      used as given.
//   2. `ifname` (LOCKSTEP_SOCKET_IFNAME, as GLOO_SOCKET_IFNAME): that
//      interface's first IPv4 address, else its first global IPv6 one.
//   3. The source address of this host's route toward MASTER_ADDR (a UDP
//      socket connected there: no packet is sent), or MASTER_ADDR itself
//      when it is one of this host's addresses.
//   A loopback result is kept only when every rank runs on this host
//   (spans_hosts false): Debian maps the hostname to 127.0.1.1, so
//   MASTER_ADDR=$(hostname) would otherwise advertise an address no other
//   host can reach. Then the first non-loopback interface that is up is
//   taken, or the choice fails naming the variables that override it.
#ifndef LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_ADDRESS_H_
#define LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_ADDRESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

struct AddressSelection {
  std::string master_addr;   // Where the store is (a name or an address).
  bool spans_hosts = false;  // Some ranks run on other hosts.
  std::string host;          // Explicit choice (1.).
  std::string ifname;        // Interface name (2.).
};

absl::StatusOr<std::string> ChooseLocalAddress(const AddressSelection& selection);

// AddressSelection's overrides from the environment: LOCKSTEP_SOCKET_ADDR
// into `host`, LOCKSTEP_SOCKET_IFNAME into `ifname` (unless already set).
void ApplyAddressEnvironment(AddressSelection* selection);

// One address of an interface, for messages and tests.
struct InterfaceAddress {
  std::string interface;
  std::string address;
  bool loopback;
  bool up;
  bool ipv6;
};
std::vector<InterfaceAddress> LocalAddresses();

bool IsLoopbackAddress(const std::string& address);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_TRANSPORT_TCP_ADDRESS_H_
