#include "collectives/bootstrap/local_launch.h"

#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(LocalLaunchTest, EveryRankGetsTorchrunsEnvironment) {
  LocalLaunchOptions o;
  o.nproc = 3;
  o.argv = {"/bin/sh", "-c",
            "test \"$WORLD_SIZE\" = 3 && test \"$LOCAL_WORLD_SIZE\" = 3 && "
            "test \"$RANK\" = \"$LOCAL_RANK\" && test \"$RANK\" -ge 0 && test \"$RANK\" -lt 3 && "
            "test \"$MASTER_ADDR\" = 127.0.0.1 && test \"$MASTER_PORT\" -gt 0 && "
            "test \"$TORCHELASTIC_USE_AGENT_STORE\" = True && "
            "test ${#LOCKSTEP_STORE_TOKEN} -eq 32"};
  const absl::Status s = RunLocalRanks(o);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(LocalLaunchTest, AFailingRankStopsTheOthers) {
  LocalLaunchOptions o;
  o.nproc = 2;
  o.name = "test";
  // Rank 0 would run for ten minutes (a hung peer); rank 1 fails at once.
  o.argv = {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; exec sleep 600"};
  const absl::Status s = RunLocalRanks(o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 exited with code 3"), std::string::npos) << s;
}

TEST(LocalLaunchTest, BadOptionsAreErrors) {
  EXPECT_FALSE(RunLocalRanks({0, {"/bin/true"}}).ok());
  EXPECT_FALSE(RunLocalRanks({1, {}}).ok());
  EXPECT_EQ(RandomStoreToken().size(), 32u);
  EXPECT_NE(RandomStoreToken(), RandomStoreToken());
}

}  // namespace
}  // namespace lockstep
