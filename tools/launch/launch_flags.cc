#include "tools/launch/launch_flags.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status.h"

namespace lockstep {
namespace launch {
namespace {

absl::Status FlagError(absl::string_view flag, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("lockstep-run: --", flag, ": ", problem, "; see lockstep-run --help"));
}

absl::StatusOr<int> ParseInt(absl::string_view flag, absl::string_view text) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return FlagError(flag, absl::StrCat("expected an integer, got '", text, "'"));
  }
  return value;
}

absl::StatusOr<double> ParseSeconds(absl::string_view flag, absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !(value >= 0) || value > 1e7) {
    return FlagError(flag, absl::StrCat("expected a number of seconds, got '", text, "'"));
  }
  return value;
}

// Switches (argparse store_true with check_env): PET_<NAME> is an integer.
bool EnvSwitch(const GetEnvFn& getenv, const std::string& dest) {
  std::optional<std::string> value = getenv("PET_" + absl::AsciiStrToUpper(dest));
  int n = 0;
  return value.has_value() && absl::SimpleAtoi(*value, &n) && n != 0;
}

struct FlagDef {
  const char* dest;  // torchrun's name (underscores).
  char short_name;   // 0: none.
  bool takes_value;
};

constexpr FlagDef kFlags[] = {
    {"help", 'h', false},      {"nnodes", 0, true},           {"nproc_per_node", 0, true},
    {"rdzv_backend", 0, true}, {"rdzv_endpoint", 0, true},    {"rdzv_id", 0, true},
    {"rdzv_conf", 0, true},    {"standalone", 0, false},      {"fault_tolerant", 0, false},
    {"max_restarts", 0, true}, {"monitor_interval", 0, true}, {"start_method", 0, true},
    {"role", 0, true},         {"module", 'm', false},        {"no_python", 0, false},
    {"run_path", 0, false},    {"log_dir", 0, true},          {"redirects", 'r', true},
    {"tee", 't', true},        {"node_rank", 0, true},        {"master_addr", 0, true},
    {"master_port", 0, true},
};

// The flag a long name (underscores already) stands for: exact, else a
// unique prefix (argparse's allow_abbrev).
absl::StatusOr<const FlagDef*> FindLong(const std::string& name, const std::string& as_typed) {
  const FlagDef* prefix_match = nullptr;
  int prefix_matches = 0;
  for (const FlagDef& f : kFlags) {
    if (name == f.dest) return &f;
    if (!name.empty() && absl::StartsWith(f.dest, name)) {
      prefix_match = &f;
      ++prefix_matches;
    }
  }
  if (prefix_matches == 1) return prefix_match;
  if (prefix_matches > 1) {
    return absl::InvalidArgumentError(absl::StrCat("lockstep-run: ambiguous flag '", as_typed,
                                                   "' (the prefix of several flags); see lockstep-run --help"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("lockstep-run: unknown flag '", as_typed, "'; see lockstep-run --help for the flags (torchrun's)"));
}

absl::Status SetNnodes(LaunchFlags* flags, absl::string_view text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() > 2) return FlagError("nnodes", absl::StrCat("'", text, "' is not N or MIN:MAX"));
  LOCKSTEP_ASSIGN_OR_RETURN(flags->min_nodes, ParseInt("nnodes", parts[0]));
  flags->max_nodes = flags->min_nodes;
  if (parts.size() == 2) {
    LOCKSTEP_ASSIGN_OR_RETURN(flags->max_nodes, ParseInt("nnodes", parts[1]));
  }
  if (flags->min_nodes < 1 || flags->max_nodes < flags->min_nodes) {
    return FlagError("nnodes", absl::StrCat("'", text, "' needs 1 <= MIN <= MAX"));
  }
  return absl::OkStatus();
}

absl::Status SetRdzvConf(LaunchFlags* flags, absl::string_view text) {
  flags->rdzv_conf.clear();
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const size_t eq = item.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return FlagError("rdzv_conf", absl::StrCat("'", item, "' is not key=value (give key1=value1,key2=value2)"));
    }
    flags->rdzv_conf[std::string(absl::StripAsciiWhitespace(item.substr(0, eq)))] =
        std::string(absl::StripAsciiWhitespace(item.substr(eq + 1)));
  }
  return absl::OkStatus();
}

absl::Status SetValue(LaunchFlags* flags, const std::string& dest, const std::string& value) {
  if (dest == "nnodes") return SetNnodes(flags, value);
  if (dest == "nproc_per_node") {
    flags->nproc_per_node = value;
  } else if (dest == "rdzv_backend") {
    flags->rdzv_backend = value;
  } else if (dest == "rdzv_endpoint") {
    flags->rdzv_endpoint = value;
  } else if (dest == "rdzv_id") {
    flags->rdzv_id = value;
  } else if (dest == "rdzv_conf") {
    return SetRdzvConf(flags, value);
  } else if (dest == "max_restarts") {
    LOCKSTEP_ASSIGN_OR_RETURN(flags->max_restarts, ParseInt(dest, value));
  } else if (dest == "monitor_interval") {
    LOCKSTEP_ASSIGN_OR_RETURN(flags->monitor_interval_s, ParseSeconds(dest, value));
  } else if (dest == "start_method") {
    flags->start_method = value;
  } else if (dest == "role") {
    flags->role = value;
  } else if (dest == "log_dir") {
    flags->log_dir = value;
  } else if (dest == "redirects") {
    LOCKSTEP_ASSIGN_OR_RETURN(flags->redirects, ParseStreamSpec(dest, value));
  } else if (dest == "tee") {
    LOCKSTEP_ASSIGN_OR_RETURN(flags->tee, ParseStreamSpec(dest, value));
  } else if (dest == "node_rank") {
    LOCKSTEP_ASSIGN_OR_RETURN(flags->node_rank, ParseInt(dest, value));
  } else if (dest == "master_addr") {
    flags->master_addr = value;
  } else if (dest == "master_port") {
    LOCKSTEP_ASSIGN_OR_RETURN(flags->master_port, ParseInt(dest, value));
  }
  return absl::OkStatus();
}

void SetSwitch(LaunchFlags* flags, const std::string& dest, bool on) {
  if (dest == "help") flags->help = on;
  if (dest == "standalone") flags->standalone = on;
  if (dest == "fault_tolerant") flags->fault_tolerant = on;
  if (dest == "module") flags->module = on;
  if (dest == "no_python") flags->no_python = on;
  if (dest == "run_path") flags->run_path = on;
}

absl::Status Validate(const LaunchFlags& flags) {
  if (flags.rdzv_backend != "static" && flags.rdzv_backend != "c10d" && flags.rdzv_backend != "etcd" &&
      flags.rdzv_backend != "etcd-v2") {
    return FlagError("rdzv_backend",
                     absl::StrCat("'", flags.rdzv_backend, "' is not supported; use static, c10d, etcd or etcd-v2"));
  }
  if (flags.rdzv_backend == "static" && flags.min_nodes != flags.max_nodes) {
    return FlagError("nnodes", absl::StrCat(flags.min_nodes, ":", flags.max_nodes,
                                            " needs an elastic rendezvous; add --rdzv_backend c10d (or etcd)"));
  }
  if (flags.rdzv_backend == "static" && !flags.standalone &&
      (flags.node_rank < 0 || flags.node_rank >= flags.max_nodes)) {
    return FlagError("node_rank", absl::StrCat(flags.node_rank, " is not below --nnodes ", flags.max_nodes,
                                               "; node ranks are 0..", flags.max_nodes - 1));
  }
  if (flags.master_port < 0 || flags.master_port > 65535) {
    return FlagError("master_port", absl::StrCat(flags.master_port, " is not a TCP port"));
  }
  if (flags.max_restarts < 0) return FlagError("max_restarts", "must be 0 or more");
  if (!(flags.monitor_interval_s > 0)) return FlagError("monitor_interval", "must be more than 0 seconds");
  if (flags.start_method != "spawn" && flags.start_method != "fork" && flags.start_method != "forkserver") {
    return FlagError("start_method", absl::StrCat("'", flags.start_method, "' is not spawn, fork or forkserver"));
  }
  if (flags.program.empty()) {
    return absl::InvalidArgumentError(
        "lockstep-run: no training program given; usage: lockstep-run [flags] PROGRAM [ARGS...] "
        "(see lockstep-run --help)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::chrono::milliseconds> ConfSeconds(const std::map<std::string, std::string>& conf,
                                                      const std::string& key, std::chrono::milliseconds fallback) {
  auto it = conf.find(key);
  if (it == conf.end()) return fallback;
  double seconds = 0;
  if (!absl::SimpleAtod(it->second, &seconds) || !(seconds > 0) || seconds > 1e7) {
    return FlagError("rdzv_conf", absl::StrCat(key, "=", it->second, " is not a positive number of seconds"));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// rdzv_conf's etcd keys: the protocol, the TLS files (each readable now, so
// that a typo fails here and not at the first request) and the key prefix.
absl::Status ResolveEtcdConf(const std::map<std::string, std::string>& conf, RendezvousSettings* s,
                             std::vector<std::string>* warnings) {
  if (auto it = conf.find("protocol"); it != conf.end()) {
    s->etcd_protocol = absl::AsciiStrToLower(it->second);
    if (s->etcd_protocol != "http" && s->etcd_protocol != "https") {
      return FlagError("rdzv_conf", absl::StrCat("protocol=", it->second, " is neither http nor https"));
    }
  }
  struct File {
    const char* key;
    const char* v2_key;
    std::string* into;
  };
  const File files[] = {{"cacert", "ca_cert", &s->etcd_ca_cert},
                        {"cert", "ssl_cert", &s->etcd_cert},
                        {"key", "ssl_cert_key", &s->etcd_key}};
  for (const File& f : files) {
    auto it = conf.find(f.key);
    if (it == conf.end()) it = conf.find(f.v2_key);
    if (it == conf.end()) continue;
    std::ifstream in(it->second);
    if (!in) {
      return FlagError("rdzv_conf",
                       absl::StrCat(it->first, "=", it->second, " cannot be read; give a readable PEM file"));
    }
    *f.into = it->second;
  }
  if (s->etcd_cert.empty() != s->etcd_key.empty()) {
    return FlagError("rdzv_conf", "cert (ssl_cert) and key (ssl_cert_key) go together: give both or neither");
  }
  if (!s->etcd_ca_cert.empty() || !s->etcd_cert.empty()) {
    if (conf.count("protocol") == 0) s->etcd_protocol = "https";
  }
  if (auto it = conf.find("etcd_prefix"); it != conf.end()) {
    s->etcd_prefix = std::string(absl::StripSuffix(it->second, "/"));
    if (s->etcd_prefix.empty() || s->etcd_prefix[0] != '/') {
      return FlagError("rdzv_conf", absl::StrCat("etcd_prefix=", it->second, " does not start with /"));
    }
  }
  if (conf.count("is_host") != 0) {
    warnings->push_back("--rdzv_conf: is_host means nothing with etcd (no agent hosts the store); ignoring it");
  }
  return absl::OkStatus();
}

}  // namespace

int StreamSpec::For(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? kStdNone : it->second;
}

absl::StatusOr<StreamSpec> ParseStreamSpec(absl::string_view flag, absl::string_view text) {
  auto parse_std = [&](absl::string_view v) -> absl::StatusOr<int> {
    int n = -1;
    if (!absl::SimpleAtoi(v, &n) || n < 0 || n > 3) {
      return FlagError(flag, absl::StrCat("'", v, "' is not 0 (none), 1 (stdout), 2 (stderr) or 3 (both)"));
    }
    return n;
  };
  StreamSpec spec;
  if (text.find(':') == absl::string_view::npos) {
    LOCKSTEP_ASSIGN_OR_RETURN(spec.all, parse_std(text));
    return spec;
  }
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::vector<absl::string_view> kv = absl::StrSplit(item, ':');
    int rank = -1;
    if (kv.size() != 2 || !absl::SimpleAtoi(kv[0], &rank) || rank < 0) {
      return FlagError(flag, absl::StrCat("'", item, "' is not LOCAL_RANK:STREAMS (e.g. 0:1,1:2)"));
    }
    LOCKSTEP_ASSIGN_OR_RETURN(spec.per_rank[rank], parse_std(kv[1]));
  }
  return spec;
}

absl::StatusOr<LaunchFlags> ParseLaunchFlags(const std::vector<std::string>& args, const GetEnvFn& getenv) {
  LaunchFlags flags;
  // PET_ defaults first; the command line overrides them.
  for (const FlagDef& f : kFlags) {
    const std::string dest = f.dest;
    if (dest == "help") continue;
    if (!f.takes_value) {
      SetSwitch(&flags, dest, EnvSwitch(getenv, dest));
      continue;
    }
    std::optional<std::string> value = getenv("PET_" + absl::AsciiStrToUpper(dest));
    if (value.has_value()) {
      absl::Status s = SetValue(&flags, dest, *value);
      if (!s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("from PET_", absl::AsciiStrToUpper(dest), ": ", s.message()));
      }
    }
  }
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // The program.
    const FlagDef* def = nullptr;
    std::optional<std::string> inline_value;
    if (arg[1] == '-') {
      std::string name = arg.substr(2);
      const size_t eq = name.find('=');
      if (eq != std::string::npos) {
        inline_value = name.substr(eq + 1);
        name.resize(eq);
      }
      std::replace(name.begin(), name.end(), '-', '_');
      LOCKSTEP_ASSIGN_OR_RETURN(def, FindLong(name, arg.substr(0, eq == std::string::npos ? arg.size() : eq + 2)));
    } else {
      for (const FlagDef& f : kFlags) {
        if (f.short_name != 0 && f.short_name == arg[1]) def = &f;
      }
      if (def == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("lockstep-run: unknown flag '", arg, "'; see lockstep-run --help for the flags (torchrun's)"));
      }
      if (arg.size() > 2) inline_value = arg.substr(arg[2] == '=' ? 3 : 2);  // -r3, -r=3
    }
    if (!def->takes_value) {
      if (inline_value.has_value()) return FlagError(def->dest, "takes no value");
      SetSwitch(&flags, def->dest, true);
      continue;
    }
    std::string value;
    if (inline_value.has_value()) {
      value = *inline_value;
    } else {
      if (i + 1 >= args.size()) return FlagError(def->dest, "expected a value after it");
      value = args[++i];
    }
    LOCKSTEP_RETURN_IF_ERROR(SetValue(&flags, def->dest, value));
  }
  if (flags.help) return flags;
  if (i < args.size()) {
    flags.program = args[i];
    flags.program_args.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  }
  if (flags.standalone) {
    // torchrun: a local c10d rendezvous, one node; explicit rdzv flags are ignored.
    flags.rdzv_backend = "c10d";
    flags.rdzv_endpoint = "127.0.0.1:0";
    flags.min_nodes = flags.max_nodes = 1;
    flags.node_rank = 0;
  }
  LOCKSTEP_RETURN_IF_ERROR(Validate(flags));
  return flags;
}

absl::StatusOr<int> ResolveNprocPerNode(absl::string_view text, int cpu_count, int gpu_count) {
  if (text == "cpu") return std::max(cpu_count, 1);
  if (text == "gpu") {
    if (gpu_count <= 0) {
      return FlagError("nproc_per_node", "'gpu' but this node has no CUDA device; give a number or 'cpu'");
    }
    return gpu_count;
  }
  if (text == "auto") return gpu_count > 0 ? gpu_count : std::max(cpu_count, 1);
  int n = 0;
  if (!absl::SimpleAtoi(text, &n) || n < 1) {
    return FlagError("nproc_per_node", absl::StrCat("'", text, "' is not a positive number, cpu, gpu or auto"));
  }
  return n;
}

absl::StatusOr<RendezvousSettings> ResolveRendezvous(const LaunchFlags& flags, const GetEnvFn& getenv,
                                                     std::vector<std::string>* warnings) {
  RendezvousSettings s;
  s.backend = flags.rdzv_backend;
  s.run_id = flags.rdzv_id;
  if (s.backend == "etcd-v2") s.backend = "etcd";
  const bool etcd = s.backend == "etcd";
  if (flags.rdzv_endpoint.empty()) {
    if (s.backend == "c10d") {
      return FlagError("rdzv_endpoint", "c10d needs one (host[:port], e.g. --rdzv_endpoint node0:29400)");
    }
    if (etcd) {
      return FlagError("rdzv_endpoint",
                       "etcd needs one (host[:port][,host[:port]...], e.g. --rdzv_endpoint etcd0:2379)");
    }
    s.host = flags.master_addr;
    s.port = flags.master_port;
  } else {
    // host, host:port, [v6], [v6]:port; c10d's default port is 29400,
    // etcd's 2379; etcd takes a comma list of its cluster's members.
    const std::vector<std::string> endpoints = etcd ? absl::StrSplit(flags.rdzv_endpoint, ',', absl::SkipWhitespace())
                                                    : std::vector<std::string>{flags.rdzv_endpoint};
    if (endpoints.empty()) return FlagError("rdzv_endpoint", "is empty");
    for (const std::string& raw : endpoints) {
      const std::string e(absl::StripAsciiWhitespace(raw));
      std::string host;
      int port = etcd ? 2379 : 29400;
      size_t colon = e.rfind(':');
      const bool bracketed = !e.empty() && e[0] == '[';
      if (colon != std::string::npos && (!bracketed || colon > e.find(']'))) {
        host = e.substr(0, colon);
        LOCKSTEP_ASSIGN_OR_RETURN(port, ParseInt("rdzv_endpoint", e.substr(colon + 1)));
      } else {
        host = e;
      }
      if (bracketed) host = std::string(absl::StripSuffix(absl::StripPrefix(host, "["), "]"));
      if (host.empty() || port < 0 || port > 65535 || (port == 0 && !flags.standalone) ||
          absl::StrContains(host, "/")) {
        return FlagError("rdzv_endpoint", absl::StrCat("'", e, "' is not host[:port]"));
      }
      if (s.host.empty()) {
        s.host = host;
        s.port = port;
      }
      if (etcd) {
        s.etcd_endpoints.push_back(absl::StrContains(host, ":") ? absl::StrCat("[", host, "]:", port)
                                                                : absl::StrCat(host, ":", port));
      }
    }
  }
  const auto& conf = flags.rdzv_conf;
  for (const auto& [key, value] : conf) {
    static const char* const kKnown[] = {
        "timeout", "join_timeout", "last_call_timeout", "read_timeout", "heartbeat_timeout", "is_host", "join_token",
        "join_token_file", "close_timeout", "keep_alive_interval", "keep_alive_max_attempt",
        // etcd (etcd-v2's names for the same files: ca_cert, ssl_cert, ssl_cert_key).
        "protocol", "cacert", "cert", "key", "ca_cert", "ssl_cert", "ssl_cert_key", "etcd_prefix"};
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      warnings->push_back(absl::StrCat("--rdzv_conf: ignoring unknown key '", key, "'"));
    }
  }
  LOCKSTEP_ASSIGN_OR_RETURN(s.join_timeout, ConfSeconds(conf, "timeout", s.join_timeout));
  LOCKSTEP_ASSIGN_OR_RETURN(s.join_timeout, ConfSeconds(conf, "join_timeout", s.join_timeout));
  LOCKSTEP_ASSIGN_OR_RETURN(s.last_call_timeout, ConfSeconds(conf, "last_call_timeout", s.last_call_timeout));
  LOCKSTEP_ASSIGN_OR_RETURN(s.read_timeout, ConfSeconds(conf, "read_timeout", s.read_timeout));
  LOCKSTEP_ASSIGN_OR_RETURN(s.heartbeat_timeout, ConfSeconds(conf, "heartbeat_timeout", s.heartbeat_timeout));
  if (auto it = conf.find("is_host"); it != conf.end()) {
    const std::string v = absl::AsciiStrToLower(it->second);
    if (v == "1" || v == "true" || v == "yes") {
      s.is_host = true;
    } else if (v == "0" || v == "false" || v == "no") {
      s.is_host = false;
    } else {
      return FlagError("rdzv_conf", absl::StrCat("is_host=", it->second, " is not true or false"));
    }
  }
  if (auto it = conf.find("join_token"); it != conf.end()) {
    s.token = it->second;
    warnings->push_back(
        "--rdzv_conf join_token=... is visible to every user in ps; prefer LOCKSTEP_RDZV_TOKEN or "
        "join_token_file=PATH");
  } else if (auto file = conf.find("join_token_file"); file != conf.end()) {
    std::ifstream in(file->second);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      return FlagError("rdzv_conf", absl::StrCat("join_token_file=", file->second,
                                                 " cannot be read; give a readable file holding the token"));
    }
    s.token = std::string(absl::StripTrailingAsciiWhitespace(text.str()));
    if (s.token.empty()) {
      return FlagError("rdzv_conf", absl::StrCat("join_token_file=", file->second, " is empty"));
    }
  } else if (std::optional<std::string> env = getenv("LOCKSTEP_RDZV_TOKEN"); env.has_value()) {
    s.token = *env;
  }
  if (s.token.size() > 4096) return FlagError("rdzv_conf", "the join token is longer than 4096 bytes");
  if (etcd) LOCKSTEP_RETURN_IF_ERROR(ResolveEtcdConf(conf, &s, warnings));
  return s;
}

std::string LaunchUsage() {
  return R"(usage: lockstep-run [-h] [--nnodes NNODES] [--nproc_per_node NPROC_PER_NODE]
                    [--rdzv_backend RDZV_BACKEND] [--rdzv_endpoint RDZV_ENDPOINT]
                    [--rdzv_id RDZV_ID] [--rdzv_conf RDZV_CONF] [--standalone]
                    [--fault_tolerant] [--max_restarts MAX_RESTARTS] [--monitor_interval MONITOR_INTERVAL]
                    [--start_method {spawn,fork,forkserver}] [--role ROLE] [-m]
                    [--no_python] [--run_path] [--log_dir LOG_DIR] [-r REDIRECTS]
                    [-t TEE] [--node_rank NODE_RANK] [--master_addr MASTER_ADDR]
                    [--master_port MASTER_PORT]
                    training_script ...

lockstep's distributed launcher, torchrun's command line (PyTorch 1.13; every
--a_b flag is also --a-b, and PET_<FLAG> sets a flag's default).

Run one lockstep-run per node. The agents meet at a rendezvous store, each
starts --nproc_per_node workers with torchrun's environment (RANK, LOCAL_RANK,
WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, MASTER_ADDR, MASTER_PORT,
TORCHELASTIC_RESTART_COUNT, ...) and watches them; output lines are prefixed
"[rank]:". When a worker on any node fails, every agent stops its workers and
the group restarts, up to --max_restarts times; then every agent prints the
first failure and exits 1. Example, two nodes with 2 workers each:
  node0$ LOCKSTEP_RDZV_TOKEN=s3cret lockstep-run --nnodes 2 --node_rank 0 \
           --nproc_per_node 2 --master_addr node0 --master_port 29500 ./train --epochs 3
  node1$ LOCKSTEP_RDZV_TOKEN=s3cret lockstep-run --nnodes 2 --node_rank 1 \
           --nproc_per_node 2 --master_addr node0 --master_port 29500 ./train --epochs 3
Elastic: --nnodes 1:4 --rdzv_backend c10d --rdzv_endpoint node0:29400 on every
node, or --rdzv_backend etcd --rdzv_endpoint etcd0:2379 (a cluster's etcd: no
agent hosts the store, so losing any node, node 0 included, only shrinks the
group). One node: lockstep-run --standalone --nproc_per_node 4 ./train

positional arguments:
  training_script       The program (or .py script; -m: a module) to run on every
                        worker, followed by its arguments, passed untouched.

options:
  -h, --help            show this help message and exit
  --nnodes NNODES       Number of nodes, or the range of nodes in form
                        <minimum_nodes>:<maximum_nodes>. (default 1:1)
  --nproc_per_node NPROC_PER_NODE
                        Number of workers per node; supported values: [auto, cpu,
                        gpu, int]. (default 1)
  --rdzv_backend RDZV_BACKEND
                        Rendezvous backend: static, c10d (our own store-based
                        rendezvous) or etcd / etcd-v2 (etcd >= 3.4, the v3 API).
                        (default static)
  --rdzv_endpoint RDZV_ENDPOINT
                        Rendezvous backend endpoint; usually in form <host>:<port>.
                        (static default: master_addr:master_port; c10d port 29400;
                        etcd port 2379, several as host:port,host:port)
  --rdzv_id RDZV_ID     User-defined group id. (default none)
  --rdzv_conf RDZV_CONF
                        Additional rendezvous configuration
                        (<key1>=<value1>,<key2>=<value2>,...): timeout (join, 900 s),
                        last_call_timeout (30 s), read_timeout (60 s),
                        heartbeat_timeout (30 s), is_host, join_token_file=PATH,
                        join_token (visible in ps; prefer LOCKSTEP_RDZV_TOKEN);
                        etcd: protocol (http/https), cacert, cert, key (PEM
                        files; etcd-v2's ca_cert, ssl_cert, ssl_cert_key too),
                        etcd_prefix (default /lockstep-run).
  --standalone          Start a local standalone rendezvous on a free port; one node.
                        --rdzv_backend, --rdzv_endpoint, --nnodes are ignored.
  --fault_tolerant      A lost worker does not stop the others: they re-form a
                        smaller group and go on (workers run with --fault_tolerant,
                        trainers/fault_tolerant_rank.h), and only the lost worker
                        restarts, up to --max_restarts times per worker, joining
                        the running group. The agent of node 0 holds the workers'
                        store, so losing node 0 ends the job; another node's loss
                        shrinks the group by its ranks.
  --max_restarts MAX_RESTARTS
                        Maximum number of worker group restarts before failing
                        (--fault_tolerant: of each worker alone). (default 0)
  --monitor_interval MONITOR_INTERVAL
                        Interval, in seconds, to monitor the state of workers.
                        (default 5)
  --start_method {spawn,fork,forkserver}
                        Accepted for compatibility; workers are always exec'd.
  --role ROLE           User-defined role for the workers. (default default)
  -m, --module          Run the training script as a Python module (python -m).
  --no_python           Run the training program directly, found on PATH, without
                        a Python interpreter. (A program not ending in .py that is
                        an executable or has a #! line also runs directly.)
  --run_path            Accepted for compatibility: the script runs with Python.
  --log_dir LOG_DIR     Base directory for log files:
                        LOG_DIR/<rdzv_id>_<random>/attempt_<n>/<local_rank>/
                        {stdout,stderr}.log.
  -r REDIRECTS, --redirects REDIRECTS
                        Redirect std streams into a log file in the log directory
                        (e.g. [-r 3] redirects both stdout+stderr for all workers,
                        [-r 0:1,1:2] redirects stdout for local rank 0 and stderr
                        for local rank 1).
  -t TEE, --tee TEE     Tee std streams into a log file and also to console (see
                        --redirects for format).
  --node_rank NODE_RANK
                        Rank of the node for multi-node distributed training.
                        (default 0)
  --master_addr MASTER_ADDR
                        Address of the master node (rank 0): the static
                        rendezvous. (default 127.0.0.1)
  --master_port MASTER_PORT
                        Port of the static rendezvous on the master node. Workers
                        get a fresh free port as MASTER_PORT. (default 29500)

environment:
  LOCKSTEP_RDZV_TOKEN   join token of the rendezvous store (all agents the same);
                        a one-node job without one makes a random one; never
                        passed to the workers
  LOCKSTEP_REQUIRE_TOKEN=1
                        refuse to start a job of several nodes without a token
  LOCKSTEP_PYTHON       interpreter for .py scripts (default: python3 on PATH)
  LOCKSTEP_STOP_GRACE_SECONDS
                        seconds between SIGTERM and SIGKILL when the workers are
                        stopped (default 5)
  LOCKSTEP_SOCKET_ADDR, LOCKSTEP_SOCKET_IFNAME
                        this node's address as the other nodes reach it
)";
}

}  // namespace launch
}  // namespace lockstep
