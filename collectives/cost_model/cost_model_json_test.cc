#include "collectives/cost_model/cost_model_json.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace cost_model {
namespace {

CostModel Awkward() {
  CostModel model;
  model.link(LinkKind::kShm) = LinkCost{1.0 / 3, 1e-9};
  model.link(LinkKind::kTcpLocal) = LinkCost{7.77, 2.0 / 3e4};
  model.link(LinkKind::kTcpRemote) = LinkCost{123456.789, 0.1};
  model.link(LinkKind::kTcpRemote).window_bytes = 12345;
  model.gamma_us_per_byte = 3.0e-5 / 7;
  model.cpu_us_per_round = 37.714285714285715;
  model.fabric_us_per_byte = 1.0 / 1150;
  model.setup = SetupCost{1e6 / 3, 0, 99.5};
  return model;
}

void ExpectSame(const CostModel& a, const CostModel& b) {
  for (int k = 0; k < kNumLinkKinds; ++k) {
    EXPECT_EQ(a.links[k].alpha_us, b.links[k].alpha_us) << k;
    EXPECT_EQ(a.links[k].beta_us_per_byte, b.links[k].beta_us_per_byte) << k;
    EXPECT_EQ(a.links[k].window_bytes, b.links[k].window_bytes) << k;
  }
  EXPECT_EQ(a.gamma_us_per_byte, b.gamma_us_per_byte);
  EXPECT_EQ(a.cpu_us_per_round, b.cpu_us_per_round);
  EXPECT_EQ(a.fabric_us_per_byte, b.fabric_us_per_byte);
  EXPECT_EQ(a.setup.constant_us, b.setup.constant_us);
  EXPECT_EQ(a.setup.store_us_per_request, b.setup.store_us_per_request);
  EXPECT_EQ(a.setup.handshake_us, b.setup.handshake_us);
}

// DefaultCostModel's JSON with `from` replaced by `to` (which must occur).
std::string Edited(const std::string& from, const std::string& to) {
  std::string text = CostModelToJson(DefaultCostModel());
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from << " in " << text;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<CostModel> model = CostModelFromJson(text);
  EXPECT_FALSE(model.ok()) << text;
  return std::string(model.status().message());
}

TEST(CostModelJson, RoundTripsExactly) {
  for (const CostModel& model : {DefaultCostModel(), Awkward(), CostModel{}}) {
    absl::StatusOr<CostModel> back = CostModelFromJson(CostModelToJson(model, "lab run 3"));
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSame(model, *back);
  }
}

TEST(CostModelJson, WindowIsOptionalAndChecked) {
  // A calibration written before windows: no field, no window.
  std::string text = CostModelToJson(Awkward());
  const std::string field = ",\n      \"window_bytes\": 12345.0";
  const size_t at = text.find(field);
  ASSERT_NE(at, std::string::npos) << text;
  absl::StatusOr<CostModel> back = CostModelFromJson(std::string(text).erase(at, field.size()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->link(LinkKind::kTcpRemote).window_bytes, 0);
  text.replace(at, field.size(), ",\n      \"window_bytes\": -1");
  EXPECT_NE(ErrorOf(text).find("links.tcp_remote.window_bytes"), std::string::npos) << ErrorOf(text);
}

TEST(CostModelJson, FabricIsOptionalAndChecked) {
  // No field: a full-bisection network (0), and 0 is written as no field.
  EXPECT_EQ(CostModelToJson(DefaultCostModel()).find("fabric_us_per_byte"), std::string::npos);
  std::string text = CostModelToJson(Awkward());
  const std::string field = "\"fabric_us_per_byte\": ";
  const size_t at = text.find(field);
  ASSERT_NE(at, std::string::npos) << text;
  const size_t end = text.find(',', at);
  text.replace(at, end - at, field + "-0.5");
  EXPECT_NE(ErrorOf(text).find("fabric_us_per_byte"), std::string::npos) << ErrorOf(text);
}

TEST(CostModelJson, ErrorsNameTheField) {
  EXPECT_NE(ErrorOf(Edited("\"tcp_remote\": {\n      \"alpha_us\"", "\"tcp_remote\": {\n      \"alpah_us\""))
                .find("links.tcp_remote.alpah_us"),
            std::string::npos);
  std::string text = Edited("\"cpu_us_per_round\": 38.0", "\"cpu_us_per_round\": -1");
  EXPECT_NE(ErrorOf(text).find("cpu_us_per_round"), std::string::npos) << ErrorOf(text);
  text = Edited("\"cpu_us_per_round\": 38.0", "\"cpu_us_per_round\": \"fast\"");
  EXPECT_NE(ErrorOf(text).find("expected a number"), std::string::npos) << ErrorOf(text);
  text = Edited(",\n    \"handshake_us\": 100.0", "");
  EXPECT_NE(ErrorOf(text).find("missing field setup.handshake_us"), std::string::npos) << ErrorOf(text);
  text = Edited("\"handshake_us\": 100.0", "\"handshake\": 100.0");
  EXPECT_NE(ErrorOf(text).find("setup.handshake"), std::string::npos) << ErrorOf(text);
  text = Edited("\"version\": 1", "\"version\": 2");
  EXPECT_NE(ErrorOf(text).find("version"), std::string::npos) << ErrorOf(text);
  text = Edited("\"version\": 1,", "");
  EXPECT_NE(ErrorOf(text).find("missing field version"), std::string::npos) << ErrorOf(text);
  text = Edited("\"shm\"", "\"nvlink\"");
  EXPECT_NE(ErrorOf(text).find("links.nvlink"), std::string::npos) << ErrorOf(text);
  EXPECT_NE(ErrorOf("[1, 2]").find("object"), std::string::npos);
  EXPECT_NE(ErrorOf("{").find("not valid JSON"), std::string::npos);
}

TEST(CostModelJson, MissingFieldsAreNamed) {
  EXPECT_NE(ErrorOf(R"({"version": 1})").find("missing field links"), std::string::npos);
  const std::string text = R"({"version": 1, "links": {"shm": {"alpha_us": 1, "beta_us_per_byte": 0}}})";
  EXPECT_NE(ErrorOf(text).find("missing field links.tcp_local"), std::string::npos) << ErrorOf(text);
}

TEST(CostModelJson, SavesAndLoadsFiles) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/calib.json";
  ASSERT_TRUE(SaveCostModel(Awkward(), path, "a note").ok());
  absl::StatusOr<CostModel> back = LoadCostModel(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(Awkward(), *back);
  absl::StatusOr<CostModel> missing = LoadCostModel(path + ".nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  std::ofstream(path) << "{}";
  absl::StatusOr<CostModel> empty = LoadCostModel(path);
  EXPECT_NE(empty.status().message().find(path), std::string::npos) << empty.status();
  CostModel bad;
  bad.gamma_us_per_byte = -1;
  EXPECT_FALSE(SaveCostModel(bad, path).ok());
}

TEST(Points, ParseLinkAndSetupLines) {
  absl::StatusOr<LinkPoint> link = ParseLinkPoint(R"({"bytes": 4096, "time_us": 12.5, "rank": 0})");
  ASSERT_TRUE(link.ok()) << link.status();
  EXPECT_EQ(link->bytes, 4096);
  EXPECT_EQ(link->time_us, 12.5);
  EXPECT_NE(ParseLinkPoint(R"({"bytes": 4096})").status().message().find("time_us"), std::string::npos);
  EXPECT_FALSE(ParseLinkPoint("4096 12.5").ok());
  absl::StatusOr<SetupPoint> setup = ParseSetupPoint(R"({"p": 16, "ranks_per_host": 8, "time_us": 9000})");
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->topology.hosts, 2);
  EXPECT_EQ(setup->topology.cores_per_host, 8);
  EXPECT_EQ(setup->time_us, 9000);
  EXPECT_EQ(setup->connections, Connections::kOnDemand);
  setup = ParseSetupPoint(R"({"p": 16, "time_us": 9000, "connections": "full_mesh"})");
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->connections, Connections::kFullMesh);
  EXPECT_NE(ParseSetupPoint(R"({"p": 16, "time_us": 1, "connections": "mesh"})").status().message().find("connections"),
            std::string::npos);
  EXPECT_NE(ParseSetupPoint(R"({"p": 16, "ranks_per_host": 3, "time_us": 1})").status().message().find("divide"),
            std::string::npos);
  EXPECT_NE(ParseSetupPoint(R"({"p": 1.5, "time_us": 1})").status().message().find("field p"), std::string::npos);
}

}  // namespace
}  // namespace cost_model
}  // namespace lockstep
