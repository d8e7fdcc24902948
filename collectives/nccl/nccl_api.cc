#include "collectives/nccl/nccl_api.h"

#include "absl/strings/str_cat.h"

namespace lockstep {

std::string NcclVersionString(int code) {
  if (code <= 0) return "none";
  // Codes below 2.9 have two digits for the minor version; later ones have
  // major * 10000 (NCCL_VERSION in nccl.h).
  if (code < 20900) return absl::StrCat(code / 1000, ".", code % 1000 / 100, ".", code % 100);
  return absl::StrCat(code / 10000, ".", code % 10000 / 100, ".", code % 100);
}

}  // namespace lockstep
