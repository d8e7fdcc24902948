// RankEnvironment: who this process is in the group (rank, world size, local
// rank) and where the rendezvous store is, read from the variables that
// torchrun, Open MPI's mpirun or Slurm's srun set. Pure parsing: nothing is
// connected or started here.
//
//   LOCKSTEP_ASSIGN_OR_RETURN(RankEnvironment env, RankEnvironmentFromEnv());
//   TcpStoreOptions store;
//   store.host = env.master_addr;
//   store.port = env.master_port;
//   store.is_server = env.rank == 0 && !env.agent_store;
//   store.token = env.store_token;
//
// The first launcher whose variables are present wins, in this order
// (MASTER_ADDR and MASTER_PORT, when set, are used under every source):
//
//   source    detected by              rank, world size              local rank, local world size
//   --------  -----------------------  ----------------------------  ------------------------------------------
//   torchrun  RANK or WORLD_SIZE       RANK, WORLD_SIZE              LOCAL_RANK, LOCAL_WORLD_SIZE (a)
//   openmpi   OMPI_COMM_WORLD_RANK or  OMPI_COMM_WORLD_RANK,         OMPI_COMM_WORLD_LOCAL_RANK,
//             OMPI_COMM_WORLD_SIZE     OMPI_COMM_WORLD_SIZE          OMPI_COMM_WORLD_LOCAL_SIZE
//   slurm     SLURM_PROCID             SLURM_PROCID, SLURM_NTASKS    SLURM_LOCALID, SLURM_NTASKS_PER_NODE or
//                                                                    this node's SLURM_TASKS_PER_NODE entry (b)
//
//   source    MASTER_ADDR when unset                    MASTER_PORT when unset
//   --------  ----------------------------------------  -----------------------------------------------
//   torchrun  error (torchrun always sets it)           29500
//   openmpi   127.0.0.1 if LOCAL_SIZE == SIZE (one      29500
//             node), else error
//   slurm     first host of SLURM_STEP_NODELIST, else   29500 + SLURM_JOB_ID % 1000 (29500..30499);
//             SLURM_JOB_NODELIST, else SLURM_NODELIST   29500 without SLURM_JOB_ID (d)
//             (c)
//
// Every source also reads LOCKSTEP_STORE_TOKEN (the store's shared secret,
// may be empty) and TORCHELASTIC_USE_AGENT_STORE ("True": a launcher already
// hosts the store at MASTER_ADDR:MASTER_PORT, so rank 0 must connect to it,
// not start a server; PyTorch's own variable and spelling).
//
// (a) torchrun always sets LOCAL_RANK and LOCAL_WORLD_SIZE. When both are
//     unset (RANK and WORLD_SIZE set by hand, as for PyTorch's env:// on one
//     machine) the group is taken to be one node: local rank = rank, local
//     world size = world size. One without the other is an error: a local
//     world size cannot be guessed.
// (b) SLURM_TASKS_PER_NODE lists tasks per node in node order, with repeats
//     compressed: "2(x3),1" is 2,2,2,1. SLURM_NODEID picks this node's entry
//     (it may be omitted only when the list describes a single node).
// (c) Rank 0 runs on the first node of its step; the step list is preferred
//     because a step may use a subset of the job's nodes. Host lists use
//     Slurm's bracket syntax (ExpandSlurmNodelist).
// (d) Two jobs sharing a node then rarely pick the same port; set
//     MASTER_PORT to choose one.
//
// Open MPI comes before Slurm because mpirun inside a Slurm allocation
// inherits SLURM_PROCID (of the batch step), which is not the MPI rank.
// Under several nodes, mpirun does not tell where rank 0 runs: pass
// `mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=<port>`.
//
// Every number is checked: whole and non-negative, rank < world size, local
// rank < local world size, local world size <= world size, port in 1..65535;
// errors (InvalidArgument) name the variable, its value, what was expected
// and what to do. With no launcher's variables at all: NotFound, listing what
// each launcher provides. Empty values count as unset.
#ifndef LOCKSTEP_COLLECTIVES_BOOTSTRAP_RANK_ENVIRONMENT_H_
#define LOCKSTEP_COLLECTIVES_BOOTSTRAP_RANK_ENVIRONMENT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

inline constexpr int kDefaultMasterPort = 29500;  // torchrun's.

struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;
  int master_port = kDefaultMasterPort;
  std::string store_token;   // LOCKSTEP_STORE_TOKEN; may be empty.
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True: connect, never serve.
  std::string source;        // "torchrun", "openmpi" or "slurm".
};

// getenv-like: the value of `name`, or nullptr when unset.
using EnvLookup = std::function<const char*(const char* name)>;

absl::StatusOr<RankEnvironment> RankEnvironmentFromEnv(const EnvLookup& env);
// Reads this process's environment.
absl::StatusOr<RankEnvironment> RankEnvironmentFromEnv();

// Slurm's host list syntax: comma-separated names, each with any number of
// bracketed lists of numbers and ranges, zero padding kept (the width of a
// range's lower bound):
//   "node[01-03,7],gpu-a"  -> node01 node02 node03 node7 gpu-a
//   "r[1-2]n[8-9]"         -> r1n8 r1n9 r2n8 r2n9
absl::StatusOr<std::vector<std::string>> ExpandSlurmNodelist(absl::string_view nodelist);

// SLURM_TASKS_PER_NODE's syntax: "2(x3),1" -> 2 2 2 1.
absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(absl::string_view tasks_per_node);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_BOOTSTRAP_RANK_ENVIRONMENT_H_
