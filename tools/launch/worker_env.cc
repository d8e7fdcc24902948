#include "tools/launch/worker_env.h"

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace launch {

std::vector<std::pair<std::string, std::string>> WorkerEnvironment(const GroupAssignment& group, int local_rank,
                                                                   const WorkerEnvOptions& options) {
  const int local_world_size = group.nodes[static_cast<size_t>(group.group_rank)].local_world_size;
  const int rank = group.rank_offset + local_rank;
  std::vector<std::pair<std::string, std::string>> env = {
      {"LOCAL_RANK", absl::StrCat(local_rank)},
      {"RANK", absl::StrCat(rank)},
      {"GROUP_RANK", absl::StrCat(group.group_rank)},
      // One role per job: role ranks are the global ranks.
      {"ROLE_RANK", absl::StrCat(rank)},
      {"ROLE_NAME", options.role},
      {"LOCAL_WORLD_SIZE", absl::StrCat(local_world_size)},
      {"WORLD_SIZE", absl::StrCat(group.world_size)},
      {"GROUP_WORLD_SIZE", absl::StrCat(group.group_world_size)},
      {"ROLE_WORLD_SIZE", absl::StrCat(group.world_size)},
      {"MASTER_ADDR", group.master_addr},
      {"MASTER_PORT", absl::StrCat(group.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", absl::StrCat(options.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", absl::StrCat(options.max_restarts)},
      {"TORCHELASTIC_RUN_ID", options.run_id},
      {"LOCKSTEP_STORE_TOKEN", group.worker_token},
  };
  if (options.set_omp_num_threads) env.emplace_back("OMP_NUM_THREADS", "1");
  return env;
}

}  // namespace launch
}  // namespace lockstep
