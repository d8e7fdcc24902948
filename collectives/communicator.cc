// The Communicator's life: options, creation, the closing summary, and its
// accessors (collectives/communicator.h). The operations are in
// communicator_{collectives,objects,p2p,split}.cc; the queue and the running
// of an operation in collectives/internal/.
#include "collectives/communicator.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "collectives/communicator_state.h"
#include "collectives/internal/fingerprint.h"
#include "core/status.h"

namespace lockstep {

using communicator_internal::CommunicatorState;

absl::Status ValidateCommunicatorOptions(const CommunicatorOptions& options) {
  if (options.timeout <= Milliseconds(0)) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.timeout is ", options.timeout.count(),
                                                   " ms; it must be positive (default 300000)"));
  }
  if (options.wait_spin_microseconds < 0 || options.wait_spin_microseconds > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.wait_spin_microseconds is ",
                                                   options.wait_spin_microseconds,
                                                   "; it must be in [0, 1000000] (default 100)"));
  }
  if (options.worker_spin_microseconds < 0 || options.worker_spin_microseconds > 1000000) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.worker_spin_microseconds is ",
                                                   options.worker_spin_microseconds,
                                                   "; it must be in [0, 1000000] (default 50)"));
  }
  if (options.max_object_bytes < 1 || options.max_object_bytes > (int64_t{1} << 40)) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.max_object_bytes is ", options.max_object_bytes,
                                                   "; it must be in [1, 2^40] (default 2^30)"));
  }
  if (options.flight_recorder_entries < 0 || options.flight_recorder_entries > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.flight_recorder_entries is ",
                                                   options.flight_recorder_entries,
                                                   "; it must be in [0, 2^20] (default 64; 0: off)"));
  }
  if (options.failure_report_window < Milliseconds(0)) {
    return absl::InvalidArgumentError(absl::StrCat("CommunicatorOptions.failure_report_window is ",
                                                   options.failure_report_window.count(),
                                                   " ms; it must be >= 0 (default 1000)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(std::unique_ptr<Backend> backend,
                                                                   CommunicatorOptions options,
                                                                   std::shared_ptr<Store> failure_store) {
  if (backend == nullptr) return absl::InvalidArgumentError("Communicator::Create: no backend");
  LOCKSTEP_RETURN_IF_ERROR(ValidateCommunicatorOptions(options));
  // TORCH_DISTRIBUTED_DEBUG's levels.
  if (const char* debug = std::getenv("LOCKSTEP_DEBUG"); debug != nullptr && *debug != '\0') {
    const std::string level = absl::AsciiStrToUpper(debug);
    if (level == "INFO" || level == "DETAIL") options.log_summary = true;
    if (level == "DETAIL") options.debug_checks = true;
    if (level != "OFF" && level != "INFO" && level != "DETAIL") {
      return absl::InvalidArgumentError(absl::StrCat("Communicator::Create: LOCKSTEP_DEBUG='", debug,
                                                     "' is not a debug level; use OFF, INFO (a line at creation, "
                                                     "operation counts at the end) or DETAIL (also compare every "
                                                     "operation's fingerprint across ranks)"));
    }
  }
  if (const char* dir = std::getenv("LOCKSTEP_DUMP_ON_FAILURE");
      dir != nullptr && *dir != '\0' && options.dump_on_failure.empty()) {
    options.dump_on_failure = dir;
  }
  auto state = std::make_unique<communicator_internal::CommunicatorState>(std::move(backend), std::move(options),
                                                                          std::move(failure_store));
  LOCKSTEP_RETURN_IF_ERROR(state->queue.Start());
  const communicator_internal::CommunicatorState& s = *state;
  if (s.options.log_summary) {
    std::fprintf(stderr, "[lockstep] rank %d of %d: communicator created: backend %s, timeout %lld ms, checks %s\n",
                 s.rank, s.size, s.capabilities.name.c_str(), static_cast<long long>(s.options.timeout.count()),
                 s.options.debug_checks ? "DETAIL (fingerprints compared)" : "off");
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(state)));
}

Communicator::Communicator(std::unique_ptr<CommunicatorState> state) : state_(std::move(state)) {}

Communicator::~Communicator() {
  CommunicatorState& s = *state_;
  s.queue.Stop();
  if (!s.options.log_summary) return;
  std::string counts;
  uint64_t total = 0;
  for (int op = 1; op < communicator_internal::kOpTypes; ++op) {
    const uint64_t n = s.queue.counts()[op];
    if (n == 0) continue;
    absl::StrAppend(&counts, counts.empty() ? "" : ", ", communicator_internal::OpTypeName(op), " ", n);
    total += n;
  }
  const absl::Status broken = s.queue.broken();
  std::fprintf(stderr, "[lockstep] rank %d of %d: communicator destroyed after %llu operations%s%s%s\n", s.rank, s.size,
               static_cast<unsigned long long>(total), counts.empty() ? "" : ": ", counts.c_str(),
               broken.ok() ? "" : absl::StrCat("; broken by: ", broken.message()).c_str());
}

int Communicator::rank() const { return state_->rank; }
int Communicator::size() const { return state_->size; }
const CommunicatorOptions& Communicator::options() const { return state_->options; }
const BackendCapabilities& Communicator::capabilities() const { return state_->capabilities; }
TrafficCounters Communicator::Traffic() const { return state_->backend->Traffic(); }
const char* Communicator::AllReduceAlgorithm(int64_t count, DType dtype) const {
  return state_->backend->AllReduceAlgorithm(count, dtype);
}
absl::Status Communicator::broken_status() { return state_->queue.broken(); }

void Communicator::set_subgroup_factory(SubgroupFactory factory) { state_->subgroup_factory = std::move(factory); }

}  // namespace lockstep
