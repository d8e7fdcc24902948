#include "collectives/flight_recorder.h"

#include <time.h>

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/reduce_op.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace {

const char* StateName(FlightRecord::State s) {
  switch (s) {
    case FlightRecord::State::kRunning:
      return "running";
    case FlightRecord::State::kDone:
      return "done";
    case FlightRecord::State::kFailed:
      return "failed";
  }
  return "?";
}

std::string RanksText(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace

std::string Describe(const FlightRecord& r) {
  std::string s = absl::StrCat(r.op, " #", r.seq, " (");
  const bool barrier = absl::string_view(r.op) == "Barrier";
  if (!barrier) {
    absl::StrAppend(&s, IsValidDType(r.dtype) ? DTypeName(static_cast<DType>(r.dtype)) : absl::string_view("?"),
                    ", count ", r.count);
  }
  if (r.reduce_op >= 0 && IsValidReduceOp(static_cast<uint8_t>(r.reduce_op))) {
    absl::StrAppend(&s, ", ", ReduceOpName(static_cast<ReduceOp>(r.reduce_op)));
  }
  if (r.point_to_point) {
    const absl::string_view op(r.op);
    const char* direction = op == "Send" ? ", to " : ", from ";
    if (r.peer == -2) {
      absl::StrAppend(&s, ", from any rank");
    } else {
      absl::StrAppend(&s, direction, "rank ", r.peer);
    }
    absl::StrAppend(&s, ", tag ", r.tag);
  } else if (r.peer >= 0) {
    absl::StrAppend(&s, barrier ? "" : ", ", "root ", r.peer);
  }
  return s + ")";
}

FlightRecorder::FlightRecorder(size_t capacity)
    : begin_(std::chrono::steady_clock::now()),
      begin_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(begin_.time_since_epoch()).count()),
      ring_(capacity) {}

int64_t FlightRecorder::NowUs() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - begin_).count();
}

uint64_t FlightRecorder::Start(FlightRecord record) { return Start(record, std::chrono::steady_clock::now()); }

uint64_t FlightRecorder::Start(FlightRecord record, std::chrono::steady_clock::time_point now) {
  if (ring_.empty()) return 0;
  record.started_us = std::chrono::duration_cast<std::chrono::microseconds>(now - begin_).count();
  record.ended_us = -1;
  record.state = FlightRecord::State::kRunning;
  Lock lock(busy_);
  record.id = next_id_++;
  ring_[record.id % ring_.size()] = record;
  return record.id;
}

void FlightRecorder::Finish(uint64_t id, bool ok) {
  if (ring_.empty()) return;
  // The coarse clock (the kernel's tick) costs ~4 ns where steady_clock
  // costs ~24 ns, as much as the rest of recording; both count from the
  // same base, the coarse one up to a tick behind.
  timespec coarse;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &coarse);
  const int64_t now = (static_cast<int64_t>(coarse.tv_sec) * 1000000000 + coarse.tv_nsec - begin_ns_) / 1000;
  Lock lock(busy_);
  FlightRecord& r = ring_[id % ring_.size()];
  if (r.id != id || id >= next_id_ || r.state != FlightRecord::State::kRunning) return;
  r.state = ok ? FlightRecord::State::kDone : FlightRecord::State::kFailed;
  r.ended_us = std::max(now, r.started_us);
}

std::vector<FlightRecord> FlightRecorder::Snapshot() const {
  Lock lock(busy_);
  std::vector<FlightRecord> out;
  const uint64_t first = next_id_ > ring_.size() ? next_id_ - ring_.size() : 0;
  for (uint64_t id = first; id < next_id_; ++id) out.push_back(ring_[id % ring_.size()]);
  return out;
}

std::string FlightRecorder::ToJson(int rank, size_t last) const {
  std::vector<FlightRecord> records = Snapshot();
  if (last > 0 && records.size() > last) records.erase(records.begin(), records.end() - static_cast<ptrdiff_t>(last));
  nlohmann::json out;
  out["rank"] = rank;
  out["now_us"] = NowUs();
  nlohmann::json list = nlohmann::json::array();
  for (const FlightRecord& r : records) {
    nlohmann::json j;
    j["id"] = r.id;
    j["seq"] = r.seq;
    j["op"] = r.op;
    j["point_to_point"] = r.point_to_point;
    j["dtype"] = IsValidDType(r.dtype) ? std::string(DTypeName(static_cast<DType>(r.dtype))) : std::string("?");
    j["count"] = r.count;
    j["peer"] = r.peer;
    if (r.reduce_op >= 0) j["reduce_op"] = std::string(ReduceOpName(static_cast<ReduceOp>(r.reduce_op)));
    if (r.point_to_point) j["tag"] = r.tag;
    if (*r.algorithm != '\0') j["algorithm"] = r.algorithm;
    j["state"] = StateName(r.state);
    j["started_us"] = r.started_us;
    j["ended_us"] = r.ended_us;
    j["description"] = Describe(r);
    list.push_back(std::move(j));
  }
  out["records"] = std::move(list);
  return out.dump();
}

absl::StatusOr<RankReport> ParseRankReport(absl::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  const auto bad = [](const char* what) { return absl::DataLossError(absl::StrCat("flight recorder report: ", what)); };
  if (!j.is_object() || !j.contains("rank") || !j["rank"].is_number_integer() || !j.contains("now_us") ||
      !j["now_us"].is_number_integer() || !j.contains("records") || !j["records"].is_array()) {
    return bad("not an object with rank, now_us and records");
  }
  RankReport report;
  report.rank = j["rank"].get<int>();
  report.reported = true;
  const int64_t now = j["now_us"].get<int64_t>();
  for (const nlohmann::json& r : j["records"]) {
    if (!r.is_object() || !r.contains("seq") || !r["seq"].is_number_unsigned() || !r.contains("description") ||
        !r["description"].is_string() || !r.contains("state") || !r["state"].is_string() || !r.contains("started_us") ||
        !r["started_us"].is_number_integer() || !r.contains("point_to_point") || !r["point_to_point"].is_boolean()) {
      return bad("a record lacks seq, description, state, started_us or point_to_point");
    }
    RankReport::Op op;
    op.seq = r["seq"].get<uint64_t>();
    op.point_to_point = r["point_to_point"].get<bool>();
    op.description = r["description"].get<std::string>();
    op.state = r["state"].get<std::string>();
    op.seconds = static_cast<double>(now - r["started_us"].get<int64_t>()) / 1e6;
    report.ops.push_back(std::move(op));
  }
  return report;
}

std::string AnalyzeFlightRecords(const std::vector<RankReport>& reports) {
  if (reports.empty()) return "";
  std::vector<std::string> clauses;
  // Each reporting rank's newest collective, if it ran any.
  std::map<int, const RankReport::Op*> newest;
  for (const RankReport& r : reports) {
    if (!r.reported) {
      clauses.push_back(absl::StrCat("rank ", r.rank, " sent no report"));
      continue;
    }
    const RankReport::Op* collective = nullptr;
    for (const RankReport::Op& op : r.ops) {
      if (!op.point_to_point) collective = &op;
    }
    if (collective != nullptr) newest[r.rank] = collective;
    if (r.ops.empty()) {
      clauses.push_back(absl::StrCat("rank ", r.rank, " has run no operation yet"));
      continue;
    }
    const RankReport::Op& last = r.ops.back();
    if (last.state == "running") {
      clauses.push_back(absl::StrFormat("rank %d waits in %s for %.1f s", r.rank, last.description, last.seconds));
    } else if (last.state == "failed") {
      clauses.push_back(absl::StrCat("rank ", r.rank, " failed in ", last.description));
    } else {
      clauses.push_back(absl::StrCat("rank ", r.rank, " is past ", last.description));
    }
  }
  std::string text = absl::StrCat("Flight recorder: ", absl::StrJoin(clauses, "; "));
  if (newest.empty()) return text;
  // The collective most ranks are at: the newest sequence number, and the
  // description most of its ranks share (the lowest rank's on a tie).
  uint64_t front = 0;
  for (const auto& [rank, op] : newest) front = std::max(front, op->seq);
  std::map<std::string, std::vector<int>> at_front;
  for (const auto& [rank, op] : newest) {
    if (op->seq == front) at_front[op->description].push_back(rank);
  }
  const std::string* expected = nullptr;
  size_t votes = 0;
  for (const auto& [description, ranks] : at_front) {
    if (ranks.size() > votes || (ranks.size() == votes && ranks.front() < at_front[*expected].front())) {
      expected = &description;
      votes = ranks.size();
    }
  }
  std::vector<std::string> findings;
  for (const auto& [description, ranks] : at_front) {
    if (&description == expected) continue;
    findings.push_back(absl::StrCat(RanksText(ranks), " ran ", description, " where ", RanksText(at_front[*expected]),
                                    " ran ", *expected));
  }
  for (const RankReport& r : reports) {
    if (!r.reported) {
      findings.push_back(absl::StrCat("rank ", r.rank, " has not reached ", *expected,
                                      " (it is in no operation of this group that failed: behind, or busy outside "
                                      "the group; or it is gone)"));
      continue;
    }
    auto it = newest.find(r.rank);
    if (it == newest.end()) {
      findings.push_back(absl::StrCat("rank ", r.rank, " has not reached ", *expected, " (it ran no collective yet)"));
    } else if (it->second->seq < front) {
      findings.push_back(absl::StrCat("rank ", r.rank, " is behind: it has not started ", *expected,
                                      "; its newest collective is ", it->second->description, ", ", it->second->state));
    }
  }
  if (!findings.empty()) absl::StrAppend(&text, ". Out of step: ", absl::StrJoin(findings, "; "));
  return text;
}

}  // namespace lockstep
