#include "collectives/bootstrap/rank_environment.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"

namespace lockstep {
namespace {

// Bounds what a malformed list can make us allocate.
constexpr size_t kMaxListEntries = size_t{1} << 20;

// One launcher's variable names, and what to tell the user when they are off.
struct Source {
  const char* name;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
  const char* fix;  // What to do, for every error of this source.
};

constexpr Source kTorchrun = {
    "torchrun",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "start the program with torchrun, or set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT consistently on "
    "every rank"};
constexpr Source kOpenMpi = {
    "openmpi",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "these are set by Open MPI's mpirun; start the program with mpirun and do not set OMPI_COMM_WORLD_* yourself"};
// SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE stand for the local world size.
constexpr Source kSlurm = {
    "slurm",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_TASKS_PER_NODE",
    "these are set by srun for each task; start every rank with srun (not directly in the batch script), or set "
    "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself"};

// Reads variables; empty values count as unset (scripts often export
// VAR=${VAR:-}).
class Vars {
 public:
  explicit Vars(const EnvLookup& lookup) : lookup_(lookup) {}
  std::optional<std::string> Get(const char* name) const {
    const char* value = lookup_(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::string(value);
  }
  bool Has(const char* name) const { return Get(name).has_value(); }

 private:
  const EnvLookup& lookup_;
};

// A whole decimal number: optional '-', digits, nothing else (no spaces, no
// '+', no hex). nullopt when malformed or beyond int64.
std::optional<int64_t> ParseWhole(absl::string_view text) {
  bool negative = false;
  if (!text.empty() && text[0] == '-') {
    negative = true;
    text.remove_prefix(1);
  }
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return negative ? -value : value;
}

// `name`=`value` as an int in [min, max]; `expected` describes the range.
absl::StatusOr<int> ParseVar(const char* name, const std::string& value, int64_t min, int64_t max,
                             absl::string_view expected, absl::string_view fix) {
  const std::optional<int64_t> number = ParseWhole(value);
  if (!number.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", value, "' is not a whole number: expected ", expected, "; ", fix));
  }
  if (*number < 0 && min >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=", value, " is negative: expected ", expected, "; ", fix));
  }
  if (*number < min || *number > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", value, " is out of range: expected ", expected, "; ", fix));
  }
  return static_cast<int>(*number);
}

absl::Status Missing(const Source& source, const std::vector<std::string>& missing,
                     const std::vector<std::string>& present) {
  return absl::InvalidArgumentError(absl::StrCat(
      "incomplete ", source.name, " environment: ", absl::StrJoin(present, ", "), present.size() == 1 ? " is" : " are",
      " set but ", absl::StrJoin(missing, ", "), missing.size() == 1 ? " is" : " are", " not; ", source.fix));
}

// Requires every one of `names`, naming all that are missing at once.
absl::Status RequireAll(const Vars& vars, const Source& source, const std::vector<const char*>& names) {
  std::vector<std::string> missing, present;
  for (const char* name : names) (vars.Has(name) ? present : missing).push_back(name);
  if (missing.empty()) return absl::OkStatus();
  return Missing(source, missing, present);
}

// The relations between the four numbers, once each parsed.
absl::Status CheckRanks(const Source& source, const char* local_world_name, const RankEnvironment& env) {
  if (env.rank >= env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(source.rank, "=", env.rank, " is not below ", source.world_size, "=",
                                                   env.world_size, ": expected 0 <= ", source.rank, " < ",
                                                   source.world_size, "; ", source.fix));
  }
  if (env.local_world_size > env.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(local_world_name, "=", env.local_world_size, " exceeds ",
                                                   source.world_size, "=", env.world_size,
                                                   ": expected at most the world size; ", source.fix));
  }
  if (env.local_rank >= env.local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        source.local_rank, "=", env.local_rank, " is not below ", local_world_name, "=", env.local_world_size,
        ": expected 0 <= ", source.local_rank, " < ", local_world_name, "; ", source.fix));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ParseRank(const Source& source, const char* name, const std::string& value) {
  return ParseVar(name, value, 0, std::numeric_limits<int>::max(), "a whole number >= 0", source.fix);
}

absl::StatusOr<int> ParseSize(const Source& source, const char* name, const std::string& value) {
  return ParseVar(name, value, 1, std::numeric_limits<int>::max(), "a whole number >= 1", source.fix);
}

absl::StatusOr<RankEnvironment> FromTorchrun(const Vars& vars) {
  const Source& s = kTorchrun;
  LOCKSTEP_RETURN_IF_ERROR(RequireAll(vars, s, {s.rank, s.world_size}));
  RankEnvironment env;
  LOCKSTEP_ASSIGN_OR_RETURN(env.rank, ParseRank(s, s.rank, *vars.Get(s.rank)));
  LOCKSTEP_ASSIGN_OR_RETURN(env.world_size, ParseSize(s, s.world_size, *vars.Get(s.world_size)));
  if (!vars.Has(s.local_rank) && !vars.Has(s.local_world_size)) {
    // Hand-set RANK/WORLD_SIZE (env:// style): one node. torchrun itself
    // always sets both, so a multi-node torchrun job never gets here.
    env.local_rank = env.rank;
    env.local_world_size = env.world_size;
  } else {
    LOCKSTEP_RETURN_IF_ERROR(RequireAll(vars, s, {s.local_rank, s.local_world_size}));
    LOCKSTEP_ASSIGN_OR_RETURN(env.local_rank, ParseRank(s, s.local_rank, *vars.Get(s.local_rank)));
    LOCKSTEP_ASSIGN_OR_RETURN(env.local_world_size, ParseSize(s, s.local_world_size, *vars.Get(s.local_world_size)));
  }
  LOCKSTEP_RETURN_IF_ERROR(CheckRanks(s, s.local_world_size, env));
  if (!vars.Has("MASTER_ADDR")) {
    return absl::InvalidArgumentError(
        "RANK and WORLD_SIZE are set but MASTER_ADDR is not: expected the host of rank 0 (where the store runs); "
        "set MASTER_ADDR (torchrun always does)");
  }
  env.master_addr = *vars.Get("MASTER_ADDR");
  return env;
}

absl::StatusOr<RankEnvironment> FromOpenMpi(const Vars& vars) {
  const Source& s = kOpenMpi;
  LOCKSTEP_RETURN_IF_ERROR(RequireAll(vars, s, {s.rank, s.world_size, s.local_rank, s.local_world_size}));
  RankEnvironment env;
  LOCKSTEP_ASSIGN_OR_RETURN(env.rank, ParseRank(s, s.rank, *vars.Get(s.rank)));
  LOCKSTEP_ASSIGN_OR_RETURN(env.world_size, ParseSize(s, s.world_size, *vars.Get(s.world_size)));
  LOCKSTEP_ASSIGN_OR_RETURN(env.local_rank, ParseRank(s, s.local_rank, *vars.Get(s.local_rank)));
  LOCKSTEP_ASSIGN_OR_RETURN(env.local_world_size, ParseSize(s, s.local_world_size, *vars.Get(s.local_world_size)));
  LOCKSTEP_RETURN_IF_ERROR(CheckRanks(s, s.local_world_size, env));
  if (vars.Has("MASTER_ADDR")) {
    env.master_addr = *vars.Get("MASTER_ADDR");
  } else if (env.local_world_size == env.world_size) {
    env.master_addr = "127.0.0.1";  // Every rank is on this node.
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("MASTER_ADDR is not set and mpirun runs ", env.world_size, " ranks on several nodes (",
                     s.local_world_size, "=", env.local_world_size,
                     " here): expected the host of rank 0; start with "
                     "`mpirun -x MASTER_ADDR=<host of rank 0> -x MASTER_PORT=<free port> ...`"));
  }
  return env;
}

absl::StatusOr<RankEnvironment> FromSlurm(const Vars& vars) {
  const Source& s = kSlurm;
  LOCKSTEP_RETURN_IF_ERROR(RequireAll(vars, s, {s.rank, s.world_size, s.local_rank}));
  RankEnvironment env;
  LOCKSTEP_ASSIGN_OR_RETURN(env.rank, ParseRank(s, s.rank, *vars.Get(s.rank)));
  LOCKSTEP_ASSIGN_OR_RETURN(env.world_size, ParseSize(s, s.world_size, *vars.Get(s.world_size)));
  LOCKSTEP_ASSIGN_OR_RETURN(env.local_rank, ParseRank(s, s.local_rank, *vars.Get(s.local_rank)));

  const char* local_world_name;
  if (std::optional<std::string> per_node = vars.Get("SLURM_NTASKS_PER_NODE")) {
    local_world_name = "SLURM_NTASKS_PER_NODE";
    LOCKSTEP_ASSIGN_OR_RETURN(env.local_world_size, ParseSize(s, local_world_name, *per_node));
  } else if (std::optional<std::string> tasks = vars.Get("SLURM_TASKS_PER_NODE")) {
    local_world_name = "SLURM_TASKS_PER_NODE";
    absl::StatusOr<std::vector<int>> counts = ExpandSlurmTasksPerNode(*tasks);
    if (!counts.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("SLURM_TASKS_PER_NODE='", *tasks, "': ", counts.status().message(), "; ", s.fix));
    }
    int node = 0;
    if (std::optional<std::string> node_id = vars.Get("SLURM_NODEID")) {
      LOCKSTEP_ASSIGN_OR_RETURN(
          node, ParseVar("SLURM_NODEID", *node_id, 0, static_cast<int64_t>(counts->size()) - 1,
                         absl::StrCat("a node index below ", counts->size(), " (SLURM_TASKS_PER_NODE='", *tasks,
                                      "' lists ", counts->size(), " nodes)"),
                         s.fix));
    } else if (counts->size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat("SLURM_TASKS_PER_NODE='", *tasks, "' lists ", counts->size(),
                                                     " nodes but SLURM_NODEID is not set to say which is this one; ",
                                                     s.fix));
    }
    env.local_world_size = (*counts)[static_cast<size_t>(node)];
    if (env.local_world_size < 1) {
      return absl::InvalidArgumentError(absl::StrCat("SLURM_TASKS_PER_NODE='", *tasks, "' gives node ", node,
                                                     " no tasks, yet a task runs there; ", s.fix));
    }
  } else {
    return Missing(s, {"SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE"}, {s.rank, s.world_size, s.local_rank});
  }
  LOCKSTEP_RETURN_IF_ERROR(CheckRanks(s, local_world_name, env));

  if (vars.Has("MASTER_ADDR")) {
    env.master_addr = *vars.Get("MASTER_ADDR");
  } else {
    const char* list_name = nullptr;
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      if (vars.Has(name)) {
        list_name = name;
        break;
      }
    }
    if (list_name == nullptr) {
      return absl::InvalidArgumentError(
          "MASTER_ADDR is not set and neither are SLURM_STEP_NODELIST, SLURM_JOB_NODELIST or SLURM_NODELIST: "
          "expected the host of rank 0; start with srun, or set MASTER_ADDR to the first node of the job");
    }
    const std::string list = *vars.Get(list_name);
    absl::StatusOr<std::vector<std::string>> hosts = ExpandSlurmNodelist(list);
    if (!hosts.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(list_name, "='", list, "': ", hosts.status().message(),
                                                     "; set MASTER_ADDR to the host of rank 0"));
    }
    env.master_addr = hosts->front();
  }
  if (!vars.Has("MASTER_PORT")) {
    if (std::optional<std::string> job = vars.Get("SLURM_JOB_ID")) {
      LOCKSTEP_ASSIGN_OR_RETURN(int job_id, ParseVar("SLURM_JOB_ID", *job, 0, std::numeric_limits<int>::max(),
                                                     "a whole number >= 0 (it picks the default MASTER_PORT)",
                                                     "set MASTER_PORT to choose the port yourself"));
      env.master_port = kDefaultMasterPort + job_id % 1000;
    }
  }
  return env;
}

absl::Status NothingSet(const Vars& vars) {
  std::string hint;
  if (vars.Has("SLURM_JOB_ID")) {
    hint = " SLURM_JOB_ID is set: inside a Slurm allocation, start every rank with srun.";
  }
  return absl::NotFoundError(absl::StrCat(
      "no rank environment: none of RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE "
      "(Open MPI) or SLURM_PROCID (Slurm) is set. torchrun provides RANK, WORLD_SIZE, LOCAL_RANK, "
      "LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; mpirun provides OMPI_COMM_WORLD_RANK, "
      "OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK and OMPI_COMM_WORLD_LOCAL_SIZE (add -x MASTER_ADDR "
      "-x MASTER_PORT across nodes); srun provides SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, "
      "SLURM_TASKS_PER_NODE, SLURM_NODEID and SLURM_JOB_NODELIST. Start the program with one of them, or set "
      "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself.",
      hint));
}

absl::StatusOr<bool> ParseAgentStore(const Vars& vars) {
  const std::optional<std::string> value = vars.Get("TORCHELASTIC_USE_AGENT_STORE");
  if (!value.has_value()) return false;
  if (*value == "True" || *value == "true" || *value == "1") return true;
  if (*value == "False" || *value == "false" || *value == "0") return false;
  return absl::InvalidArgumentError(absl::StrCat(
      "TORCHELASTIC_USE_AGENT_STORE='", *value,
      "' is not a boolean: expected True (a launcher hosts the store at MASTER_ADDR:MASTER_PORT) or False; "
      "fix or unset it"));
}

// Digits as a decimal of at least `width` characters (zero padded).
std::string Padded(uint64_t value, size_t width) {
  std::string digits = absl::StrCat(value);
  if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
  return digits;
}

// Splits on commas outside brackets.
absl::StatusOr<std::vector<absl::string_view>> SplitTopLevel(absl::string_view text) {
  std::vector<absl::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') {
      if (++depth > 1) return absl::InvalidArgumentError("nested '[' in a host list");
    } else if (c == ']') {
      if (--depth < 0) return absl::InvalidArgumentError("']' without '['");
    } else if (c == ',' && depth == 0) {
      parts.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  if (depth != 0) return absl::InvalidArgumentError("'[' without ']'");
  return parts;
}

// Appends the hosts `name` (one top-level entry) stands for to `out`.
absl::Status ExpandHost(absl::string_view name, std::vector<std::string>& out) {
  const size_t open = name.find('[');
  if (open == absl::string_view::npos) {
    out.emplace_back(name);
    return absl::OkStatus();
  }
  const size_t close = name.find(']', open);  // SplitTopLevel checked balance.
  const absl::string_view prefix = name.substr(0, open);
  const absl::string_view body = name.substr(open + 1, close - open - 1);
  std::vector<std::string> suffixes;
  LOCKSTEP_RETURN_IF_ERROR(ExpandHost(name.substr(close + 1), suffixes));
  if (body.empty()) return absl::InvalidArgumentError(absl::StrCat("empty brackets in '", name, "'"));
  size_t start = 0;
  while (start <= body.size()) {
    size_t end = body.find(',', start);
    if (end == absl::string_view::npos) end = body.size();
    const absl::string_view item = body.substr(start, end - start);
    const size_t dash = item.find('-');
    const absl::string_view lo_text = item.substr(0, dash);
    const absl::string_view hi_text = dash == absl::string_view::npos ? lo_text : item.substr(dash + 1);
    const std::optional<int64_t> lo = ParseWhole(lo_text), hi = ParseWhole(hi_text);
    if (!lo || !hi || *lo < 0 || *hi < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", item, "' in '", name, "' is not a number or a range such as 01-04"));
    }
    if (*hi < *lo) {
      return absl::InvalidArgumentError(absl::StrCat("range '", item, "' in '", name, "' runs backwards"));
    }
    const uint64_t numbers = static_cast<uint64_t>(*hi - *lo) + 1;
    if (numbers > kMaxListEntries || numbers * suffixes.size() + out.size() > kMaxListEntries) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' names more than ", kMaxListEntries, " hosts"));
    }
    for (int64_t n = *lo; n <= *hi; ++n) {
      for (const std::string& suffix : suffixes) {
        out.push_back(absl::StrCat(prefix, Padded(static_cast<uint64_t>(n), lo_text.size()), suffix));
      }
    }
    start = end + 1;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandSlurmNodelist(absl::string_view nodelist) {
  if (nodelist.empty()) return absl::InvalidArgumentError("empty host list");
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<absl::string_view> entries, SplitTopLevel(nodelist));
  std::vector<std::string> hosts;
  for (absl::string_view entry : entries) {
    if (entry.empty()) return absl::InvalidArgumentError("empty host name (two commas in a row?)");
    if (entry.front() == '[') return absl::InvalidArgumentError(absl::StrCat("'", entry, "' has no host name"));
    LOCKSTEP_RETURN_IF_ERROR(ExpandHost(entry, hosts));
  }
  return hosts;
}

absl::StatusOr<std::vector<int>> ExpandSlurmTasksPerNode(absl::string_view tasks_per_node) {
  if (tasks_per_node.empty()) return absl::InvalidArgumentError("empty tasks-per-node list");
  std::vector<int> counts;
  size_t start = 0;
  while (start <= tasks_per_node.size()) {
    size_t end = tasks_per_node.find(',', start);
    if (end == absl::string_view::npos) end = tasks_per_node.size();
    const absl::string_view item = tasks_per_node.substr(start, end - start);
    absl::string_view count_text = item;
    int64_t repeat = 1;
    const size_t paren = item.find('(');
    if (paren != absl::string_view::npos) {
      count_text = item.substr(0, paren);
      const absl::string_view times = item.substr(paren);
      const std::optional<int64_t> r = times.size() > 3 && times.substr(0, 2) == "(x" && times.back() == ')'
                                           ? ParseWhole(times.substr(2, times.size() - 3))
                                           : std::nullopt;
      if (!r || *r < 1) {
        return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not a count such as 2 or 2(x3)"));
      }
      repeat = *r;
    }
    const std::optional<int64_t> count = ParseWhole(count_text);
    if (!count || *count < 0 || *count > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(absl::StrCat("'", item, "' is not a count such as 2 or 2(x3)"));
    }
    if (static_cast<uint64_t>(repeat) + counts.size() > kMaxListEntries) {
      return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxListEntries, " nodes"));
    }
    counts.insert(counts.end(), static_cast<size_t>(repeat), static_cast<int>(*count));
    start = end + 1;
  }
  return counts;
}

absl::StatusOr<RankEnvironment> RankEnvironmentFromEnv(const EnvLookup& lookup) {
  const Vars vars(lookup);
  absl::StatusOr<RankEnvironment> env;
  if (vars.Has(kTorchrun.rank) || vars.Has(kTorchrun.world_size)) {
    env = FromTorchrun(vars);
    if (env.ok()) env->source = kTorchrun.name;
  } else if (vars.Has(kOpenMpi.rank) || vars.Has(kOpenMpi.world_size)) {
    env = FromOpenMpi(vars);
    if (env.ok()) env->source = kOpenMpi.name;
  } else if (vars.Has(kSlurm.rank)) {
    env = FromSlurm(vars);
    if (env.ok()) env->source = kSlurm.name;
  } else {
    return NothingSet(vars);
  }
  if (!env.ok()) return env.status();
  if (std::optional<std::string> port = vars.Get("MASTER_PORT")) {
    LOCKSTEP_ASSIGN_OR_RETURN(env->master_port, ParseVar("MASTER_PORT", *port, 1, 65535, "a TCP port in 1..65535",
                                                         "set MASTER_PORT to the port of the store on MASTER_ADDR"));
  }
  if (std::optional<std::string> token = vars.Get("LOCKSTEP_STORE_TOKEN")) env->store_token = *token;
  LOCKSTEP_ASSIGN_OR_RETURN(env->agent_store, ParseAgentStore(vars));
  return env;
}

absl::StatusOr<RankEnvironment> RankEnvironmentFromEnv() {
  return RankEnvironmentFromEnv([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace lockstep
