// Built against an old label (@lockstep//collectives:hash_store) and its old
// include path: the forwarding header leads to collectives/store/hash_store.h.
#include <iostream>

#include "collectives/hash_store.h"

int main() {
  lockstep::HashStore store;
  if (!store.Set("key", "value").ok()) return 1;
  absl::StatusOr<int64_t> n = store.Add("counter", 41);
  if (!n.ok()) return 1;
  n = store.Add("counter", 1);
  absl::StatusOr<bool> both = store.Check({"key", "counter"});
  std::cout << (n.ok() ? *n : -1) << " " << (both.ok() && *both ? "both" : "missing") << "\n";
  return 0;
}
