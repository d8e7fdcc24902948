// The Communicator's operations on several tensors at once (coalesced) and on
// byte strings, built from its tensor collectives (collectives/communicator.h).
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/communicator_state.h"
#include "collectives/internal/communicator_checks.h"
#include "core/dtype.h"
#include "core/status.h"

namespace lockstep {
namespace {

using communicator_internal::CheckTensor;
using communicator_internal::Fingerprint;
using communicator_internal::LayoutHash;
using communicator_internal::OpType;

// Where each tensor of a coalesced list lies in its packed buffer (bytes).
// Every tensor starts at a multiple of 64 bytes: its elements stay aligned
// (views of the buffer in its own dtype) and it starts on a cache line.
struct Packing {
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
};

Packing PackingOf(const std::vector<Tensor>& tensors) {
  Packing p;
  for (const Tensor& t : tensors) {
    p.offsets.push_back(p.bytes);
    p.bytes += (static_cast<int64_t>(t.nbytes()) + 63) / 64 * 64;
  }
  return p;
}

// The part of `buffer` (u8) that holds tensor i, seen as its dtype.
absl::StatusOr<Tensor> Slot(const Tensor& buffer, const Packing& p, size_t i, const Tensor& t) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor bytes, buffer.Flat(p.offsets[i], static_cast<int64_t>(t.nbytes())));
  return bytes.ViewAs(t.dtype());
}

absl::Status Pack(const std::vector<Tensor>& tensors, const Packing& p, const Tensor& buffer) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel() == 0) continue;
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor slot, Slot(buffer, p, i, tensors[i]));
    LOCKSTEP_RETURN_IF_ERROR(slot.CopyFrom(tensors[i]));
  }
  return absl::OkStatus();
}

absl::Status Unpack(const Tensor& buffer, const Packing& p, const std::vector<Tensor>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel() == 0) continue;
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor slot, Slot(buffer, p, i, tensors[i]));
    LOCKSTEP_RETURN_IF_ERROR(tensors[i].CopyFrom(slot));
  }
  return absl::OkStatus();
}

// Each tensor's dtype and element count, for the fingerprint's layout.
std::vector<int64_t> Shapes(const std::vector<Tensor>& tensors) {
  std::vector<int64_t> shapes;
  for (const Tensor& t : tensors) {
    shapes.push_back(static_cast<int64_t>(t.dtype()));
    shapes.push_back(t.numel());
  }
  return shapes;
}

absl::Status CheckList(const std::vector<Tensor>& tensors, const char* op, bool one_dtype) {
  if (tensors.empty()) return absl::InvalidArgumentError(absl::StrCat(op, ": the list of tensors is empty"));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string what = absl::StrCat("tensors[", i, "]");
    LOCKSTEP_RETURN_IF_ERROR(CheckTensor(tensors[i], op, what.c_str()));
    if (tensors[i].device() != tensors[0].device()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is on ", tensors[i].device().ToString(),
                                                     " but tensors[0] on ", tensors[0].device().ToString(),
                                                     "; coalesce the tensors of one device"));
    }
    if (one_dtype && tensors[i].dtype() != tensors[0].dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " is ", DTypeName(tensors[i].dtype()),
                                                     " but tensors[0] is ", DTypeName(tensors[0].dtype()),
                                                     "; all-reduce each dtype's tensors in a call of their own"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (tensors[i].numel() > 0 && tensors[j].numel() > 0 && tensors[i].Overlaps(tensors[j])) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": ", what, " overlaps tensors[", j, "]; pass each element once"));
      }
    }
  }
  return absl::OkStatus();
}

// The byte-string collectives announce each string's size first; a rank
// whose string is over the limit announces this instead, so that every rank
// fails alike (none waits for a payload that never comes).
constexpr int64_t kOverLimit = -1;

int64_t Announced(const std::string& s, int64_t limit) {
  return static_cast<int64_t>(s.size()) > limit ? kOverLimit : static_cast<int64_t>(s.size());
}

// OK when every announced size is within [0, limit]; else the error every
// rank reports, naming the first bad rank.
// The sizes the n ranks announced, once each is known to be within the limit.
absl::StatusOr<std::vector<int64_t>> CheckedSizes(const int64_t* sizes, int n, int64_t limit, const char* op) {
  for (int r = 0; r < n; ++r) {
    if (sizes[r] == kOverLimit) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": rank ", r, "'s string is longer than ", limit,
                                                     " bytes (CommunicatorOptions.max_object_bytes); nothing was sent. "
                                                     "Raise the limit on every rank, or send less"));
    }
    if (sizes[r] < 0 || sizes[r] > limit) {
      return absl::DataLossError(absl::StrCat(op, ": rank ", r, " announced ", sizes[r], " bytes, outside [0, ", limit,
                                              "] (CommunicatorOptions.max_object_bytes): a corrupt or foreign peer; "
                                              "nothing was allocated"));
    }
  }
  return std::vector<int64_t>(sizes, sizes + n);
}

absl::StatusOr<Tensor> BytesTensor(const std::string& s) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({static_cast<int64_t>(s.size())}, DType::kU8));
  if (!s.empty()) std::memcpy(t.raw_data(), s.data(), s.size());
  return t;
}

std::string StringOf(const Tensor& t, int64_t offset, int64_t bytes) {
  return std::string(static_cast<const char*>(t.raw_data()) + offset, static_cast<size_t>(bytes));
}

}  // namespace

std::shared_ptr<Work> Communicator::AllReduceCoalesced(std::vector<Tensor> tensors, ReduceOp op) {
  constexpr const char* kOp = "AllReduceCoalesced";
  if (auto s = CheckList(tensors, kOp, /*one_dtype=*/true); !s.ok()) return state_->Failed(s);
  if (auto s = state_->CheckDevice(tensors[0], kOp, "tensors[0]"); !s.ok()) return state_->Failed(s);
  const DType dtype = tensors[0].dtype();
  if (auto s = state_->CheckReduceOp(op, dtype, kOp); !s.ok()) return state_->Failed(s);
  const Packing packing = PackingOf(tensors);
  absl::StatusOr<Tensor> buffer = Tensor::Empty({packing.bytes}, DType::kU8, tensors[0].device());
  if (!buffer.ok()) return state_->Failed(buffer.status());
  // Packed when called (the caller's data as it is now), unpacked when done.
  if (auto s = Pack(tensors, packing, *buffer); !s.ok()) return state_->Failed(s);
  absl::StatusOr<Tensor> elements = buffer->ViewAs(dtype);
  if (!elements.ok()) return state_->Failed(elements.status());
  // Padding between tensors is reduced too (cheaper than a message each);
  // it is never read back.
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kAllReduceCoalesced),
                static_cast<uint8_t>(dtype),
                static_cast<uint8_t>(op),
                0,
                -1,
                elements->numel(),
                0,
                LayoutHash(Shapes(tensors))};
  std::shared_ptr<Work> reduced =
      state_->Enqueue(f, [b = state_->backend.get(), flat = *elements, op](const OpContext& ctx) {
        return b->AllReduce(flat, flat, op, ctx);
      });
  return reduced->Then(
      [buffer = *buffer, packing, tensors = std::move(tensors)] { return Unpack(buffer, packing, tensors); });
}

std::shared_ptr<Work> Communicator::BroadcastCoalesced(std::vector<Tensor> tensors, int root) {
  constexpr const char* kOp = "BroadcastCoalesced";
  if (root < 0 || root >= size()) {
    return state_->Failed(
        absl::InvalidArgumentError(absl::StrCat(kOp, ": root ", root, " is not a rank (world size ", size(), ")")));
  }
  if (auto s = CheckList(tensors, kOp, /*one_dtype=*/false); !s.ok()) return state_->Failed(s);
  if (auto s = state_->CheckDevice(tensors[0], kOp, "tensors[0]"); !s.ok()) return state_->Failed(s);
  const Packing packing = PackingOf(tensors);
  absl::StatusOr<Tensor> buffer = Tensor::Empty({packing.bytes}, DType::kU8, tensors[0].device());
  if (!buffer.ok()) return state_->Failed(buffer.status());
  if (rank() == root) {
    if (auto s = Pack(tensors, packing, *buffer); !s.ok()) return state_->Failed(s);
  }
  Fingerprint f{0,
                static_cast<uint8_t>(OpType::kBroadcastCoalesced),
                static_cast<uint8_t>(DType::kU8),
                0,
                0,
                root,
                packing.bytes,
                0,
                LayoutHash(Shapes(tensors))};
  std::shared_ptr<Work> sent = state_->Enqueue(f, [b = state_->backend.get(), flat = *buffer, root](
                                                      const OpContext& ctx) { return b->Broadcast(flat, root, ctx); });
  if (rank() == root) return sent;
  return sent->Then(
      [buffer = *buffer, packing, tensors = std::move(tensors)] { return Unpack(buffer, packing, tensors); });
}

std::shared_ptr<Work> Communicator::AllGatherBytes(std::string mine, std::vector<std::string>* all) {
  constexpr const char* kOp = "AllGatherBytes";
  if (all == nullptr) return state_->Failed(absl::InvalidArgumentError(absl::StrCat(kOp, ": no output vector")));
  const int64_t limit = options().max_object_bytes;
  absl::StatusOr<Tensor> my_size = Tensor::FromVector<int64_t>({Announced(mine, limit)});
  absl::StatusOr<Tensor> sizes = Tensor::Empty({size()}, DType::kI64);
  if (!my_size.ok() || !sizes.ok()) return state_->Failed(my_size.ok() ? sizes.status() : my_size.status());
  const int n = size();
  // Sizes, then (a step queued right behind them: every rank issues the
  // same second collective, or none) the payloads.
  return AllGather(*my_size, *sizes)
      ->ThenWork(
          [this, sizes = *sizes, mine = std::move(mine), all, limit, n]() -> absl::StatusOr<std::shared_ptr<Work>> {
            LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int64_t> counts, CheckedSizes(sizes.data<int64_t>(), n, limit, kOp));
            const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
            LOCKSTEP_ASSIGN_OR_RETURN(Tensor payload, BytesTensor(mine));
            LOCKSTEP_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({total}, DType::kU8));
            return AllGatherV(payload, gathered, counts)->Then([gathered, counts, all] {
              all->clear();
              int64_t offset = 0;
              for (int64_t c : counts) {
                all->push_back(StringOf(gathered, offset, c));
                offset += c;
              }
              return absl::OkStatus();
            });
          });
}

std::shared_ptr<Work> Communicator::BroadcastBytes(std::string* data, int root) {
  constexpr const char* kOp = "BroadcastBytes";
  if (data == nullptr) return state_->Failed(absl::InvalidArgumentError(absl::StrCat(kOp, ": no string")));
  if (root < 0 || root >= size()) {
    return state_->Failed(
        absl::InvalidArgumentError(absl::StrCat(kOp, ": root ", root, " is not a rank (world size ", size(), ")")));
  }
  const int64_t limit = options().max_object_bytes;
  absl::StatusOr<Tensor> size = Tensor::FromVector<int64_t>({rank() == root ? Announced(*data, limit) : 0});
  if (!size.ok()) return state_->Failed(size.status());
  return Broadcast(*size, root)
      ->ThenWork([this, size = *size, data, root, limit]() -> absl::StatusOr<std::shared_ptr<Work>> {
        const int64_t announced = size.data<int64_t>()[0];
        if (announced == kOverLimit || announced < 0 || announced > limit) {
          std::vector<int64_t> sizes(static_cast<size_t>(this->size()), 0);
          sizes[static_cast<size_t>(root)] = announced;
          return CheckedSizes(sizes.data(), this->size(), limit, kOp).status();
        }
        absl::StatusOr<Tensor> payload = rank() == root ? BytesTensor(*data) : Tensor::Empty({announced}, DType::kU8);
        if (!payload.ok()) return payload.status();
        std::shared_ptr<Work> sent = Broadcast(*payload, root);
        if (rank() == root) return sent;
        return sent->Then([payload = *payload, data, announced] {
          *data = StringOf(payload, 0, announced);
          return absl::OkStatus();
        });
      });
}

std::shared_ptr<Work> Communicator::GatherBytes(std::string mine, std::vector<std::string>* all, int root) {
  constexpr const char* kOp = "GatherBytes";
  if (root < 0 || root >= size()) {
    return state_->Failed(
        absl::InvalidArgumentError(absl::StrCat(kOp, ": root ", root, " is not a rank (world size ", size(), ")")));
  }
  if (rank() == root && all == nullptr) {
    return state_->Failed(absl::InvalidArgumentError(absl::StrCat(kOp, ": no output vector at the root")));
  }
  const int64_t limit = options().max_object_bytes;
  absl::StatusOr<Tensor> my_size = Tensor::FromVector<int64_t>({Announced(mine, limit)});
  absl::StatusOr<Tensor> sizes = Tensor::Empty({size()}, DType::kI64);
  if (!my_size.ok() || !sizes.ok()) return state_->Failed(my_size.ok() ? sizes.status() : my_size.status());
  const int n = size();
  // Every rank learns every size (a few bytes each), so all take the same
  // decision about the payloads and the uneven gather's blocks.
  return AllGather(*my_size, *sizes)
      ->ThenWork([this, sizes = *sizes, mine = std::move(mine), all, root, limit,
                  n]() -> absl::StatusOr<std::shared_ptr<Work>> {
        LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int64_t> counts, CheckedSizes(sizes.data<int64_t>(), n, limit, kOp));
        const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor payload, BytesTensor(mine));
        Tensor gathered;
        if (rank() == root) {
          LOCKSTEP_ASSIGN_OR_RETURN(gathered, Tensor::Empty({total}, DType::kU8));
        }
        std::shared_ptr<Work> done = GatherV(payload, gathered, counts, root);
        if (rank() != root) return done;
        return done->Then([gathered, counts, all] {
          all->clear();
          int64_t offset = 0;
          for (int64_t c : counts) {
            all->push_back(StringOf(gathered, offset, c));
            offset += c;
          }
          return absl::OkStatus();
        });
      });
}

std::shared_ptr<Work> Communicator::ScatterBytes(std::vector<std::string> parts, std::string* mine, int root) {
  constexpr const char* kOp = "ScatterBytes";
  if (mine == nullptr) return state_->Failed(absl::InvalidArgumentError(absl::StrCat(kOp, ": no output string")));
  if (root < 0 || root >= size()) {
    return state_->Failed(
        absl::InvalidArgumentError(absl::StrCat(kOp, ": root ", root, " is not a rank (world size ", size(), ")")));
  }
  if (rank() == root && static_cast<int>(parts.size()) != size()) {
    return state_->Failed(absl::InvalidArgumentError(
        absl::StrCat(kOp, ": the root has ", parts.size(), " parts; it needs one per rank (world size ", size(), ")")));
  }
  const int64_t limit = options().max_object_bytes;
  // The root announces every part's size to all (the blocks of the uneven
  // scatter must be known everywhere).
  absl::StatusOr<Tensor> sizes = Tensor::Zeros({size()}, DType::kI64);
  if (!sizes.ok()) return state_->Failed(sizes.status());
  if (rank() == root) {
    for (int r = 0; r < size(); ++r) sizes->data<int64_t>()[r] = Announced(parts[static_cast<size_t>(r)], limit);
  }
  const int n = size();
  return Broadcast(*sizes, root)
      ->ThenWork([this, sizes = *sizes, parts = std::move(parts), mine, root, limit,
                  n]() -> absl::StatusOr<std::shared_ptr<Work>> {
        LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int64_t> counts, CheckedSizes(sizes.data<int64_t>(), n, limit, kOp));
        Tensor packed;
        if (rank() == root) {
          std::string all;
          for (const std::string& p : parts) all += p;
          LOCKSTEP_ASSIGN_OR_RETURN(packed, BytesTensor(all));
        }
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor part, Tensor::Empty({counts[static_cast<size_t>(rank())]}, DType::kU8));
        return ScatterV(packed, part, counts, root)->Then([part, mine] {
          *mine = StringOf(part, 0, part.numel());
          return absl::OkStatus();
        });
      });
}

}  // namespace lockstep
