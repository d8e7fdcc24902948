// ElasticGroup: a group whose communicator outlives a lost member. The
// survivors agree through the store on the next membership, numbered by an
// epoch, and form a smaller communicator over the existing transports
// (shrink); a newcomer is admitted at the next epoch (grow). The basis of
// fault-tolerant training (torchft's quorum, MPI ULFM's MPI_Comm_shrink).
//
//   LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<ElasticGroup> group,
//                             ElasticGroup::Create(store, /*member=*/rank, /*size=*/3, {}));
//   absl::Status s = group->comm().AllReduce(grads, ReduceOp::kSum)->Wait();
//   if (!s.ok()) {                                     // a member died: every survivor sees it
//     LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> lost, group->Shrink());  // epoch + 1, without it
//   }
//   LOCKSTEP_ASSIGN_OR_RETURN(int admitted, group->AdmitNewcomers());  // collective, between steps
//
// A newcomer (a restarted worker or a spare) calls ElasticGroup::Join with
// a member id never used before and returns once the members admit it.
//
// Members are ids; an epoch's members, sorted, are its ranks 0..n-1. The
// protocol, under `store_prefix` ("P") in the store:
//   * Shrink, from epoch e: each survivor takes a ticket k from the counter
//     "P/<e+1>/arrivals" and writes its id under "P/<e+1>/arrival/<k>";
//     once all of epoch e's members have arrived or are marked gone
//     (MarkGone: a launcher saw them exit), or `settle` has passed
//     since its own arrival, it proposes to close the epoch at the count it
//     sees ("shrink <n>") with one compare-and-set of "P/<e+1>/decision".
//     The first proposal wins; every survivor reads it, and the members of
//     epoch e+1 are the first n to arrive. One that arrives after the close
//     is not a member (FailedPrecondition: rejoin as a newcomer).
//   * AdmitNewcomers, collective in epoch e: rank 0 proposes "grow <j>"
//     (j: the newcomers registered so far, counter "P/joins") with the same
//     compare-and-set, and every member reads the decision; with newcomers
//     the members of epoch e+1 are epoch e's and theirs. A member lost while
//     admitting makes this fail like a collective, and Shrink then decides
//     the epoch after.
//   * Once an epoch's communicator exists its rank 0 writes "P/<e>/formed"
//     (the member count): what an observer such as the launcher reads.
//   * Each epoch's communicator is CreateTcpCommunicator (or
//     options.make_communicator's) under "P/<epoch>/comm": the transports'
//     hellos prove the group's secret, so a stranger who can write the store
//     still cannot take a rank.
// Deadlines: every wait is bounded by `timeout`; Shrink takes about
// `settle` when a member is lost (the survivors wait that long for each
// other) plus the new communicator's set-up.
#ifndef LOCKSTEP_COLLECTIVES_ELASTIC_ELASTIC_GROUP_H_
#define LOCKSTEP_COLLECTIVES_ELASTIC_ELASTIC_GROUP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/bootstrap/tcp_communicator.h"
#include "collectives/communicator.h"
#include "collectives/store/store.h"

namespace lockstep {

struct ElasticGroupOptions {
  // Each epoch's communicator over TCP; its store_prefix is replaced by the
  // epoch's.
  TcpCommunicatorOptions communicator;
  // Set: each epoch's communicator is made by this instead (shared memory:
  // CreateShmCommunicator), given the epoch's store prefix.
  std::function<absl::StatusOr<std::unique_ptr<Communicator>>(std::shared_ptr<Store> store, int rank, int size,
                                                              const std::string& store_prefix)>
      make_communicator;
  std::string store_prefix = "elastic";
  // How long survivors wait for each other before closing an epoch.
  Milliseconds settle = Milliseconds(1000);
  // Bound of every wait (a re-formation, a join).
  Milliseconds timeout = Milliseconds(60000);
};

class ElasticGroup {
 public:
  // Collective among the first `size` members, ids 0..size-1: epoch 0.
  static absl::StatusOr<std::unique_ptr<ElasticGroup>> Create(std::shared_ptr<Store> store, int member, int size,
                                                              ElasticGroupOptions options);
  // A newcomer with an id no member has had: registers, waits for the
  // members' AdmitNewcomers and joins that epoch's communicator.
  static absl::StatusOr<std::unique_ptr<ElasticGroup>> Join(std::shared_ptr<Store> store, int member,
                                                            ElasticGroupOptions options);

  // This epoch's communicator (rank() of size()).
  Communicator& comm() { return *comm_; }
  int64_t epoch() const { return epoch_; }
  int member() const { return member_; }
  // Member ids by rank in this epoch.
  const std::vector<int>& members() const { return members_; }
  int rank() const;
  int size() const { return static_cast<int>(members_.size()); }

  // After a failed collective: the survivors form the next epoch without
  // the lost members, which it returns. Every survivor must call it.
  absl::StatusOr<std::vector<int>> Shrink();
  // Collective in this epoch: admits the newcomers waiting, if any, into a
  // new epoch. Returns how many were admitted.
  absl::StatusOr<int> AdmitNewcomers();
  // Waits (up to options.timeout) until `count` newcomers have registered
  // with Join since the group began: for a job that must not go on below
  // its size, or a test that needs its replacement in.
  absl::Status WaitForNewcomers(int64_t count);

  // Says that `member` has ended for good (a launcher saw its process exit):
  // a Shrink in progress stops waiting for it at once instead of after
  // `settle`. The key is "<store_prefix>/gone/<member>".
  static absl::Status MarkGone(Store& store, const std::string& store_prefix, int member);
  static std::string GoneKey(const std::string& store_prefix, int member);

 private:
  ElasticGroup(std::shared_ptr<Store> store, int member, ElasticGroupOptions options)
      : store_(std::move(store)), member_(member), options_(std::move(options)) {}
  std::string Key(int64_t epoch, const std::string& what) const;
  // Forms the communicator of `epoch` with `members`.
  absl::Status Form(int64_t epoch, std::vector<int> members);
  // Whether every member of this epoch that has not arrived for epoch
  // `next` is marked gone.
  absl::StatusOr<bool> AllMissingGone(int64_t next);

  std::shared_ptr<Store> store_;
  int member_;
  ElasticGroupOptions options_;
  int64_t epoch_ = 0;
  std::vector<int> members_;
  std::unique_ptr<Communicator> comm_;
  // At most the newcomers admitted so far (exact once read): spares
  // AdmitNewcomers a store read while nobody waits.
  int64_t admitted_hint_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ELASTIC_ELASTIC_GROUP_H_
