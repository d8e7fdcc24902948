#include "collectives/cost_model/cost_model_json.h"

#include <fstream>
#include <initializer_list>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace cost_model {
namespace {

using Json = nlohmann::json;

constexpr LinkKind kKinds[] = {LinkKind::kShm, LinkKind::kTcpLocal, LinkKind::kTcpRemote};

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat("cost model JSON: ", what)); }

// Fails on a key of `object` outside `known`.
absl::Status OnlyKnown(const Json& object, const std::string& where, std::initializer_list<absl::string_view> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool found = false;
    for (absl::string_view k : known) found = found || k == it.key();
    if (!found) return Bad(absl::StrCat("unknown field ", where, it.key()));
  }
  return absl::OkStatus();
}

// object[key] as a number, or an error naming where + key.
absl::StatusOr<double> Number(const Json& object, const std::string& where, const std::string& key) {
  auto it = object.find(key);
  if (it == object.end()) return Bad(absl::StrCat("missing field ", where, key));
  if (!it->is_number()) return Bad(absl::StrCat("field ", where, key, " is ", it->dump(), "; expected a number"));
  return it->get<double>();
}

absl::StatusOr<const Json*> Object(const Json& object, const std::string& where, const std::string& key) {
  auto it = object.find(key);
  if (it == object.end()) return Bad(absl::StrCat("missing field ", where, key));
  if (!it->is_object()) return Bad(absl::StrCat("field ", where, key, " is ", it->dump(), "; expected an object"));
  return &*it;
}

absl::StatusOr<Json> ParseObject(absl::string_view text, absl::string_view what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(what, ": not valid JSON: '", text, "'"));
  if (!j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected a JSON object, got '", text, "'"));
  return j;
}

}  // namespace

std::string CostModelToJson(const CostModel& model, absl::string_view notes) {
  // Written in the order of the header's description (ordered_json), read in any.
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["version"] = kCostModelJsonVersion;
  nlohmann::ordered_json links = nlohmann::ordered_json::object();
  for (LinkKind kind : kKinds) {
    nlohmann::ordered_json link = nlohmann::ordered_json::object();
    link["alpha_us"] = model.link(kind).alpha_us;
    link["beta_us_per_byte"] = model.link(kind).beta_us_per_byte;
    if (model.link(kind).window_bytes > 0) link["window_bytes"] = model.link(kind).window_bytes;
    links[std::string(LinkKindName(kind))] = std::move(link);
  }
  j["links"] = std::move(links);
  j["gamma_us_per_byte"] = model.gamma_us_per_byte;
  j["cpu_us_per_round"] = model.cpu_us_per_round;
  if (model.fabric_us_per_byte > 0) j["fabric_us_per_byte"] = model.fabric_us_per_byte;
  nlohmann::ordered_json setup = nlohmann::ordered_json::object();
  setup["constant_us"] = model.setup.constant_us;
  setup["store_us_per_request"] = model.setup.store_us_per_request;
  setup["handshake_us"] = model.setup.handshake_us;
  setup["store_us_per_value"] = model.setup.store_us_per_value;
  j["setup"] = std::move(setup);
  if (!notes.empty()) j["notes"] = std::string(notes);
  return j.dump(2) + "\n";
}

absl::StatusOr<CostModel> CostModelFromJson(absl::string_view text) {
  const Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("the text is not valid JSON");
  if (!j.is_object()) return Bad("expected an object at the top");
  absl::Status s = OnlyKnown(
      j, "", {"version", "links", "gamma_us_per_byte", "cpu_us_per_round", "fabric_us_per_byte", "setup", "notes"});
  if (!s.ok()) return s;
  auto version = j.find("version");
  if (version == j.end()) return Bad("missing field version");
  if (!version->is_number_integer() || version->get<int64_t>() != kCostModelJsonVersion) {
    return Bad(
        absl::StrCat("field version is ", version->dump(), "; this build reads version ", kCostModelJsonVersion));
  }
  if (j.contains("notes") && !j["notes"].is_string()) return Bad("field notes must be a string");
  CostModel model;
  absl::StatusOr<const Json*> links = Object(j, "", "links");
  if (!links.ok()) return links.status();
  s = OnlyKnown(**links, "links.", {"shm", "tcp_local", "tcp_remote"});
  if (!s.ok()) return s;
  for (LinkKind kind : kKinds) {
    const std::string where = absl::StrCat("links.", LinkKindName(kind), ".");
    absl::StatusOr<const Json*> link = Object(**links, "links.", std::string(LinkKindName(kind)));
    if (!link.ok()) return link.status();
    s = OnlyKnown(**link, where, {"alpha_us", "beta_us_per_byte", "window_bytes"});
    if (!s.ok()) return s;
    absl::StatusOr<double> alpha = Number(**link, where, "alpha_us");
    if (!alpha.ok()) return alpha.status();
    absl::StatusOr<double> beta = Number(**link, where, "beta_us_per_byte");
    if (!beta.ok()) return beta.status();
    model.link(kind) = LinkCost{*alpha, *beta};
    if ((*link)->contains("window_bytes")) {  // optional: absent, no window
      absl::StatusOr<double> window = Number(**link, where, "window_bytes");
      if (!window.ok()) return window.status();
      model.link(kind).window_bytes = *window;
    }
  }
  absl::StatusOr<double> gamma = Number(j, "", "gamma_us_per_byte");
  if (!gamma.ok()) return gamma.status();
  model.gamma_us_per_byte = *gamma;
  absl::StatusOr<double> cpu = Number(j, "", "cpu_us_per_round");
  if (!cpu.ok()) return cpu.status();
  model.cpu_us_per_round = *cpu;
  if (j.contains("fabric_us_per_byte")) {  // optional: absent, a full-bisection network
    absl::StatusOr<double> fabric = Number(j, "", "fabric_us_per_byte");
    if (!fabric.ok()) return fabric.status();
    model.fabric_us_per_byte = *fabric;
  }
  absl::StatusOr<const Json*> setup = Object(j, "", "setup");
  if (!setup.ok()) return setup.status();
  s = OnlyKnown(**setup, "setup.", {"constant_us", "store_us_per_request", "handshake_us", "store_us_per_value"});
  if (!s.ok()) return s;
  if ((*setup)->contains("store_us_per_value")) {  // optional: absent in calibrations before MULTI_GET
    absl::StatusOr<double> v = Number(**setup, "setup.", "store_us_per_value");
    if (!v.ok()) return v.status();
    model.setup.store_us_per_value = *v;
  }
  for (auto [key, field] : {std::pair<const char*, double*>{"constant_us", &model.setup.constant_us},
                            {"store_us_per_request", &model.setup.store_us_per_request},
                            {"handshake_us", &model.setup.handshake_us}}) {
    absl::StatusOr<double> v = Number(**setup, "setup.", key);
    if (!v.ok()) return v.status();
    *field = *v;
  }
  s = ValidateCostModel(model);
  if (!s.ok()) return Bad(s.message());
  return model;
}

absl::StatusOr<CostModel> LoadCostModel(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the calibration ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<CostModel> model = CostModelFromJson(text.str());
  if (!model.ok()) return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
  return model;
}

absl::Status SaveCostModel(const CostModel& model, const std::string& path, absl::string_view notes) {
  absl::Status valid = ValidateCostModel(model);
  if (!valid.ok()) return valid;
  std::ofstream out(path, std::ios::trunc);
  if (out) out << CostModelToJson(model, notes);
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write the calibration ", path));
  return absl::OkStatus();
}

absl::StatusOr<LinkPoint> ParseLinkPoint(absl::string_view line) {
  absl::StatusOr<Json> j = ParseObject(line, "link point");
  if (!j.ok()) return j.status();
  LinkPoint point;
  for (auto [key, field] : {std::pair<const char*, double*>{"bytes", &point.bytes}, {"time_us", &point.time_us}}) {
    auto it = j->find(key);
    if (it == j->end() || !it->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("link point: field ", key, " is missing or not a number in '",
                                                     line, "'; expected {\"bytes\": B, \"time_us\": T}"));
    }
    *field = it->get<double>();
  }
  return point;
}

absl::StatusOr<SetupPoint> ParseSetupPoint(absl::string_view line) {
  absl::StatusOr<Json> j = ParseObject(line, "setup point");
  if (!j.ok()) return j.status();
  auto integer = [&](const char* key, bool required, int64_t fallback) -> absl::StatusOr<int64_t> {
    auto it = j->find(key);
    if (it == j->end() && !required) return fallback;
    if (it == j->end() || !it->is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("setup point: field ", key, " is missing or not an integer in '", line, "'"));
    }
    return it->get<int64_t>();
  };
  absl::StatusOr<int64_t> p = integer("p", true, 0);
  if (!p.ok()) return p.status();
  absl::StatusOr<int64_t> per_host = integer("ranks_per_host", false, 1);
  if (!per_host.ok()) return per_host.status();
  absl::StatusOr<int64_t> cores = integer("cores_per_host", false, 0);
  if (!cores.ok()) return cores.status();
  if (*cores < 0 || *cores > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("setup point: cores_per_host is ", *cores, " in '", line, "'"));
  }
  absl::StatusOr<Topology> topology = MakeTopology(*p, *per_host, static_cast<int>(*cores));
  if (!topology.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("setup point '", line, "': ", topology.status().message()));
  }
  auto time = j->find("time_us");
  if (time == j->end() || !time->is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat("setup point: field time_us is missing or not a number in '", line, "'"));
  }
  Connections connections = Connections::kOnDemand;
  if (auto c = j->find("connections"); c != j->end()) {
    if (*c == "full_mesh") {
      connections = Connections::kFullMesh;
    } else if (*c != "on_demand") {
      return absl::InvalidArgumentError(
          absl::StrCat("setup point: field connections is not \"on_demand\" or \"full_mesh\" in '", line, "'"));
    }
  }
  return SetupPoint{*topology, time->get<double>(), connections};
}

}  // namespace cost_model
}  // namespace lockstep
