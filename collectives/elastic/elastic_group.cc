#include "collectives/elastic/elastic_group.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "core/tensor.h"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

std::string JoinIds(const std::vector<int>& ids) { return absl::StrJoin(ids, ","); }

absl::StatusOr<std::vector<int>> ParseIds(absl::string_view text, absl::string_view what) {
  std::vector<int> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int id = 0;
    if (!absl::SimpleAtoi(part, &id) || id < 0) {
      return absl::DataLossError(absl::StrCat("ElasticGroup: ", what, " '", text, "' is not a list of member ids"));
    }
    ids.push_back(id);
  }
  return ids;
}

// A decision "shrink <n>" or "grow <j>".
struct Decision {
  bool grow = false;
  int64_t count = 0;
};

absl::StatusOr<Decision> ParseDecision(absl::string_view text) {
  Decision d;
  absl::string_view number = text;
  if (absl::ConsumePrefix(&number, "grow ")) {
    d.grow = true;
  } else if (!absl::ConsumePrefix(&number, "shrink ")) {
    return absl::DataLossError(absl::StrCat("ElasticGroup: an epoch's decision is '", text, "'"));
  }
  if (!absl::SimpleAtoi(number, &d.count) || d.count < 0) {
    return absl::DataLossError(absl::StrCat("ElasticGroup: an epoch's decision is '", text, "'"));
  }
  return d;
}

}  // namespace

std::string ElasticGroup::Key(int64_t epoch, const std::string& what) const {
  return absl::StrCat(options_.store_prefix, "/", epoch, "/", what);
}

int ElasticGroup::rank() const {
  return static_cast<int>(std::find(members_.begin(), members_.end(), member_) - members_.begin());
}

absl::Status ElasticGroup::Form(int64_t epoch, std::vector<int> members) {
  std::sort(members.begin(), members.end());
  const auto me = std::find(members.begin(), members.end(), member_);
  if (me == members.end()) {
    return absl::FailedPreconditionError(absl::StrCat("ElasticGroup: member ", member_, " is not in epoch ", epoch,
                                                      " (members ", JoinIds(members), "); join as a newcomer"));
  }
  comm_.reset();  // The old epoch's connections go first.
  const int rank = static_cast<int>(me - members.begin());
  const int size = static_cast<int>(members.size());
  if (options_.make_communicator) {
    LOCKSTEP_ASSIGN_OR_RETURN(comm_, options_.make_communicator(store_, rank, size, Key(epoch, "comm")));
  } else {
    TcpCommunicatorOptions options = options_.communicator;
    options.store_prefix = Key(epoch, "comm");
    LOCKSTEP_ASSIGN_OR_RETURN(comm_, CreateTcpCommunicator(store_, rank, size, options));
  }
  if (comm_ == nullptr) return absl::InternalError("ElasticGroup: make_communicator returned no communicator");
  epoch_ = epoch;
  members_ = std::move(members);
  // For observers (the launcher's "group re-formed" line): the epoch's size,
  // once its communicator exists.
  if (rank == 0) LOCKSTEP_RETURN_IF_ERROR(store_->Set(Key(epoch, "formed"), absl::StrCat(size)));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ElasticGroup>> ElasticGroup::Create(std::shared_ptr<Store> store, int member, int size,
                                                                   ElasticGroupOptions options) {
  if (size < 1 || member < 0 || member >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ElasticGroup::Create: member ", member, " of ", size, ": expected 0 <= member < size"));
  }
  if (!(options.settle.count() >= 0) || options.timeout.count() <= 0) {
    return absl::InvalidArgumentError("ElasticGroup::Create: settle must be >= 0 and timeout > 0");
  }
  std::unique_ptr<ElasticGroup> group(new ElasticGroup(std::move(store), member, std::move(options)));
  std::vector<int> members(size);
  for (int i = 0; i < size; ++i) members[i] = i;
  // Epoch 0 is every initial member; a newcomer reads it as any epoch.
  if (member == 0) LOCKSTEP_RETURN_IF_ERROR(group->store_->Set(group->Key(0, "members"), JoinIds(members)));
  LOCKSTEP_RETURN_IF_ERROR(group->Form(0, std::move(members)));
  return group;
}

absl::StatusOr<std::vector<int>> ElasticGroup::Shrink() {
  const int64_t next = epoch_ + 1;
  const Clock::time_point arrived_at = Clock::now();
  const Clock::time_point settle_end = arrived_at + options_.settle;
  const Clock::time_point deadline = arrived_at + options_.timeout;
  LOCKSTEP_ASSIGN_OR_RETURN(const int64_t ticket, store_->Add(Key(next, "arrivals"), 1));
  LOCKSTEP_RETURN_IF_ERROR(store_->Set(Key(next, "arrival/" + std::to_string(ticket)), absl::StrCat(member_)));
  // Wait for every old member, or for the settle time, whichever is first;
  // then propose to close at the count seen. A decision already made (by a
  // survivor that closed, or an admission) ends the wait at once.
  // The last old member's arrival key exists once all have arrived.
  const std::string everyone = Key(next, "arrival/" + std::to_string(members_.size()));
  std::string decision;
  while (true) {
    LOCKSTEP_ASSIGN_OR_RETURN(const bool decided, store_->Check({Key(next, "decision")}));
    if (decided) {
      LOCKSTEP_ASSIGN_OR_RETURN(decision, store_->Get(Key(next, "decision"), options_.timeout));
      break;
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("ElasticGroup::Shrink: member ", member_, " waited for epoch ", next, "'s decision"));
    }
    // Waits on the store in short slices, so that another survivor's
    // decision is seen within one.
    const Milliseconds slice = std::min<Milliseconds>(
        Milliseconds(20),
        std::max<Milliseconds>(Milliseconds(1), std::chrono::duration_cast<Milliseconds>(settle_end - now)));
    bool all_here = store_->Wait({everyone}, slice).ok();
    if (!all_here) {
      // Those a launcher saw exit will not come: with every missing one
      // gone, nobody is left to wait for.
      LOCKSTEP_ASSIGN_OR_RETURN(all_here, AllMissingGone(next));
    }
    if (all_here || Clock::now() >= settle_end) {
      LOCKSTEP_ASSIGN_OR_RETURN(const int64_t count, store_->Add(Key(next, "arrivals"), 0));
      LOCKSTEP_ASSIGN_OR_RETURN(decision,
                                store_->CompareSet(Key(next, "decision"), "", absl::StrCat("shrink ", count)));
      break;
    }
  }
  LOCKSTEP_ASSIGN_OR_RETURN(const Decision d, ParseDecision(decision));
  if (d.grow) {
    return absl::FailedPreconditionError(
        absl::StrCat("ElasticGroup::Shrink: member ", member_, ": epoch ", next,
                     " was decided as an admission of newcomers while this member re-formed; call AdmitNewcomers"));
  }
  if (ticket > d.count) {
    return absl::FailedPreconditionError(absl::StrCat("ElasticGroup::Shrink: member ", member_,
                                                      " arrived after the survivors closed epoch ", next, " with ",
                                                      d.count, " members; join as a newcomer"));
  }
  std::vector<std::string> keys;
  for (int64_t k = 1; k <= d.count; ++k) keys.push_back(Key(next, "arrival/" + std::to_string(k)));
  LOCKSTEP_ASSIGN_OR_RETURN(const std::vector<std::string> ids, store_->MultiGet(keys, options_.timeout));
  std::vector<int> members;
  for (const std::string& id : ids) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> one, ParseIds(id, "an arrival"));
    members.insert(members.end(), one.begin(), one.end());
  }
  std::sort(members.begin(), members.end());
  std::vector<int> lost;
  for (int m : members_) {
    if (!std::binary_search(members.begin(), members.end(), m)) lost.push_back(m);
  }
  // Any survivor may write the record: the same value from each.
  LOCKSTEP_RETURN_IF_ERROR(store_->Set(Key(next, "members"), JoinIds(members)));
  LOCKSTEP_RETURN_IF_ERROR(Form(next, std::move(members)));
  return lost;
}

absl::StatusOr<int> ElasticGroup::AdmitNewcomers() {
  const int64_t next = epoch_ + 1;
  // Rank 0 decides from the newcomers registered so far; all read it.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor decided, Tensor::Zeros({1}, DType::kI64));
  if (rank() == 0) {
    // One store round trip a step while nobody waits: the admitted count is
    // read only when the registrations pass what this member knows of it.
    LOCKSTEP_ASSIGN_OR_RETURN(const int64_t joins, store_->Add(options_.store_prefix + "/joins", 0));
    if (joins > admitted_hint_) {
      LOCKSTEP_ASSIGN_OR_RETURN(admitted_hint_, store_->Add(options_.store_prefix + "/admitted", 0));
    }
    decided.data<int64_t>()[0] = joins - admitted_hint_;
  }
  LOCKSTEP_RETURN_IF_ERROR(comm_->Broadcast(decided, 0)->Wait());
  const int64_t newcomers = decided.data<int64_t>()[0];
  if (newcomers == 0) return 0;
  if (rank() == 0) {
    LOCKSTEP_ASSIGN_OR_RETURN(const int64_t admitted, store_->Add(options_.store_prefix + "/admitted", 0));
    LOCKSTEP_ASSIGN_OR_RETURN(
        const std::string decision,
        store_->CompareSet(Key(next, "decision"), "", absl::StrCat("grow ", admitted + newcomers)));
    if (decision != absl::StrCat("grow ", admitted + newcomers)) {
      return absl::FailedPreconditionError(absl::StrCat("ElasticGroup::AdmitNewcomers: epoch ", next,
                                                        " was already decided ('", decision, "'): call Shrink"));
    }
    std::vector<std::string> keys;
    for (int64_t j = admitted + 1; j <= admitted + newcomers; ++j) {
      keys.push_back(options_.store_prefix + "/join/" + std::to_string(j));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(const std::vector<std::string> ids, store_->MultiGet(keys, options_.timeout));
    std::vector<int> members = members_;
    for (const std::string& id : ids) {
      LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> one, ParseIds(id, "a newcomer"));
      for (int m : one) {
        if (std::find(members.begin(), members.end(), m) != members.end()) {
          return absl::FailedPreconditionError(absl::StrCat("ElasticGroup::AdmitNewcomers: newcomer ", m,
                                                            " has the id of a member; each needs a new id"));
        }
        members.push_back(m);
      }
    }
    LOCKSTEP_RETURN_IF_ERROR(store_->Set(Key(next, "members"), JoinIds(members)));
    LOCKSTEP_RETURN_IF_ERROR(store_->Add(options_.store_prefix + "/admitted", newcomers).status());
    for (const std::string& key : keys) LOCKSTEP_RETURN_IF_ERROR(store_->Set(key + "/epoch", absl::StrCat(next)));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(const std::string record, store_->Get(Key(next, "members"), options_.timeout));
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> members, ParseIds(record, "a membership"));
  LOCKSTEP_RETURN_IF_ERROR(Form(next, std::move(members)));
  admitted_hint_ += newcomers;
  return static_cast<int>(newcomers);
}

absl::StatusOr<bool> ElasticGroup::AllMissingGone(int64_t next) {
  LOCKSTEP_ASSIGN_OR_RETURN(const int64_t count, store_->Add(Key(next, "arrivals"), 0));
  std::vector<std::string> keys;
  for (int64_t k = 1; k <= count; ++k) keys.push_back(Key(next, "arrival/" + std::to_string(k)));
  LOCKSTEP_ASSIGN_OR_RETURN(const std::vector<std::string> ids, store_->MultiGet(keys, options_.timeout));
  std::vector<int> arrived;
  for (const std::string& id : ids) {
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> one, ParseIds(id, "an arrival"));
    arrived.insert(arrived.end(), one.begin(), one.end());
  }
  std::vector<std::string> gone;
  for (int m : members_) {
    if (std::find(arrived.begin(), arrived.end(), m) == arrived.end()) {
      gone.push_back(GoneKey(options_.store_prefix, m));
    }
  }
  if (gone.empty()) return true;
  return store_->Check(gone);
}

std::string ElasticGroup::GoneKey(const std::string& store_prefix, int member) {
  return absl::StrCat(store_prefix, "/gone/", member);
}

absl::Status ElasticGroup::MarkGone(Store& store, const std::string& store_prefix, int member) {
  return store.Set(GoneKey(store_prefix, member), "1");
}

absl::Status ElasticGroup::WaitForNewcomers(int64_t count) {
  if (count <= 0) return absl::OkStatus();
  const std::string key = options_.store_prefix + "/join/" + std::to_string(count);
  absl::Status s = store_->Wait({key}, options_.timeout);
  if (!s.ok()) {
    return absl::DeadlineExceededError(absl::StrCat("ElasticGroup::WaitForNewcomers: member ", member_, " waited ",
                                                    options_.timeout.count(), " ms for newcomer ", count,
                                                    " to register: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ElasticGroup>> ElasticGroup::Join(std::shared_ptr<Store> store, int member,
                                                                 ElasticGroupOptions options) {
  if (member < 0) return absl::InvalidArgumentError("ElasticGroup::Join: the member id must be >= 0");
  std::unique_ptr<ElasticGroup> group(new ElasticGroup(std::move(store), member, std::move(options)));
  const std::string& prefix = group->options_.store_prefix;
  LOCKSTEP_ASSIGN_OR_RETURN(const int64_t ticket, group->store_->Add(prefix + "/joins", 1));
  const std::string key = prefix + "/join/" + std::to_string(ticket);
  group->admitted_hint_ = ticket - 1;
  LOCKSTEP_RETURN_IF_ERROR(group->store_->Set(key, absl::StrCat(member)));
  absl::StatusOr<std::string> epoch_text = group->store_->Get(key + "/epoch", group->options_.timeout);
  if (!epoch_text.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("ElasticGroup::Join: member ", member, " was not admitted within the timeout (",
                     epoch_text.status().message(), "); the members admit newcomers with AdmitNewcomers"));
  }
  int64_t epoch = 0;
  if (!absl::SimpleAtoi(*epoch_text, &epoch)) {
    return absl::DataLossError(absl::StrCat("ElasticGroup::Join: admitted at epoch '", *epoch_text, "'"));
  }
  LOCKSTEP_ASSIGN_OR_RETURN(const std::string record,
                            group->store_->Get(group->Key(epoch, "members"), group->options_.timeout));
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> members, ParseIds(record, "a membership"));
  LOCKSTEP_RETURN_IF_ERROR(group->Form(epoch, std::move(members)));
  return group;
}

}  // namespace lockstep
