#include "ddp/ddp_options.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::StatusOr<ReducerOptions> ToReducerOptions(const DdpOptions& options) {
  if (!(options.bucket_cap_mb > 0) || !std::isfinite(options.bucket_cap_mb)) {
    return absl::InvalidArgumentError(absl::StrCat("DistributedDataParallel: bucket_cap_mb is ", options.bucket_cap_mb,
                                                   "; it must be a positive number (MiB)"));
  }
  ReducerOptions r;
  // PyTorch: bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024).
  r.bucket_cap_bytes = static_cast<size_t>(options.bucket_cap_mb * 1024 * 1024);
  if (r.bucket_cap_bytes == 0) r.bucket_cap_bytes = 1;
  r.first_bucket_bytes = options.first_bucket_bytes;
  r.find_unused_parameters = options.find_unused_parameters;
  r.gradient_as_bucket_view = options.gradient_as_bucket_view;
  r.static_graph = options.static_graph;
  return r;
}

}  // namespace lockstep
