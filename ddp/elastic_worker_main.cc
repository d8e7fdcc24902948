// elastic_worker: one member of a fault-tolerant training run built from
// ElasticGroup (collectives/elastic/elastic_group.h) and HealFromPeer
// (ddp/heal.h), for ddp:elastic_kill_test. Each step the members admit
// newcomers, all-reduce their gradients and step SGD; a failed collective
// shrinks the group, heals every survivor to the newest committed step and
// redoes the step. Prints, last, "member M: parameter checksum X ...".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/bootstrap/shm_communicator.h"
#include "collectives/elastic/elastic_group.h"
#include "collectives/store/tcp_store.h"
#include "core/mt19937.h"
#include "core/status.h"
#include "ddp/heal.h"
#include "nn/cross_entropy.h"
#include "nn/mlp.h"
#include "nn/sgd.h"

ABSL_FLAG(int, store_port, 0, "the test's TcpStore");
ABSL_FLAG(int, member, 0, "this member's id");
ABSL_FLAG(int, size, 3, "the initial members");
ABSL_FLAG(bool, join, false, "a newcomer: join the running group");
ABSL_FLAG(int, steps, 30, "steps to train");
ABSL_FLAG(std::string, transport, "tcp", "tcp or shm");
ABSL_FLAG(int, pause_at, -1, "after committing this step, wait for the store key test/resume (the test's kill)");
ABSL_FLAG(int, admit_at, -1, "before this step, wait until a newcomer has registered (the test's replacement)");

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

// FNV-1a over every parameter's bytes.
uint64_t Checksum(Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (Parameter* p : model.Parameters()) {
    const auto* bytes = static_cast<const unsigned char*>(p->value.raw_data());
    for (size_t i = 0; i < p->value.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

// The batch of `member` at `step`: the same whoever computes it.
absl::Status Backward(Module& model, int member, int64_t step) {
  Mt19937 gen(static_cast<uint64_t>(1000 * step + member));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({4, 8}, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor y, Tensor::Empty({4}, DType::kI64));
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(gen.Next32() / 4294967296.0);
  for (int64_t i = 0; i < 4; ++i) y.data<int64_t>()[i] = static_cast<int64_t>(gen.Next32() % 4);
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor logits, model.Forward(x));
  LOCKSTEP_ASSIGN_OR_RETURN(CrossEntropyResult ce, CrossEntropy(logits, y));
  return model.Backward(ce.grad_logits, false).status();
}

absl::Status Run() {
  const int member = absl::GetFlag(FLAGS_member);
  // The job's secret: the store's token and the transports' handshake key.
  const char* token_env = std::getenv("LOCKSTEP_STORE_TOKEN");
  const std::string token = token_env != nullptr ? token_env : "";
  TcpStoreOptions store_options;
  store_options.port = absl::GetFlag(FLAGS_store_port);
  store_options.timeout = Milliseconds(60000);
  store_options.token = token;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> tcp, TcpStore::Create(store_options));
  std::shared_ptr<Store> store(std::move(tcp));
  ElasticGroupOptions options;
  options.settle = Milliseconds(500);
  options.timeout = Milliseconds(60000);
  options.communicator.communicator.timeout = Milliseconds(30000);
  options.communicator.communicator.failure_report_window = Milliseconds(200);
  options.communicator.transport.host = "127.0.0.1";
  options.communicator.transport.secret = token;
  if (absl::GetFlag(FLAGS_transport) == "shm") {
    options.make_communicator = [token](std::shared_ptr<Store> s, int rank, int size, const std::string& prefix) {
      ShmCommunicatorOptions shm;
      shm.transport.secret = token;
      shm.communicator.timeout = Milliseconds(30000);
      shm.communicator.failure_report_window = Milliseconds(200);
      shm.store_prefix = prefix;
      return CreateShmCommunicator(std::move(s), rank, size, shm);
    };
  } else if (absl::GetFlag(FLAGS_transport) != "tcp") {
    return absl::InvalidArgumentError("--transport: expected tcp or shm");
  }
  const Clock::time_point started = Clock::now();
  std::unique_ptr<ElasticGroup> group;
  if (absl::GetFlag(FLAGS_join)) {
    LOCKSTEP_ASSIGN_OR_RETURN(group, ElasticGroup::Join(store, member, options));
    std::printf("member %d: joined epoch %lld after %.3f s\n", member, static_cast<long long>(group->epoch()),
                std::chrono::duration<double>(Clock::now() - started).count());
  } else {
    LOCKSTEP_ASSIGN_OR_RETURN(group, ElasticGroup::Create(store, member, absl::GetFlag(FLAGS_size), options));
  }
  Mt19937 gen(1);
  MlpOptions mlp;
  mlp.sizes = {8, 16, 4};
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sequential> model, MakeMlp(mlp, gen));
  SgdOptions sgd_options;
  sgd_options.lr = 0.05;
  sgd_options.momentum = 0.9;
  LOCKSTEP_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> sgd, Sgd::Create(model->NamedParameters(), sgd_options));
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  int64_t step = 0;
  bool heal = absl::GetFlag(FLAGS_join);
  int64_t numel = 0;
  for (Parameter* p : model->Parameters()) numel += p->value.numel();
  auto reform = [&](const absl::Status& why) -> absl::Status {
    const Clock::time_point t0 = Clock::now();
    LOCKSTEP_ASSIGN_OR_RETURN(std::vector<int> lost, group->Shrink());
    std::printf("member %d: %s; lost %s; group re-formed with %d members in %.3f s\n", member,
                std::string(why.message().substr(0, 60)).c_str(), absl::StrJoin(lost, ",").c_str(), group->size(),
                std::chrono::duration<double>(Clock::now() - t0).count());
    std::fflush(stdout);
    heal = true;
    return absl::OkStatus();
  };
  while (true) {
    if (heal) {
      absl::StatusOr<HealResult> healed = HealFromPeer(group->comm(), step, *model, sgd.get(), nullptr);
      if (!healed.ok()) {
        LOCKSTEP_RETURN_IF_ERROR(reform(healed.status()));
        continue;
      }
      step = healed->step;
      heal = false;
    }
    if (step >= steps) break;
    absl::StatusOr<int> admitted = group->AdmitNewcomers();
    if (!admitted.ok()) {
      LOCKSTEP_RETURN_IF_ERROR(reform(admitted.status()));
      continue;
    }
    if (*admitted > 0) {
      heal = true;
      continue;
    }
    LOCKSTEP_RETURN_IF_ERROR(Backward(*model, member, step));
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor flat, Tensor::Empty({numel}, DType::kF32));
    int64_t at = 0;
    for (Parameter* p : model->Parameters()) {
      std::memcpy(flat.data<float>() + at, p->grad.raw_data(), p->grad.nbytes());
      at += p->grad.numel();
    }
    absl::Status reduced = group->comm().AllReduce(flat, ReduceOp::kSum)->Wait();
    if (!reduced.ok()) {
      LOCKSTEP_RETURN_IF_ERROR(sgd->ZeroGrad());
      LOCKSTEP_RETURN_IF_ERROR(reform(reduced));
      continue;  // The step again, in the new group.
    }
    // Committed: the average over the live members.
    const float inv = 1.0f / static_cast<float>(group->size());
    at = 0;
    for (Parameter* p : model->Parameters()) {
      float* g = p->grad.data<float>();
      for (int64_t i = 0; i < p->grad.numel(); ++i) g[i] = flat.data<float>()[at + i] * inv;
      at += p->grad.numel();
    }
    LOCKSTEP_RETURN_IF_ERROR(sgd->Step());
    LOCKSTEP_RETURN_IF_ERROR(sgd->ZeroGrad());
    ++step;
    LOCKSTEP_RETURN_IF_ERROR(store->Set(absl::StrCat("progress/", member, "/", step), "1"));
    // The test's points: where it kills a member, where a newcomer has come.
    if (step == absl::GetFlag(FLAGS_pause_at)) LOCKSTEP_RETURN_IF_ERROR(store->Wait({"test/resume"}));
    if (step + 1 == absl::GetFlag(FLAGS_admit_at)) LOCKSTEP_RETURN_IF_ERROR(store->Wait({"elastic/join/1"}));
  }
  std::printf("member %d: parameter checksum %016llx after %lld steps, epoch %lld, members %s\n", member,
              static_cast<unsigned long long>(Checksum(*model)), static_cast<long long>(step),
              static_cast<long long>(group->epoch()), absl::StrJoin(group->members(), ",").c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  absl::Status s = lockstep::Run();
  if (!s.ok()) {
    std::fprintf(stderr, "elastic_worker: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
