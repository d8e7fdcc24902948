// Subgroups: Communicator::Split (MPI_Comm_split) and NewGroup
// (dist.new_group). See collectives/communicator.h.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/communicator.h"
#include "collectives/communicator_state.h"
#include "collectives/internal/communicator_checks.h"
#include "collectives/store/prefix_store.h"
#include "core/status.h"

namespace lockstep {
namespace {

// What every rank contributes to a split: its color, its key, and (NewGroup)
// a hash of the rank list it was given, so that lists that differ between
// ranks are an error instead of two groups that wait for each other.
constexpr int kFields = 3;

using communicator_internal::CommunicatorState;
using communicator_internal::Fingerprint;
using communicator_internal::OpType;

// The members' communicator from the backend's own split (native_split).
absl::StatusOr<std::unique_ptr<Communicator>> NativeSplit(CommunicatorState& st, int color, int key,
                                                          const Communicator::SubgroupSpec& spec);
// Split's and NewGroup's collective part: every rank's (color, key, check)
// gathered, `check` compared, the members' communicator made.
absl::StatusOr<std::unique_ptr<Communicator>> SplitWithCheck(CommunicatorState& st, int color, int key, uint32_t check,
                                                             const char* op);

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  if (color < kNoColor) {
    return absl::InvalidArgumentError(absl::StrCat("Split: color ", color, " on rank ", state_->rank,
                                                   " is negative; use a color >= 0, or kNoColor (-1) for no group"));
  }
  // Every rank takes the same branch here (the same creation path), so a
  // communicator without a factory fails alike everywhere, before any
  // exchange.
  if (!state_->subgroup_factory && !state_->capabilities.native_split) {
    return absl::FailedPreconditionError(
        "Split: this communicator has no subgroup factory; create it with CreateCommunicator, "
        "CreateTcpCommunicator, CreateShmCommunicator or CreateNcclCommunicator (collectives/bootstrap/), "
        "which rendezvous subgroups through their store");
  }
  return SplitWithCheck(*state_, color, key, 0, "Split");
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::NewGroup(absl::Span<const int> ranks) {
  std::vector<int> sorted(ranks.begin(), ranks.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= state_->size) {
      return absl::InvalidArgumentError(
          absl::StrCat("NewGroup: rank ", sorted[i], " is not a rank of this group (world size ", state_->size, ")"));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("NewGroup: rank ", sorted[i], " is listed twice"));
    }
  }
  if (sorted.empty()) return absl::InvalidArgumentError("NewGroup: the list of ranks is empty");
  if (!state_->subgroup_factory && !state_->capabilities.native_split) {
    return absl::FailedPreconditionError(
        "NewGroup: this communicator has no subgroup factory; create it with CreateCommunicator, "
        "CreateTcpCommunicator, CreateShmCommunicator or CreateNcclCommunicator (collectives/bootstrap/)");
  }
  const auto at = std::find(sorted.begin(), sorted.end(), state_->rank);
  const bool member = at != sorted.end();
  const std::vector<int64_t> as_counts(sorted.begin(), sorted.end());
  // Members in ascending order of their rank here, as dist.new_group.
  return SplitWithCheck(*state_, member ? 0 : kNoColor, member ? static_cast<int>(at - sorted.begin()) : 0,
                        communicator_internal::LayoutHash(as_counts) | 1, "NewGroup");
}

namespace {

absl::StatusOr<std::unique_ptr<Communicator>> NativeSplit(CommunicatorState& st, int color, int key,
                                                          const Communicator::SubgroupSpec& spec) {
  // The backend's split is a collective of this group (NCCL's
  // ncclCommSplit): it runs as one of its operations, on every rank.
  auto made = std::make_shared<std::unique_ptr<Backend>>();
  const int new_rank = color == Communicator::kNoColor ? -1 : spec.rank,
            new_size = color == Communicator::kNoColor ? 0 : spec.size;
  Fingerprint f{0, static_cast<uint8_t>(OpType::kSplit), 0, 0, 0, -1, 0, 0, 0};
  LOCKSTEP_RETURN_IF_ERROR(
      st.Enqueue(f, [b = st.backend.get(), made, color, key, new_rank, new_size](const OpContext& ctx) -> absl::Status {
          LOCKSTEP_ASSIGN_OR_RETURN(*made, b->Split(color, key, new_rank, new_size, ctx));
          return absl::OkStatus();
        })->Wait());
  if (color == Communicator::kNoColor) return std::unique_ptr<Communicator>();
  if (*made == nullptr) return absl::InternalError("Split: the backend made no subgroup for a member");
  std::shared_ptr<Store> failures;
  if (st.store != nullptr) failures = std::make_shared<PrefixStore>(spec.name, st.store);
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child,
                            Communicator::Create(std::move(*made), st.options, std::move(failures)));
  // The subgroup's own subgroups: natively again, or through this group's
  // factory under the subgroup's name.
  if (st.subgroup_factory) {
    child->set_subgroup_factory(
        [factory = st.subgroup_factory, name = spec.name](const Communicator::SubgroupSpec& grand) {
          Communicator::SubgroupSpec renamed = grand;
          renamed.name = absl::StrCat(name, "/", grand.name);
          return factory(renamed);
        });
  }
  return child;
}

absl::StatusOr<std::unique_ptr<Communicator>> SplitWithCheck(CommunicatorState& st, int color, int key, uint32_t check,
                                                             const char* op) {
  // The name is the same on every rank: each calls Split and NewGroup in
  // the same order, as every collective.
  const uint64_t index = st.splits.fetch_add(1);
  // Exchanged as the fingerprints are (any backend, host memory), as an
  // operation of this group.
  auto mine = std::make_shared<std::vector<int64_t>>(std::vector<int64_t>{color, key, check});
  auto all = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(kFields) * st.size);
  Fingerprint f{0, static_cast<uint8_t>(OpType::kSplit), static_cast<uint8_t>(DType::kI64), 0, 0, -1, kFields, 0, 0};
  LOCKSTEP_RETURN_IF_ERROR(st.Enqueue(f, [b = st.backend.get(), mine, all](const OpContext& ctx) {
                               return b->AllGatherBytes(mine->data(), sizeof(int64_t) * kFields, all->data(), ctx);
                             })->Wait());
  const int64_t* fields = all->data();
  for (int r = 0; r < st.size; ++r) {
    if (fields[kFields * r + 2] != check) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": rank ", r, " passed ", fields[kFields * r + 2] == 0 ? "Split's arguments" : "another rank list",
          " than rank ", st.rank, " in the same call; every rank must call ", op, " with the same ",
          check == 0 ? "kind of call" : "list of ranks", " in the same order"));
    }
  }
  // A backend that splits itself needs every rank, members or not.
  if (color == Communicator::kNoColor && !st.capabilities.native_split) return std::unique_ptr<Communicator>();
  // Members: ranks of this color by (key, rank).
  std::vector<std::pair<int64_t, int>> order;
  for (int r = 0; r < st.size; ++r) {
    if (fields[kFields * r] == color) order.emplace_back(fields[kFields * r + 1], r);
  }
  std::sort(order.begin(), order.end());
  Communicator::SubgroupSpec spec;
  for (const auto& [k, r] : order) {
    if (r == st.rank) spec.rank = static_cast<int>(spec.members.size());
    spec.members.push_back(r);
  }
  spec.size = static_cast<int>(spec.members.size());
  spec.name = absl::StrCat("split", index, "/color", color);
  absl::StatusOr<std::unique_ptr<Communicator>> child =
      st.capabilities.native_split ? NativeSplit(st, color, key, spec) : st.subgroup_factory(spec);
  if (child.ok() && color == Communicator::kNoColor) return std::unique_ptr<Communicator>();
  if (!child.ok()) {
    return absl::Status(
        child.status().code(),
        absl::StrCat(op, ": rank ", st.rank, " could not build its subgroup (ranks ", absl::StrJoin(spec.members, ","),
                     " here; color ", color, "): ", child.status().message()));
  }
  return child;
}

}  // namespace

}  // namespace lockstep
