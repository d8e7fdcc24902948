#include "tools/launch/group_state.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace launch {

using std::chrono::milliseconds;

std::string EncodeFailure(const FailureRecord& r) {
  nlohmann::json j = {{"rank", r.rank},
                      {"local_rank", r.local_rank},
                      {"group_rank", r.group_rank},
                      {"hostname", r.hostname},
                      {"host", r.host},
                      {"what", r.what},
                      {"exit_code", r.exit_code},
                      {"signal", r.signal},
                      {"tail", r.tail},
                      {"restartable", r.restartable},
                      {"agent_lost", r.agent_lost}};
  // Replace, not throw, on bytes that are not UTF-8 (a worker's output).
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<FailureRecord> DecodeFailure(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&] {
    return absl::DataLossError(
        "the failure record in the rendezvous store is malformed; do two launchers "
        "share one rendezvous endpoint and run id?");
  };
  if (!j.is_object()) return bad();
  FailureRecord r;
  auto get_int = [&](const char* key, int* out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return false;
    *out = it->get<int>();
    return true;
  };
  auto get_string = [&](const char* key, std::string* out) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) return false;
    *out = it->get<std::string>();
    return true;
  };
  auto restartable = j.find("restartable");
  auto agent_lost = j.find("agent_lost");
  if (!get_int("rank", &r.rank) || !get_int("local_rank", &r.local_rank) || !get_int("group_rank", &r.group_rank) ||
      !get_string("hostname", &r.hostname) || !get_string("host", &r.host) || !get_string("what", &r.what) ||
      !get_int("exit_code", &r.exit_code) || !get_int("signal", &r.signal) || !get_string("tail", &r.tail) ||
      restartable == j.end() || !restartable->is_boolean() || agent_lost == j.end() || !agent_lost->is_boolean()) {
    return bad();
  }
  r.restartable = restartable->get<bool>();
  r.agent_lost = agent_lost->get<bool>();
  return r;
}

namespace {

constexpr char kRule[] = "[lockstep-run] ============================================================\n";

// "the agent of node rank 1 on host node1 (10.0.0.2)".
std::string AgentName(const FailureRecord& r) {
  std::string who =
      r.group_rank >= 0 ? absl::StrCat("the agent of node rank ", r.group_rank) : std::string("the agent");
  if (!r.hostname.empty() || !r.host.empty()) {
    absl::StrAppend(&who, " on host ", r.hostname.empty() ? r.host : r.hostname);
    if (!r.hostname.empty() && !r.host.empty() && r.host != r.hostname) absl::StrAppend(&who, " (", r.host, ")");
  }
  return who;
}

void AppendTail(std::string* text, const std::string& tail) {
  if (tail.empty()) return;
  absl::StrAppend(text, "[lockstep-run]   last lines of its output:\n", tail);
  if (tail.back() != '\n') text->push_back('\n');
}

}  // namespace

std::string DescribeFailure(const FailureRecord& r) {
  if (r.rank >= 0) return absl::StrCat("rank ", r.rank, " on ", r.hostname, " ", r.what);
  return absl::StrCat(AgentName(r), ": ", r.what);
}

std::string FailureSummary(const JobFailure& job, int restarts, int max_restarts) {
  std::string text = kRule;
  absl::StrAppend(&text, "[lockstep-run] FAILED (restarts used: ", restarts, " of ", max_restarts, ")\n");
  if (job.first.has_value()) {
    const FailureRecord& r = *job.first;
    if (r.rank >= 0) {
      absl::StrAppend(&text, "[lockstep-run] first failure: rank ", r.rank, " (local_rank ", r.local_rank,
                      ", node rank ", r.group_rank, ") on host ", r.hostname, " (", r.host, ")\n");
      absl::StrAppend(&text, "[lockstep-run]   ", r.what, "\n");
    } else {
      absl::StrAppend(&text, "[lockstep-run] first failure: ", AgentName(r), ": ", r.what, "\n");
    }
    AppendTail(&text, r.tail);
  } else {
    absl::StrAppend(&text, "[lockstep-run] first failure: none (no worker group ran)\n");
  }
  if (job.likely_cause.has_value()) {
    const FailureRecord& c = *job.likely_cause;
    absl::StrAppend(&text, "[lockstep-run] likely cause: ", AgentName(c), ": ", c.what, "\n");
    if (job.first.has_value() && job.first->rank >= 0) {
      absl::StrAppend(&text, "[lockstep-run]   (the failure of rank ", job.first->rank,
                      " is probably a consequence: its peers vanished with that agent)\n");
    }
    AppendTail(&text, c.tail);
  }
  if (!job.ended.empty()) absl::StrAppend(&text, "[lockstep-run] the job ended: ", job.ended, "\n");
  absl::StrAppend(&text, kRule);
  return text;
}

std::string FailureSummary(const FailureRecord& r, int restarts, int max_restarts) {
  JobFailure job;
  job.first = r;
  return FailureSummary(job, restarts, max_restarts);
}

GroupState::GroupState(Store* store, const GroupAssignment& group, int64_t agent_id, AgentLiveness* liveness)
    : store_(store), group_(group), agent_id_(agent_id), liveness_(liveness) {
  const auto now = SteadyClock::now();
  for (const NodeInfo& node : group_.nodes) {
    if (node.agent_id != agent_id_) heartbeats_[node.agent_id] = Seen{-1, now};
  }
}

std::string GroupState::Key(const char* what) const { return absl::StrCat("a", group_.attempt, "/", what); }

absl::Status GroupState::PublishFailure(const FailureRecord& record) {
  return store_->CompareSet(Key("failure"), "", EncodeFailure(record)).status();
}

absl::StatusOr<std::optional<FailureRecord>> GroupState::Failure() {
  absl::StatusOr<bool> there = store_->Check({Key("failure")});
  if (!there.ok()) return there.status();
  if (!*there) return std::optional<FailureRecord>();
  absl::StatusOr<std::string> text = store_->Get(Key("failure"), milliseconds(0));
  if (!text.ok()) return text.status();
  absl::StatusOr<FailureRecord> record = DecodeFailure(*text);
  if (!record.ok()) return record.status();
  return std::optional<FailureRecord>(*std::move(record));
}

absl::Status GroupState::Heartbeat() {
  if (liveness_ != nullptr) return liveness_->Beat();
  return store_->Add(absl::StrCat("hb/", agent_id_), 1).status();
}

absl::StatusOr<std::optional<NodeInfo>> GroupState::StaleAgent(milliseconds timeout) {
  if (liveness_ != nullptr) {
    std::vector<int64_t> others;
    for (const auto& [id, seen] : heartbeats_) {
      if (lost_.count(id) == 0) others.push_back(id);
    }
    absl::StatusOr<std::optional<int64_t>> lost = liveness_->Lost(others, timeout);
    if (!lost.ok()) return lost.status();
    if (!lost->has_value()) return std::optional<NodeInfo>();
    lost_.insert(**lost);
    for (const NodeInfo& node : group_.nodes) {
      if (node.agent_id == **lost) return std::optional<NodeInfo>(node);
    }
    return std::optional<NodeInfo>();
  }
  const auto now = SteadyClock::now();
  // Every member's counter in one MultiGet (one request per 1,024 agents,
  // not one per agent: an agent's work per tick does not grow with the
  // group). A counter not there yet (its agent has not beaten once) makes
  // this tick read them one by one, creating the missing ones at 0.
  std::vector<std::string> keys;
  keys.reserve(heartbeats_.size());
  for (const auto& [id, seen] : heartbeats_) keys.push_back(absl::StrCat("hb/", id));
  absl::StatusOr<std::vector<std::string>> counters = store_->MultiGet(keys, milliseconds(0));
  if (!counters.ok() && counters.status().code() != absl::StatusCode::kDeadlineExceeded) return counters.status();
  size_t k = 0;
  for (auto& [id, seen] : heartbeats_) {
    if (lost_.count(id) != 0) {  // Reported once (a fault-tolerant job goes on without it).
      ++k;
      continue;
    }
    absl::StatusOr<int64_t> value = int64_t{0};
    if (counters.ok()) {
      if (!absl::SimpleAtoi((*counters)[k], &*value)) {
        return absl::DataLossError(absl::StrCat("lockstep-run: the heartbeat counter ", keys[k], " holds '",
                                                (*counters)[k].substr(0, 64), "', not a number"));
      }
    } else {
      value = store_->Add(keys[k], 0);
    }
    ++k;
    if (!value.ok()) return value.status();
    if (*value != seen.value) {
      seen.value = *value;
      seen.changed = now;
    } else if (now - seen.changed >= timeout) {
      lost_.insert(id);
      for (const NodeInfo& node : group_.nodes) {
        if (node.agent_id == id) return std::optional<NodeInfo>(node);
      }
    }
  }
  return std::optional<NodeInfo>();
}

absl::StatusOr<int64_t> GroupState::NodesWaiting() {
  absl::StatusOr<bool> there = store_->Check({Key("waiting")});
  if (!there.ok()) return there.status();
  if (!*there) return 0;
  return store_->Add(Key("waiting"), 0);
}

absl::Status GroupState::MarkDone() {
  if (absl::Status s = store_->Set(absl::StrCat(Key("done/"), agent_id_), "1"); !s.ok()) return s;
  return CountDone();
}

absl::Status GroupState::CountLostAsDone(const NodeInfo& node) {
  absl::StatusOr<bool> done = store_->Check({absl::StrCat(Key("done/"), node.agent_id)});
  if (!done.ok()) return done.status();
  if (*done) return absl::OkStatus();  // Counted by itself before it was lost.
  // One agent counts it: the first to claim it.
  const std::string me = absl::StrCat(agent_id_);
  absl::StatusOr<std::string> claim = store_->CompareSet(absl::StrCat(Key("lost_done/"), node.agent_id), "", me);
  if (!claim.ok()) return claim.status();
  if (*claim != me) return absl::OkStatus();
  return CountDone();
}

absl::Status GroupState::CountDone() {
  absl::StatusOr<int64_t> done = store_->Add(Key("done"), 1);
  if (!done.ok()) return done.status();
  if (*done >= group_.group_world_size) return store_->Set(Key("all_done"), "1");
  return absl::OkStatus();
}

absl::StatusOr<bool> GroupState::WaitAllDone(milliseconds timeout) {
  absl::Status s = store_->Wait({Key("all_done")}, timeout);
  if (s.ok()) return true;
  if (absl::IsDeadlineExceeded(s)) return false;
  return s;
}

absl::Status GroupState::MarkLeft() { return store_->Set(absl::StrCat(Key("left/"), agent_id_), "1"); }

absl::StatusOr<std::vector<NodeInfo>> GroupState::WaitOthersLeft(milliseconds timeout) {
  std::vector<std::string> keys;
  std::vector<const NodeInfo*> nodes;
  for (const NodeInfo& node : group_.nodes) {
    if (node.agent_id == agent_id_ || lost_.count(node.agent_id) != 0) continue;
    keys.push_back(absl::StrCat(Key("left/"), node.agent_id));
    nodes.push_back(&node);
  }
  std::vector<NodeInfo> silent;
  if (keys.empty()) return silent;
  absl::Status s = store_->Wait(keys, timeout);
  if (s.ok()) return silent;
  if (!absl::IsDeadlineExceeded(s)) return s;
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<bool> there = store_->Check({keys[i]});
    if (!there.ok()) return there.status();
    if (!*there) {
      lost_.insert(nodes[i]->agent_id);
      silent.push_back(*nodes[i]);
    }
  }
  return silent;
}

absl::Status GroupState::MarkExited() { return store_->Set(absl::StrCat(Key("exited/"), agent_id_), "1"); }

void GroupState::MarkLost(int group_rank) {
  if (group_rank >= 0 && group_rank < static_cast<int>(group_.nodes.size())) {
    lost_.insert(group_.nodes[static_cast<size_t>(group_rank)].agent_id);
  }
}

absl::Status GroupState::WaitAllExited(milliseconds timeout) {
  std::vector<std::string> keys;
  for (const NodeInfo& node : group_.nodes) {
    // An agent found lost will never say goodbye.
    if (lost_.count(node.agent_id) == 0) keys.push_back(absl::StrCat(Key("exited/"), node.agent_id));
  }
  return store_->Wait(keys, timeout);
}

}  // namespace launch
}  // namespace lockstep
