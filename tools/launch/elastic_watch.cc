#include "tools/launch/elastic_watch.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "collectives/elastic/elastic_group.h"
#include "core/status.h"

namespace lockstep {
namespace launch {
namespace {

double Seconds(ElasticWatch::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

absl::Status ElasticWatch::Lost(int rank, int member, const std::string& what) {
  losses_.push_back(Loss{rank, member, what, Clock::now()});
  return ElasticGroup::MarkGone(*store_, prefix_, member);
}

absl::StatusOr<int> ElasticWatch::NewMember() {
  LOCKSTEP_ASSIGN_OR_RETURN(const int64_t k, store_->Add(Key("next_member"), 1));
  return world_size_ - 1 + static_cast<int>(k);
}

void ElasticWatch::Restarted(int rank, int member) {
  Clock::time_point at = Clock::now();
  for (const Loss& l : losses_) {
    if (l.rank == rank) at = l.at;
  }
  rejoins_.push_back(Loss{rank, member, "", at});
}

absl::StatusOr<std::vector<std::string>> ElasticWatch::Poll() {
  std::vector<std::string> lines;
  while (true) {
    const int64_t e = known_epoch_ + 1;
    const std::string formed_key = Key(absl::StrCat(e, "/formed"));
    LOCKSTEP_ASSIGN_OR_RETURN(const bool formed, store_->Check({formed_key}));
    if (!formed) break;
    LOCKSTEP_ASSIGN_OR_RETURN(const std::string size, store_->Get(formed_key, std::chrono::milliseconds(1000)));
    LOCKSTEP_ASSIGN_OR_RETURN(const std::string members_text,
                              store_->Get(Key(absl::StrCat(e, "/members")), std::chrono::milliseconds(1000)));
    std::vector<int> members;
    for (absl::string_view part : absl::StrSplit(members_text, ',', absl::SkipEmpty())) {
      int m = 0;
      if (absl::SimpleAtoi(part, &m)) members.push_back(m);
    }
    auto in = [&](int m) { return std::find(members.begin(), members.end(), m) != members.end(); };
    const Clock::time_point now = Clock::now();
    // A lost member absent from a formed epoch: the survivors re-formed.
    for (auto it = losses_.begin(); it != losses_.end();) {
      if (in(it->member)) {
        ++it;
        continue;
      }
      lines.push_back(absl::StrFormat("worker %d lost (%s); group re-formed with %s ranks in %.3f s", it->rank,
                                      it->what, size, Seconds(now - it->at)));
      it = losses_.erase(it);
    }
    for (auto it = rejoins_.begin(); it != rejoins_.end();) {
      if (!in(it->member)) {
        ++it;
        continue;
      }
      lines.push_back(absl::StrFormat("worker %d rejoined after %.3f s", it->rank, Seconds(now - it->at)));
      it = rejoins_.erase(it);
    }
    known_epoch_ = e;
  }
  return lines;
}

}  // namespace launch
}  // namespace lockstep
