#include "tools/scale_lab/delay_link_flags.h"

#include <gtest/gtest.h>

namespace lockstep {
namespace scale_lab {
namespace {

TEST(ParseRateBps, TcUnits) {
  EXPECT_EQ(*ParseRateBps("1gbit"), 1'000'000'000);
  EXPECT_EQ(*ParseRateBps("2.5Gbit"), 2'500'000'000);
  EXPECT_EQ(*ParseRateBps("100mbit"), 100'000'000);
  EXPECT_EQ(*ParseRateBps("800kbit"), 800'000);
  EXPECT_EQ(*ParseRateBps("9600bit"), 9600);
  EXPECT_EQ(*ParseRateBps("1e9"), 1'000'000'000);
  EXPECT_EQ(*ParseRateBps("0"), 0);
}

TEST(ParseRateBps, Refused) {
  EXPECT_FALSE(ParseRateBps("").ok());
  EXPECT_FALSE(ParseRateBps("fast").ok());
  EXPECT_FALSE(ParseRateBps("-1gbit").ok());
  EXPECT_FALSE(ParseRateBps("100mbps").ok());  // bytes: ambiguous
  EXPECT_FALSE(ParseRateBps("100tbit").ok());
}

TEST(ParseDelayLinkFlags, Defaults) {
  auto flags = ParseDelayLinkFlags({"--netns=a,b,c", "--delay_us=2000"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->netns, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(flags->delay_ns, 2'000'000);
  EXPECT_EQ(flags->rate_bps, 0);
  EXPECT_EQ(flags->mtu, 65000);
  EXPECT_EQ(flags->ifname, "lab0");
  EXPECT_EQ(flags->subnet, (10u << 24) | (77u << 16));
  EXPECT_EQ(flags->spin_ns, 20'000);
  EXPECT_EQ(flags->buffers, 1032);  // 64 MiB / 65000
  EXPECT_EQ(flags->realtime_priority, 50);
  EXPECT_FALSE(flags->selftest);
  EXPECT_FALSE(flags->busy_poll);
}

TEST(ParseDelayLinkFlags, Everything) {
  auto flags = ParseDelayLinkFlags({"--netns=x,y", "--delay_us=50.5", "--rate=1gbit", "--mtu=1500", "--ifname=lab7",
                                    "--subnet=10.99", "--stats_json=/tmp/s.json", "--ready_file=/tmp/r",
                                    "--stats_every_s=1", "--spin_us=0", "--busy_poll", "--buffers=64",
                                    "--realtime_priority=0", "--selftest", "--selftest_s=2"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->delay_ns, 50'500);
  EXPECT_EQ(flags->rate_bps, 1'000'000'000);
  EXPECT_EQ(flags->mtu, 1500);
  EXPECT_EQ(flags->ifname, "lab7");
  EXPECT_EQ(flags->subnet, (10u << 24) | (99u << 16));
  EXPECT_EQ(flags->stats_json, "/tmp/s.json");
  EXPECT_EQ(flags->ready_file, "/tmp/r");
  EXPECT_EQ(flags->stats_every_s, 1);
  EXPECT_EQ(flags->spin_ns, 0);
  EXPECT_TRUE(flags->busy_poll);
  EXPECT_EQ(flags->buffers, 64);
  EXPECT_EQ(flags->realtime_priority, 0);
  EXPECT_TRUE(flags->selftest);
  EXPECT_EQ(flags->selftest_s, 2);
}

TEST(ParseDelayLinkFlags, SmallMtuGetsMoreBuffers) {
  auto flags = ParseDelayLinkFlags({"--netns=a,b", "--delay_us=1", "--mtu=1500"});
  ASSERT_TRUE(flags.ok());
  EXPECT_EQ(flags->buffers, (64 << 20) / 1500);
}

TEST(ParseDelayLinkFlags, Errors) {
  EXPECT_FALSE(ParseDelayLinkFlags({"--delay_us=1"}).ok());                    // no netns
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a", "--delay_us=1"}).ok());       // one host
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,a", "--delay_us=1"}).ok());     // twice
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,../b", "--delay_us=1"}).ok());  // a path
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,b"}).ok());                     // no delay
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,b", "--delay_us=-1"}).ok());
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,b", "--delay_us=1", "--mtu=70000"}).ok());
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,b", "--delay_us=1", "--subnet=10"}).ok());
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,b", "--delay_us=1", "--subnet=10.300"}).ok());
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,b", "--delay_us=1", "--ifname=waytoolongname16"}).ok());
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,b", "--delay_us=1", "--bogus=1"}).ok());
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,b", "--delay_us"}).ok());
  EXPECT_FALSE(ParseDelayLinkFlags({"--netns=a,b", "--delay_us=1", "stray"}).ok());
  auto status = ParseDelayLinkFlags({"--netns=a,b", "--delay_us=1", "--rate=fast"}).status();
  EXPECT_NE(status.message().find("--rate=fast"), std::string::npos) << status;
}

TEST(ParseDelayLinkFlags, Help) {
  auto flags = ParseDelayLinkFlags({"--help"});
  ASSERT_TRUE(flags.ok());
  EXPECT_TRUE(flags->help);
}

}  // namespace
}  // namespace scale_lab
}  // namespace lockstep
