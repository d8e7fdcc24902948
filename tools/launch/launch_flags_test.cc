#include "tools/launch/launch_flags.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/launch/worker_command.h"

namespace lockstep {
namespace launch {
namespace {

using std::chrono::milliseconds;

GetEnvFn Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

absl::StatusOr<LaunchFlags> Parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  return ParseLaunchFlags(args, Env(std::move(env)));
}

TEST(LaunchFlagsTest, DefaultsAreTorchrun113s) {
  absl::StatusOr<LaunchFlags> f = Parse({"train"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->min_nodes, 1);
  EXPECT_EQ(f->max_nodes, 1);
  EXPECT_EQ(f->nproc_per_node, "1");
  EXPECT_EQ(f->node_rank, 0);
  EXPECT_EQ(f->master_addr, "127.0.0.1");
  EXPECT_EQ(f->master_port, 29500);
  EXPECT_EQ(f->rdzv_backend, "static");
  EXPECT_EQ(f->rdzv_id, "none");
  EXPECT_EQ(f->max_restarts, 0);
  EXPECT_EQ(f->monitor_interval_s, 5);
  EXPECT_EQ(f->role, "default");
  EXPECT_FALSE(f->standalone || f->module || f->no_python);
  EXPECT_EQ(f->program, "train");
}

TEST(LaunchFlagsTest, UnderscoreDashAndEqualsSpellings) {
  absl::StatusOr<LaunchFlags> f =
      Parse({"--nproc_per_node", "4", "--node-rank=1", "--nnodes=2", "--master-addr", "10.0.0.1", "--master_port=1234",
             "--max-restarts", "3", "--monitor_interval=0.5", "--rdzv-id", "job", "--role=trainer", "-r", "3",
             "-t0:1,1:2", "--log-dir=/tmp/x", "--no-python", "prog"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->nproc_per_node, "4");
  EXPECT_EQ(f->node_rank, 1);
  EXPECT_EQ(f->max_nodes, 2);
  EXPECT_EQ(f->master_addr, "10.0.0.1");
  EXPECT_EQ(f->master_port, 1234);
  EXPECT_EQ(f->max_restarts, 3);
  EXPECT_EQ(f->monitor_interval_s, 0.5);
  EXPECT_EQ(f->rdzv_id, "job");
  EXPECT_EQ(f->role, "trainer");
  EXPECT_EQ(f->redirects.For(5), kStdAll);
  EXPECT_EQ(f->tee.For(0), kStdOut);
  EXPECT_EQ(f->tee.For(1), kStdErr);
  EXPECT_EQ(f->tee.For(2), kStdNone);
  EXPECT_EQ(f->log_dir, "/tmp/x");
  EXPECT_TRUE(f->no_python);
}

TEST(LaunchFlagsTest, EverythingAfterTheProgramIsTheProgramsUntouched) {
  absl::StatusOr<LaunchFlags> f = Parse({"--nproc_per_node=2", "train.py", "--nproc_per_node", "9", "--bogus", "-m"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->nproc_per_node, "2");
  EXPECT_EQ(f->program, "train.py");
  EXPECT_EQ(f->program_args, (std::vector<std::string>{"--nproc_per_node", "9", "--bogus", "-m"}));
  f = Parse({"--", "-weird-name", "x"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->program, "-weird-name");
  EXPECT_EQ(f->program_args, (std::vector<std::string>{"x"}));
}

TEST(LaunchFlagsTest, UniquePrefixesAbbreviateAsArgparse) {
  absl::StatusOr<LaunchFlags> f = Parse({"--nproc", "3", "--standal", "p"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->nproc_per_node, "3");
  EXPECT_TRUE(f->standalone);
  f = Parse({"--rdzv", "x", "p"});  // rdzv_backend, rdzv_endpoint, ...
  EXPECT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("ambiguous flag '--rdzv'"), std::string::npos) << f.status();
}

TEST(LaunchFlagsTest, PetEnvironmentGivesDefaultsTheCommandLineOverrides) {
  absl::StatusOr<LaunchFlags> f = Parse({"--node_rank", "1", "p"}, {{"PET_NPROC_PER_NODE", "3"},
                                                                    {"PET_NNODES", "2"},
                                                                    {"PET_NODE_RANK", "0"},
                                                                    {"PET_MASTER_ADDR", "h0"},
                                                                    {"PET_NO_PYTHON", "1"},
                                                                    {"PET_MAX_RESTARTS", "4"}});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->nproc_per_node, "3");
  EXPECT_EQ(f->max_nodes, 2);
  EXPECT_EQ(f->node_rank, 1);
  EXPECT_EQ(f->master_addr, "h0");
  EXPECT_TRUE(f->no_python);
  EXPECT_EQ(f->max_restarts, 4);
  f = Parse({"p"}, {{"PET_MASTER_PORT", "http"}});
  EXPECT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("PET_MASTER_PORT"), std::string::npos) << f.status();
}

TEST(LaunchFlagsTest, NnodesMinMax) {
  absl::StatusOr<LaunchFlags> f = Parse({"--nnodes", "2:4", "--rdzv_backend", "c10d", "p"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->min_nodes, 2);
  EXPECT_EQ(f->max_nodes, 4);
  EXPECT_FALSE(Parse({"--nnodes", "4:2", "--rdzv_backend", "c10d", "p"}).ok());
  EXPECT_FALSE(Parse({"--nnodes", "1:2:3", "p"}).ok());
  EXPECT_FALSE(Parse({"--nnodes", "0", "p"}).ok());
  f = Parse({"--nnodes", "1:2", "p"});  // static cannot be elastic.
  EXPECT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("--rdzv_backend c10d"), std::string::npos) << f.status();
}

TEST(LaunchFlagsTest, BadInputNamesTheFlagAndPointsAtHelp) {
  absl::StatusOr<LaunchFlags> f = Parse({"--bogus", "1", "p"});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "lockstep-run: unknown flag '--bogus'; see lockstep-run --help for the flags (torchrun's)");
  f = Parse({"--nnodes", "2", "--node_rank", "2", "p"});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "lockstep-run: --node_rank: 2 is not below --nnodes 2; node ranks are 0..1; see lockstep-run --help");
  EXPECT_FALSE(Parse({"--nproc_per_node"}).ok());     // Value missing.
  EXPECT_FALSE(Parse({"--standalone=1", "p"}).ok());  // A switch takes none.
  f = Parse({"--rdzv_backend", "zookeeper", "p"});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("use static, c10d, etcd or etcd-v2"), std::string::npos) << f.status();
  EXPECT_FALSE(Parse({"--monitor_interval", "0", "p"}).ok());
  EXPECT_FALSE(Parse({"--redirects", "4", "p"}).ok());
  EXPECT_FALSE(Parse({"--tee", "0:x", "p"}).ok());
  EXPECT_FALSE(Parse({"--master_port", "70000", "p"}).ok());
  f = Parse({"--nproc_per_node", "2"});
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("no training program"), std::string::npos);
  EXPECT_TRUE(Parse({"--help"})->help);
  EXPECT_TRUE(Parse({"-h"})->help);
}

TEST(LaunchFlagsTest, StandaloneIsOneNodeC10dOnAFreePort) {
  absl::StatusOr<LaunchFlags> f = Parse({"--standalone", "--nnodes", "3", "--rdzv_backend", "static", "p"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->rdzv_backend, "c10d");
  EXPECT_EQ(f->max_nodes, 1);
  std::vector<std::string> warnings;
  absl::StatusOr<RendezvousSettings> r = ResolveRendezvous(*f, Env({}), &warnings);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->host, "127.0.0.1");
  EXPECT_EQ(r->port, 0);
}

// etcd: torchrun's names (etcd and etcd-v2, both conf spellings of the TLS
// files), several endpoints, port 2379 by default, https once a CA or a
// client certificate is given; bad values name the key.
TEST(RendezvousSettingsTest, Etcd) {
  char ca[] = "/tmp/launch_flags_test_ca.XXXXXX";
  const int fd = ::mkstemp(ca);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::vector<std::string> warnings;
  LaunchFlags f =
      *Parse({"--nnodes", "1:4", "--rdzv_backend", "etcd-v2", "--rdzv_endpoint", "e0, e1:2380,[fd00::1]:2381",
              "--rdzv_conf", absl::StrCat("ca_cert=", ca, ",etcd_prefix=/jobs/"), "p"});
  absl::StatusOr<RendezvousSettings> r = ResolveRendezvous(f, Env({}), &warnings);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->backend, "etcd");
  EXPECT_EQ(r->etcd_endpoints, (std::vector<std::string>{"e0:2379", "e1:2380", "[fd00::1]:2381"}));
  EXPECT_EQ(r->host, "e0");
  EXPECT_EQ(r->port, 2379);
  EXPECT_EQ(r->etcd_protocol, "https");
  EXPECT_EQ(r->etcd_ca_cert, ca);
  EXPECT_EQ(r->etcd_prefix, "/jobs");
  EXPECT_TRUE(warnings.empty());

  f = *Parse({"--rdzv_backend", "etcd", "--rdzv_endpoint", "e0", "--rdzv_conf", "cert=/nonexistent.pem", "p"});
  r = ResolveRendezvous(f, Env({}), &warnings);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cert=/nonexistent.pem cannot be read"), std::string::npos) << r.status();
  f = *Parse({"--rdzv_backend", "etcd", "--rdzv_endpoint", "e0", "--rdzv_conf", absl::StrCat("cert=", ca), "p"});
  r = ResolveRendezvous(f, Env({}), &warnings);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("give both or neither"), std::string::npos) << r.status();
  f = *Parse({"--rdzv_backend", "etcd", "--rdzv_endpoint", "e0", "--rdzv_conf", "protocol=ftp", "p"});
  EXPECT_FALSE(ResolveRendezvous(f, Env({}), &warnings).ok());
  f = *Parse({"--rdzv_backend", "etcd", "--rdzv_endpoint", "e0", "--rdzv_conf", "etcd_prefix=jobs", "p"});
  EXPECT_FALSE(ResolveRendezvous(f, Env({}), &warnings).ok());
  f = *Parse({"--rdzv_backend", "etcd", "p"});
  r = ResolveRendezvous(f, Env({}), &warnings);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("etcd needs one"), std::string::npos) << r.status();
  f = *Parse({"--rdzv_backend", "etcd", "--rdzv_endpoint", "http://e0:2379", "p"});
  EXPECT_FALSE(ResolveRendezvous(f, Env({}), &warnings).ok());  // host[:port], not a URL.
  ::unlink(ca);
}

TEST(LaunchFlagsTest, NprocPerNode) {
  EXPECT_EQ(*ResolveNprocPerNode("3", 8, 0), 3);
  EXPECT_EQ(*ResolveNprocPerNode("cpu", 8, 2), 8);
  EXPECT_EQ(*ResolveNprocPerNode("gpu", 8, 2), 2);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 8, 2), 2);
  EXPECT_EQ(*ResolveNprocPerNode("auto", 8, 0), 8);
  EXPECT_FALSE(ResolveNprocPerNode("gpu", 8, 0).ok());
  EXPECT_FALSE(ResolveNprocPerNode("0", 8, 0).ok());
  EXPECT_FALSE(ResolveNprocPerNode("many", 8, 0).ok());
}

TEST(RendezvousSettingsTest, EndpointsConfAndTokens) {
  std::vector<std::string> warnings;
  LaunchFlags f = *Parse({"--master_addr", "h0", "--master_port", "4000", "p"});
  RendezvousSettings r = *ResolveRendezvous(f, Env({}), &warnings);
  EXPECT_EQ(r.backend, "static");
  EXPECT_EQ(r.host, "h0");
  EXPECT_EQ(r.port, 4000);
  EXPECT_EQ(r.join_timeout, milliseconds(900000));
  EXPECT_EQ(r.last_call_timeout, milliseconds(30000));
  EXPECT_EQ(r.token, "");

  f = *Parse({"--rdzv_backend", "c10d", "--rdzv_endpoint", "node0", "--rdzv_conf",
              "timeout=2.5, last_call_timeout=1,read_timeout=7,heartbeat_timeout=4,is_host=false,color=blue", "p"});
  r = *ResolveRendezvous(f, Env({{"LOCKSTEP_RDZV_TOKEN", "envtoken"}}), &warnings);
  EXPECT_EQ(r.host, "node0");
  EXPECT_EQ(r.port, 29400);
  EXPECT_EQ(r.join_timeout, milliseconds(2500));
  EXPECT_EQ(r.last_call_timeout, milliseconds(1000));
  EXPECT_EQ(r.read_timeout, milliseconds(7000));
  EXPECT_EQ(r.heartbeat_timeout, milliseconds(4000));
  EXPECT_EQ(r.is_host, std::optional<bool>(false));
  EXPECT_EQ(r.token, "envtoken");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("unknown key 'color'"), std::string::npos);

  f = *Parse({"--rdzv_backend", "c10d", "--rdzv_endpoint", "[::1]:5000", "--rdzv_conf", "join_token=s3", "p"});
  warnings.clear();
  r = *ResolveRendezvous(f, Env({{"LOCKSTEP_RDZV_TOKEN", "envtoken"}}), &warnings);
  EXPECT_EQ(r.host, "::1");
  EXPECT_EQ(r.port, 5000);
  EXPECT_EQ(r.token, "s3");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("visible to every user in ps"), std::string::npos);

  const std::string file = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") + "/token";
  std::ofstream(file) << "filetoken\n";
  f = *Parse({"--rdzv_conf", "join_token_file=" + file, "p"});
  EXPECT_EQ(ResolveRendezvous(f, Env({}), &warnings)->token, "filetoken");
  f = *Parse({"--rdzv_conf", "join_token_file=/nonexistent/t", "p"});
  EXPECT_FALSE(ResolveRendezvous(f, Env({}), &warnings).ok());

  f = *Parse({"--rdzv_backend", "c10d", "p"});
  EXPECT_FALSE(ResolveRendezvous(f, Env({}), &warnings).ok());  // c10d needs an endpoint.
  f = *Parse({"--rdzv_conf", "timeout=soon", "p"});
  EXPECT_FALSE(ResolveRendezvous(f, Env({}), &warnings).ok());
  EXPECT_FALSE(Parse({"--rdzv_conf", "novalue", "p"}).ok());
}

TEST(WorkerCommandTest, PythonScriptsModulesAndExecutables) {
  const std::string dir = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  const std::string python = dir + "/mypython";
  std::ofstream(python) << "#!/bin/sh\n";
  chmod(python.c_str(), 0755);
  const std::string script = dir + "/train.py";
  std::ofstream(script) << "print(1)\n";
  const GetEnvFn env = Env({{"LOCKSTEP_PYTHON", python}, {"PATH", "/usr/bin:/bin"}});

  absl::StatusOr<std::vector<std::string>> argv = WorkerCommand(*Parse({script, "--lr", "1"}), env);
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_EQ(*argv, (std::vector<std::string>{python, "-u", script, "--lr", "1"}));
  argv = WorkerCommand(*Parse({"-m", "pkg.train", "x"}), env);
  EXPECT_EQ(*argv, (std::vector<std::string>{python, "-u", "-m", "pkg.train", "x"}));
  argv = WorkerCommand(*Parse({"--no_python", "true", "x"}), env);  // Found on PATH.
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_EQ(argv->back(), "x");
  EXPECT_TRUE(argv->front() == "/usr/bin/true" || argv->front() == "/bin/true") << argv->front();
  argv = WorkerCommand(*Parse({python}), env);  // An executable runs directly.
  EXPECT_EQ(*argv, (std::vector<std::string>{python}));

  argv = WorkerCommand(*Parse({"--no_python", "no-such-program-xyz"}), env);
  EXPECT_EQ(argv.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(argv.status().message().find("'no-such-program-xyz' is not found on PATH"), std::string::npos);
  argv = WorkerCommand(*Parse({dir + "/missing.py"}), env);
  EXPECT_EQ(argv.status().code(), absl::StatusCode::kNotFound);
  const std::string noexec = dir + "/noexec";
  std::ofstream(noexec) << "#!/bin/sh\n";
  chmod(noexec.c_str(), 0644);
  argv = WorkerCommand(*Parse({noexec}), env);
  EXPECT_EQ(argv.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(argv.status().message().find("is not executable"), std::string::npos);
  argv = WorkerCommand(*Parse({script}), Env({{"LOCKSTEP_PYTHON", "/nonexistent/python"}}));
  EXPECT_NE(argv.status().message().find("LOCKSTEP_PYTHON"), std::string::npos) << argv.status();
}

}  // namespace
}  // namespace launch
}  // namespace lockstep
