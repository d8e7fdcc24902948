#include "tools/launch/etcd_liveness.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace lockstep {
namespace launch {
namespace {

using std::chrono::milliseconds;

constexpr char kAlive[] = "alive/";

}  // namespace

EtcdLiveness::EtcdLiveness(EtcdStore* store, int64_t agent_id, std::string about, milliseconds ttl)
    : store_(store), agent_id_(agent_id), about_(std::move(about)), ttl_(ttl) {}

absl::StatusOr<std::unique_ptr<EtcdLiveness>> EtcdLiveness::Start(EtcdStore* store, int64_t agent_id, std::string about,
                                                                  milliseconds ttl) {
  std::unique_ptr<EtcdLiveness> live(new EtcdLiveness(store, agent_id, std::move(about), ttl));
  absl::Status registered = live->Register();
  if (!registered.ok()) return registered;
  live->keepalive_ = std::thread([p = live.get()] { p->KeepAliveLoop(); });
  live->watch_ = std::thread([p = live.get()] { p->WatchLoop(); });
  return live;
}

EtcdLiveness::~EtcdLiveness() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cancel_ = true;
  stop_cv_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
  if (watch_.joinable()) watch_.join();
}

absl::Status EtcdLiveness::Register() {
  const auto seconds = std::max<int64_t>(1, (ttl_.count() + 999) / 1000);
  absl::StatusOr<int64_t> lease = store_->GrantLease(std::chrono::seconds(seconds));
  if (!lease.ok()) return lease.status();
  absl::Status put = store_->SetWithLease(absl::StrCat(kAlive, agent_id_), about_, *lease);
  if (!put.ok()) return put;
  std::lock_guard<std::mutex> lock(mu_);
  lease_ = *lease;
  renewed_ = SteadyClock::now();
  renew_error_ = absl::OkStatus();
  return absl::OkStatus();
}

void EtcdLiveness::KeepAliveLoop() {
  const milliseconds period = std::max(milliseconds(100), ttl_ / 3);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stop_cv_.wait_for(lock, period, [&] { return stop_; })) return;
    const int64_t lease = lease_;
    lock.unlock();
    absl::StatusOr<int64_t> left = store_->KeepAliveOnce(lease);
    absl::Status status = left.ok() ? absl::OkStatus() : left.status();
    if (left.ok() && *left <= 0) {
      // The lease lapsed (this process stalled longer than the TTL): the
      // others have counted this agent lost and fail the attempt; take a
      // new lease so that it can join the next one.
      status = Register();
    }
    lock.lock();
    const auto now = SteadyClock::now();
    if (status.ok() && left.ok() && *left > 0) {
      renewed_ = now;
      renew_error_ = absl::OkStatus();
    } else if (!status.ok() && now - renewed_ >= ttl_) {
      renew_error_ = absl::UnavailableError(
          absl::StrCat("could not renew this agent's lease at etcd (", store_->where(), ") for ",
                       std::chrono::duration_cast<milliseconds>(now - renewed_).count(), " ms: ", status.message()));
    }
  }
}

void EtcdLiveness::Apply(const std::string& key, bool deleted) {
  int64_t id = 0;
  if (!absl::SimpleAtoi(absl::StripPrefix(key, kAlive), &id)) return;
  if (deleted) {
    alive_.erase(id);
    gone_.insert(id);
  } else {
    alive_.insert(id);
    gone_.erase(id);  // Back with a new lease (it stalled): alive again.
  }
}

void EtcdLiveness::WatchLoop() {
  for (;;) {
    int64_t revision = 0;
    absl::StatusOr<std::map<std::string, std::string>> now = store_->ListPrefix(kAlive, &revision);
    if (now.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        // Keys that vanished while no watch ran are deletes too.
        for (int64_t id : std::set<int64_t>(alive_)) {
          if (now->count(absl::StrCat(kAlive, id)) == 0) Apply(absl::StrCat(kAlive, id), true);
        }
        for (const auto& [key, value] : *now) Apply(key, false);
      }
      absl::Status watched = store_->WatchPrefix(
          kAlive, revision, std::chrono::duration_cast<Milliseconds>(std::chrono::hours(24 * 365)),
          [&](const std::vector<EtcdEvent>& events) {
            std::lock_guard<std::mutex> lock(mu_);
            for (const EtcdEvent& e : events) Apply(e.key, e.deleted);
            return true;
          },
          &cancel_);
      if (watched.code() == absl::StatusCode::kCancelled) return;
    }
    // etcd unreachable or the watch ended: Beat() reports a lasting outage;
    // look again after a moment.
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_cv_.wait_for(lock, std::max(milliseconds(100), ttl_ / 10), [&] { return stop_; })) return;
  }
}

absl::Status EtcdLiveness::Beat() {
  std::lock_guard<std::mutex> lock(mu_);
  return renew_error_;
}

absl::StatusOr<std::optional<int64_t>> EtcdLiveness::Lost(const std::vector<int64_t>& agent_ids, milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = SteadyClock::now();
  for (int64_t id : agent_ids) {
    if (id == agent_id_) continue;
    if (gone_.count(id) != 0) return std::optional<int64_t>(id);
    if (alive_.count(id) != 0) continue;
    auto [it, inserted] = first_asked_.emplace(id, now);
    if (now - it->second >= timeout) return std::optional<int64_t>(id);
  }
  return std::optional<int64_t>();
}

}  // namespace launch
}  // namespace lockstep
