// Byte-string collectives (AllGatherBytes, BroadcastBytes, GatherBytes,
// ScatterBytes: PyTorch's *_object collectives carry pickles this way) and
// the coalesced operations' argument checks, over TCP and shared memory:
// strings of every size (empty, odd, megabytes), sizes over the limit and
// sizes a corrupt peer announces failing alike on every rank, with nothing
// allocated or left hanging.
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/testing/group.h"
#include "core/status.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using Runner = std::function<std::vector<absl::Status>(int size, const testing::RankFn& fn)>;

Runner RunnerFor(int transport, int64_t max_object_bytes = int64_t{1} << 30) {
  if (transport == 0) {
    return [max_object_bytes](int n, const testing::RankFn& fn) {
      TcpCommunicatorOptions options = testing::TestOptions();
      options.communicator.max_object_bytes = max_object_bytes;
      return testing::RunThreads(n, fn, options);
    };
  }
  return [max_object_bytes](int n, const testing::RankFn& fn) {
    ShmCommunicatorOptions options = testing::ShmTestOptions();
    options.communicator.max_object_bytes = max_object_bytes;
    return testing::RunShmThreads(n, fn, options);
  };
}

using testing::ExpectAllOk;

// Rank r's string: r * 37 % 5 == 0 gives an empty one, rank 2 a megabyte.
std::string StringOf(int r) {
  if (r * 37 % 5 == 0 && r != 0) return "";
  std::string s(r == 2 ? (1 << 20) + 7 : 100 * r + 3, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 131 + r * 17) % 256);  // Zero bytes too.
  return s;
}

absl::Status Expect(bool ok, const std::string& what) { return ok ? absl::OkStatus() : absl::InternalError(what); }

class BytesTest : public ::testing::TestWithParam<int> {};

TEST_P(BytesTest, EveryCollectiveCarriesStringsOfEverySize) {
  for (int n : {1, 2, 3, 5}) {
    ExpectAllOk(RunnerFor(GetParam())(n, [n](Communicator& comm) -> absl::Status {
      const int r = comm.rank();
      const int root = n - 1;
      std::vector<std::string> all;
      LOCKSTEP_RETURN_IF_ERROR(comm.AllGatherBytes(StringOf(r), &all)->Wait());
      LOCKSTEP_RETURN_IF_ERROR(Expect(static_cast<int>(all.size()) == n, "AllGatherBytes: one string per rank"));
      for (int k = 0; k < n; ++k)
        LOCKSTEP_RETURN_IF_ERROR(Expect(all[k] == StringOf(k), "AllGatherBytes: a string differs"));

      std::string data = r == root ? StringOf(2) : "stale";
      LOCKSTEP_RETURN_IF_ERROR(comm.BroadcastBytes(&data, root)->Wait());
      LOCKSTEP_RETURN_IF_ERROR(Expect(data == StringOf(2), "BroadcastBytes"));

      std::vector<std::string> gathered = {"untouched"};
      LOCKSTEP_RETURN_IF_ERROR(comm.GatherBytes(StringOf(r), &gathered, root)->Wait());
      if (r == root) {
        LOCKSTEP_RETURN_IF_ERROR(Expect(static_cast<int>(gathered.size()) == n, "GatherBytes: one string per rank"));
        for (int k = 0; k < n; ++k) LOCKSTEP_RETURN_IF_ERROR(Expect(gathered[k] == StringOf(k), "GatherBytes"));
      } else {
        LOCKSTEP_RETURN_IF_ERROR(
            Expect(gathered.size() == 1 && gathered[0] == "untouched", "GatherBytes off the root"));
      }

      std::vector<std::string> parts;
      if (r == root) {
        for (int k = 0; k < n; ++k) parts.push_back(StringOf(n - 1 - k));
      }
      std::string part = "stale";
      LOCKSTEP_RETURN_IF_ERROR(comm.ScatterBytes(parts, &part, root)->Wait());
      return Expect(part == StringOf(n - 1 - r), "ScatterBytes");
    }));
  }
}

TEST_P(BytesTest, AStringOverTheLimitFailsOnEveryRankAndNothingIsSent) {
  ExpectAllOk(RunnerFor(GetParam(), /*max_object_bytes=*/1000)(3, [](Communicator& comm) -> absl::Status {
    const std::string mine(comm.rank() == 1 ? 1001 : 10, 'x');
    std::vector<std::string> all = {"untouched"};
    const absl::Status s = comm.AllGatherBytes(mine, &all)->Wait();
    LOCKSTEP_RETURN_IF_ERROR(
        Expect(s.code() == absl::StatusCode::kInvalidArgument &&
                   s.message().find("rank 1's string is longer than 1000 bytes") != absl::string_view::npos,
               s.ToString()));
    LOCKSTEP_RETURN_IF_ERROR(Expect(all.size() == 1 && all[0] == "untouched", "the output was written"));
    std::string big(comm.rank() == 0 ? 5000 : 0, 'y');
    const absl::Status b = comm.BroadcastBytes(&big, 0)->Wait();
    LOCKSTEP_RETURN_IF_ERROR(
        Expect(b.message().find("rank 0's string is longer") != absl::string_view::npos, b.ToString()));
    // The group is unharmed: both errors were decided alike everywhere.
    return comm.Barrier()->Wait();
  }));
}

TEST_P(BytesTest, ASizeACorruptPeerAnnouncesIsAnErrorNotAnAllocation) {
  ExpectAllOk(RunnerFor(GetParam())(3, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 1) {
      // What AllGatherBytes sends first, with a size no string has.
      Tensor size = *Tensor::FromVector<int64_t>({int64_t{1} << 50});
      Tensor sizes = *Tensor::Empty({3}, DType::kI64);
      LOCKSTEP_RETURN_IF_ERROR(comm.AllGather(size, sizes)->Wait());
      return comm.Barrier()->Wait();
    }
    std::vector<std::string> all;
    const absl::Status s = comm.AllGatherBytes("hello", &all)->Wait();
    LOCKSTEP_RETURN_IF_ERROR(
        Expect(s.code() == absl::StatusCode::kDataLoss &&
                   s.message().find("rank 1 announced 1125899906842624 bytes") != absl::string_view::npos,
               s.ToString()));
    return comm.Barrier()->Wait();
  }));
}

INSTANTIATE_TEST_SUITE_P(Transports, BytesTest, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& info) { return info.param == 0 ? "tcp" : "shm"; });

TEST(CoalescedTest, BadListsAreRefusedBeforeAnythingIsSent) {
  ExpectAllOk(testing::RunThreads(2, [](Communicator& comm) -> absl::Status {
    Tensor f = *Tensor::Zeros({4}, DType::kF32), d = *Tensor::Zeros({4}, DType::kF64);
    Tensor whole = *Tensor::Zeros({8}, DType::kF32);
    struct Case {
      std::shared_ptr<Work> work;
      const char* needle;
    } cases[] = {
        {comm.AllReduceCoalesced({}, ReduceOp::kSum), "the list of tensors is empty"},
        {comm.AllReduceCoalesced({f, d}, ReduceOp::kSum), "tensors[1] is f64 but tensors[0] is f32"},
        {comm.AllReduceCoalesced({*whole.Flat(0, 5), *whole.Flat(4, 4)}, ReduceOp::kSum), "overlaps tensors[0]"},
        {comm.AllReduceCoalesced({f}, ReduceOp::kBxor), "BXOR applies to integer and bool tensors, not f32"},
        {comm.BroadcastCoalesced({f, d}, 2), "root 2 is not a rank"},
        {comm.AllGatherBytes("x", nullptr), "no output vector"},
    };
    for (Case& c : cases) {
      if (!c.work->IsCompleted()) return absl::InternalError("a bad call was queued");
      const absl::Status s = c.work->status();
      if (s.ok() || s.message().find(c.needle) == absl::string_view::npos) {
        return absl::InternalError(absl::StrCat("expected an error with '", c.needle, "', got ", s.ToString()));
      }
    }
    // Mixed dtypes are fine for a broadcast.
    return comm.BroadcastCoalesced({f, d}, 0)->Wait();
  }));
}

}  // namespace
}  // namespace lockstep
