#include "ddp/replica_sync.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/status.h"

namespace lockstep {
namespace {

// This rank's parameter list as numbers: count, then per parameter dtype,
// rank and dims. Compared across ranks before anything is broadcast.
std::vector<int64_t> Describe(const std::vector<Tensor>& params) {
  std::vector<int64_t> d = {static_cast<int64_t>(params.size())};
  for (const Tensor& p : params) {
    d.push_back(static_cast<int64_t>(p.dtype()));
    d.push_back(static_cast<int64_t>(p.shape().size()));
    for (int64_t dim : p.shape()) d.push_back(dim);
  }
  return d;
}

std::string ShapeText(const std::vector<int64_t>& d, size_t* pos) {
  const DType dtype = static_cast<DType>(d[(*pos)++]);
  const int64_t ndim = d[(*pos)++];
  std::vector<int64_t> dims(d.begin() + static_cast<std::ptrdiff_t>(*pos),
                            d.begin() + static_cast<std::ptrdiff_t>(*pos + static_cast<size_t>(ndim)));
  *pos += static_cast<size_t>(ndim);
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "] ", DTypeName(dtype));
}

// An error naming the first difference between rank `a`'s and rank `b`'s
// descriptions, or OK.
absl::Status Compare(const std::vector<int64_t>& mine, int me, const std::vector<int64_t>& theirs, int them,
                     const std::vector<std::string>& names) {
  if (mine == theirs) return absl::OkStatus();
  if (mine[0] != theirs[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributedDataParallel: rank ", me, " has ", mine[0], " parameters but rank ", them, " has ",
                     theirs[0], ". DDP expects the same model on every rank: build it the same way everywhere"));
  }
  size_t pm = 1, pt = 1;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string a = ShapeText(mine, &pm);
    const std::string b = ShapeText(theirs, &pt);
    if (a != b) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DistributedDataParallel: parameter ", i, " (", names[i], ") is ", a, " on rank ", me, " but ", b,
          " on rank ", them, ". DDP expects the same model on every rank: build it the same way everywhere"));
    }
  }
  return absl::InternalError("DistributedDataParallel: parameter descriptions differ");
}

}  // namespace

absl::Status VerifyShapesAcrossRanks(Communicator& comm, const std::vector<Tensor>& params,
                                     const std::vector<std::string>& names) {
  const std::vector<int64_t> mine = Describe(params);
  // Lengths first (they differ when the models do), then the padded lists.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor length, Tensor::FromVector<int64_t>({static_cast<int64_t>(mine.size())}));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor lengths, Tensor::Empty({comm.size()}, DType::kI64));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllGather(length, lengths)->Wait());
  int64_t longest = 0;
  for (int r = 0; r < comm.size(); ++r) longest = std::max(longest, lengths.data<int64_t>()[r]);
  std::vector<int64_t> padded = mine;
  padded.resize(static_cast<size_t>(longest), -1);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor local, Tensor::FromVector<int64_t>(padded));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({longest * comm.size()}, DType::kI64));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllGather(local, all)->Wait());
  // Every rank compares every other with itself, so all ranks fail together
  // (naming the first rank that differs from this one).
  for (int r = 0; r < comm.size(); ++r) {
    if (r == comm.rank()) continue;
    const int64_t* p = all.data<int64_t>() + r * longest;
    std::vector<int64_t> theirs(p, p + lengths.data<int64_t>()[r]);
    LOCKSTEP_RETURN_IF_ERROR(Compare(mine, comm.rank(), theirs, r, names));
  }
  return absl::OkStatus();
}

absl::Status BroadcastFromRankZero(Communicator& comm, const std::vector<Tensor>& tensors, size_t bucket_bytes) {
  return BroadcastCoalesced(comm, tensors, 0, bucket_bytes);
}

absl::Status BroadcastCoalesced(Communicator& comm, const std::vector<Tensor>& tensors, int src, size_t bucket_bytes) {
  // Buckets as c10d's take_tensors forms them: per dtype, in order, a
  // bucket closed when the next tensor would overflow it.
  struct Bucket {
    std::vector<size_t> members;
    size_t bytes = 0;
  };
  std::vector<Bucket> buckets;
  std::vector<std::pair<DType, size_t>> open;  // dtype -> its open bucket
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (!t.defined() || t.numel() == 0) continue;
    auto it = std::find_if(open.begin(), open.end(), [&](const auto& o) { return o.first == t.dtype(); });
    if (it != open.end() && buckets[it->second].bytes + t.nbytes() > bucket_bytes) {
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      buckets.emplace_back();
      open.emplace_back(t.dtype(), buckets.size() - 1);
      it = open.end() - 1;
    }
    buckets[it->second].members.push_back(i);
    buckets[it->second].bytes += t.nbytes();
  }
  // One flat tensor per bucket of several; a lone tensor is sent as it is.
  std::vector<Tensor> flats(buckets.size());
  std::vector<std::shared_ptr<Work>> works;
  const bool root = comm.rank() == src;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const Bucket& bucket = buckets[b];
    const Tensor& first = tensors[bucket.members[0]];
    if (bucket.members.size() == 1) {
      works.push_back(comm.Broadcast(first, src));
      continue;
    }
    const int64_t numel = static_cast<int64_t>(bucket.bytes / first.element_size());
    LOCKSTEP_ASSIGN_OR_RETURN(flats[b], Tensor::Empty({numel}, first.dtype(), first.device()));
    if (root) {
      int64_t offset = 0;
      for (size_t i : bucket.members) {
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor dst, flats[b].Flat(offset, tensors[i].numel()));
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor src, tensors[i].Reshape({tensors[i].numel()}));
        LOCKSTEP_RETURN_IF_ERROR(dst.CopyFrom(src));
        offset += tensors[i].numel();
      }
    }
    works.push_back(comm.Broadcast(flats[b], src));
  }
  absl::Status first;
  for (auto& w : works) {
    absl::Status s = w->Wait();
    if (!s.ok() && first.ok()) first = s;
  }
  LOCKSTEP_RETURN_IF_ERROR(first);
  if (root) return absl::OkStatus();
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (!flats[b].defined()) continue;
    int64_t offset = 0;
    for (size_t i : buckets[b].members) {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor src, flats[b].Flat(offset, tensors[i].numel()));
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor dst, tensors[i].Reshape({tensors[i].numel()}));
      LOCKSTEP_RETURN_IF_ERROR(dst.CopyFrom(src));
      offset += tensors[i].numel();
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
