#include "collectives/backend.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<std::unique_ptr<Backend>> Backend::Split(int, int, int, int, const OpContext&) {
  return absl::UnimplementedError(
      absl::StrCat("the ", capabilities().name, " backend makes no subgroups itself; the Communicator builds them"));
}

}  // namespace lockstep
