#include "fsdp/sharded_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {
namespace {

constexpr char kPrefix[] = "shard-";
constexpr char kSuffix[] = ".safetensors";
constexpr char kMarker[] = "lockstep.fsdp_shard";
constexpr char kWorldKey[] = "fsdp.world_size";
constexpr char kRankKey[] = "fsdp.rank";
constexpr char kSaveIdKey[] = "fsdp.save_id";
constexpr char kUnitsKey[] = "fsdp.units";
constexpr char kOptimizerKey[] = "optimizer.type";
constexpr char kOptimizerPrefix[] = "optimizer/";
constexpr char kBufferPrefix[] = "buffer/";
// Listed files are never followed: only regular files are read.
const SafetensorsReadOptions kNoSymlinks = {/*follow_symlinks=*/false};

std::string ShardPath(const std::string& dir, int rank, int world) {
  return absl::StrFormat("%s/%s%d-of-%d%s", dir, kPrefix, rank, world, kSuffix);
}

std::string UnitKey(size_t u, const char* what) { return absl::StrCat("fsdp.unit.", u, ".", what); }

std::string FlatName(const std::string& path) { return path.empty() ? "flat_param" : path + ".flat_param"; }

// A regular file named shard-<r>-of-<w>.safetensors.
struct Found {
  int rank = 0;
  int world = 0;
  std::string path;
};

absl::StatusOr<std::vector<Found>> FindShards(const std::string& dir) {
  std::vector<Found> found;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat("LoadShardedCheckpoint: cannot list ", dir, ": ", ec.message(),
                                            "; is it a checkpoint directory?"));
  }
  for (std::filesystem::directory_iterator end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    absl::string_view middle = name;
    if (!absl::ConsumePrefix(&middle, kPrefix) || !absl::ConsumeSuffix(&middle, kSuffix)) continue;
    std::vector<std::string> parts = absl::StrSplit(middle, "-of-");
    Found f;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &f.rank) || !absl::SimpleAtoi(parts[1], &f.world)) continue;
    std::error_code type_ec;
    if (it->symlink_status(type_ec).type() != std::filesystem::file_type::regular) {
      return absl::FailedPreconditionError(absl::StrCat("LoadShardedCheckpoint: ", it->path().string(),
                                                        " is not a regular file (a symbolic link, FIFO, directory "
                                                        "or device; not opened): remove it or load another "
                                                        "directory"));
    }
    f.path = it->path().string();
    found.push_back(std::move(f));
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.rank < b.rank; });
  return found;
}

// One unit as a checkpoint describes it.
struct SavedUnit {
  std::string path;
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  FlatShardLayout layout;
};

absl::StatusOr<std::vector<SavedUnit>> ParseUnits(const std::map<std::string, std::string>& md, int world,
                                                  const std::string& source) {
  auto get = [&](const std::string& key) -> absl::StatusOr<std::string> {
    auto it = md.find(key);
    if (it == md.end()) {
      return absl::DataLossError(absl::StrCat("LoadShardedCheckpoint: ", source, " has no '", key, "' metadata"));
    }
    return it->second;
  };
  LOCKSTEP_ASSIGN_OR_RETURN(const std::string count_text, get(kUnitsKey));
  size_t count = 0;
  if (!absl::SimpleAtoi(count_text, &count) || count > 1000000) {
    return absl::DataLossError(absl::StrCat("LoadShardedCheckpoint: ", source, ": '", kUnitsKey, "' is '", count_text,
                                            "', expected a unit count"));
  }
  std::vector<SavedUnit> units(count);
  for (size_t u = 0; u < count; ++u) {
    SavedUnit& unit = units[u];
    LOCKSTEP_ASSIGN_OR_RETURN(unit.path, get(UnitKey(u, "path")));
    LOCKSTEP_ASSIGN_OR_RETURN(const std::string names, get(UnitKey(u, "names")));
    LOCKSTEP_ASSIGN_OR_RETURN(const std::string shapes, get(UnitKey(u, "shapes")));
    if (!names.empty()) unit.names = absl::StrSplit(names, '\n');
    std::vector<std::string> shape_texts;
    if (!names.empty()) shape_texts = absl::StrSplit(shapes, '\n');
    if (shape_texts.size() != unit.names.size()) {
      return absl::DataLossError(absl::StrCat("LoadShardedCheckpoint: ", source, ": unit ", u, " has ",
                                              unit.names.size(), " names but ", shape_texts.size(), " shapes"));
    }
    std::vector<int64_t> numels;
    for (const std::string& text : shape_texts) {
      Shape shape;
      int64_t numel = 1;
      for (absl::string_view d : absl::StrSplit(text, 'x', absl::SkipEmpty())) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(d, &v) || v < 0 || (v > 0 && numel > (int64_t{1} << 40) / v)) {
          return absl::DataLossError(
              absl::StrCat("LoadShardedCheckpoint: ", source, ": unit ", u, " shape '", text, "' is not a shape"));
        }
        shape.push_back(v);
        numel *= v;
      }
      unit.shapes.push_back(shape);
      numels.push_back(numel);
    }
    unit.layout = FlatShardLayout::Make(numels, world);
  }
  return units;
}

// The saved tensors of one file, by name.
using TensorsByName = std::map<std::string, Tensor>;

// Copies `count` elements of a saved unit's flat buffer from `begin` on
// into `dst`, from the files (by old rank) that hold them.
absl::Status CopySaved(const SavedUnit& unit, const std::string& name, int64_t begin, int64_t count,
                       const std::map<int, TensorsByName>& files, float* dst) {
  const int64_t s = unit.layout.shard;
  while (count > 0) {
    const int old_rank = static_cast<int>(begin / s);
    const int64_t within = begin - old_rank * s;
    const int64_t n = std::min(count, s - within);
    const Tensor& t = files.at(old_rank).at(name);
    std::memcpy(dst, t.data<float>() + within, static_cast<size_t>(n) * sizeof(float));
    dst += n;
    begin += n;
    count -= n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveShardedCheckpoint(const std::string& dir, ShardView& fsdp, ShardedOptimizer* optimizer,
                                   const std::vector<NamedTensor>& buffers,
                                   const std::map<std::string, std::string>& metadata) {
  Communicator& comm = fsdp.comm();
  const int rank = comm.rank(), world = comm.size();
  for (const auto& [key, value] : metadata) {
    if (absl::StartsWith(key, "fsdp.") || absl::StartsWith(key, "lockstep.") || absl::StartsWith(key, "optimizer.")) {
      return absl::InvalidArgumentError(absl::StrCat("SaveShardedCheckpoint: metadata key '", key,
                                                     "' uses a reserved prefix (fsdp., lockstep., optimizer.); "
                                                     "choose another name"));
    }
  }
  // Rank 0 checks the directory and draws the save's id; every rank follows.
  absl::Status refused;
  uint64_t id = 0;
  if (rank == 0) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    absl::StatusOr<std::vector<Found>> existing = FindShards(dir);
    if (!existing.ok()) {
      refused = existing.status();
    } else {
      for (const Found& f : *existing) {
        if (f.world != world) {
          refused = absl::FailedPreconditionError(absl::StrCat("SaveShardedCheckpoint: ", dir, " holds ", f.path,
                                                               ", of a checkpoint written by ", f.world,
                                                               " ranks; give each checkpoint its own directory"));
          break;
        }
      }
    }
    id = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor decision,
                            Tensor::FromVector<int64_t>({static_cast<int64_t>(id), refused.ok() ? 0 : 1}));
  LOCKSTEP_RETURN_IF_ERROR(comm.Broadcast(decision, 0)->Wait());
  if (decision.data<int64_t>()[1] != 0) {
    return rank == 0 ? refused
                     : absl::FailedPreconditionError(absl::StrCat("SaveShardedCheckpoint on rank ", rank,
                                                                  ": rank 0 "
                                                                  "refused ",
                                                                  dir, " (its error says why)"));
  }
  id = static_cast<uint64_t>(decision.data<int64_t>()[0]);

  std::map<std::string, std::string> md = metadata;
  md[kMarker] = "1";
  md[kWorldKey] = absl::StrCat(world);
  md[kRankKey] = absl::StrCat(rank);
  md[kSaveIdKey] = absl::StrFormat("%016x", id);
  md[kUnitsKey] = absl::StrCat(fsdp.num_units());
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<NamedParameter> shards = fsdp.ShardParameters();
  const std::vector<std::string> paths = fsdp.unit_paths();
  for (size_t u = 0; u < fsdp.num_units(); ++u) {
    std::vector<std::string> names, shapes;
    for (const auto& [name, shape] : fsdp.unit_parameters(u)) {
      names.push_back(name);
      shapes.push_back(absl::StrJoin(shape, "x"));
    }
    md[UnitKey(u, "path")] = paths[u];
    md[UnitKey(u, "names")] = absl::StrJoin(names, "\n");
    md[UnitKey(u, "shapes")] = absl::StrJoin(shapes, "\n");
    tensors.emplace_back(FlatName(paths[u]), shards[u].parameter->value);
  }
  if (optimizer != nullptr) {
    md[kOptimizerKey] = std::string(optimizer->type_name());
    for (NamedTensor& t : optimizer->local().StateTensors()) {
      tensors.emplace_back(kOptimizerPrefix + t.first, std::move(t.second));
    }
  }
  for (const NamedTensor& b : buffers) tensors.emplace_back(kBufferPrefix + b.first, b.second);
  const absl::Status written = WriteSafetensorsFile(ShardPath(dir, rank, world), tensors, md);
  // Every rank learns whether all files were written.
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor failed, Tensor::FromVector<int32_t>({written.ok() ? 0 : 1}));
  LOCKSTEP_RETURN_IF_ERROR(comm.AllReduce(failed, ReduceOp::kSum)->Wait());
  LOCKSTEP_RETURN_IF_ERROR(written);
  if (failed.data<int32_t>()[0] != 0) {
    return absl::DataLossError(absl::StrCat("SaveShardedCheckpoint on rank ", rank, ": ", failed.data<int32_t>()[0],
                                            " other rank(s) could not write their shard files into ", dir,
                                            "; the checkpoint is incomplete (their errors say why)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardedCheckpointInfo> LoadShardedCheckpoint(const std::string& dir, ShardView& fsdp,
                                                            ShardedOptimizer* optimizer,
                                                            const std::vector<NamedTensor>& buffers) {
  const int rank = fsdp.comm().rank();
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Found> found, FindShards(dir));
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat("LoadShardedCheckpoint: no shard-<r>-of-<W>.safetensors files in ", dir));
  }
  const int saved_world = found.front().world;
  std::vector<std::string> problems;
  for (int r = 0; r < saved_world; ++r) {
    if (static_cast<size_t>(r) >= found.size() || found[r].rank != r || found[r].world != saved_world) {
      problems.push_back(absl::StrCat("shard-", r, "-of-", saved_world, kSuffix, " is missing"));
      break;
    }
  }
  for (const Found& f : found) {
    if (f.world != saved_world || f.rank >= saved_world || f.rank < 0) {
      problems.push_back(absl::StrCat(f.path, " does not belong to a checkpoint of ", saved_world, " ranks"));
    }
  }
  if (!problems.empty()) {
    return absl::DataLossError(absl::StrCat("LoadShardedCheckpoint: ", dir, ": ", absl::StrJoin(problems, "; "),
                                            "; each checkpoint needs its own directory with all of its files"));
  }
  // Every header first: one save, one world size, one description.
  std::vector<std::map<std::string, std::string>> headers(saved_world);
  for (int r = 0; r < saved_world; ++r) {
    LOCKSTEP_ASSIGN_OR_RETURN(headers[r], ReadSafetensorsMetadata(found[r].path, kNoSymlinks));
    const auto& md = headers[r];
    auto value = [&](const char* key) {
      auto it = md.find(key);
      return it == md.end() ? std::string("(none)") : it->second;
    };
    if (value(kMarker) != "1") {
      return absl::InvalidArgumentError(absl::StrCat("LoadShardedCheckpoint: ", found[r].path,
                                                     " is not a lockstep FSDP shard file (no '", kMarker, "')"));
    }
    if (value(kRankKey) != absl::StrCat(r) || value(kWorldKey) != absl::StrCat(saved_world)) {
      return absl::DataLossError(absl::StrCat("LoadShardedCheckpoint: ", found[r].path, " says rank ", value(kRankKey),
                                              " of ", value(kWorldKey), " (renamed?)"));
    }
    for (const auto& [key, v] : headers[0]) {
      if (key == kRankKey) continue;
      auto it = md.find(key);
      if (it == md.end() || it->second != v) {
        return absl::DataLossError(absl::StrCat(
            "LoadShardedCheckpoint: ", found[r].path, " and ", found[0].path, " disagree on '", key, "' (",
            it == md.end() ? "missing" : it->second, " against ", v,
            key == kSaveIdKey ? "): files of two different saves; write each checkpoint into its own directory" : ")"));
      }
    }
  }
  LOCKSTEP_ASSIGN_OR_RETURN(std::vector<SavedUnit> saved, ParseUnits(headers[0], saved_world, found[0].path));
  if (optimizer != nullptr && headers[0].count(kOptimizerKey) > 0 &&
      headers[0].at(kOptimizerKey) != optimizer->type_name()) {
    return absl::InvalidArgumentError(absl::StrCat("LoadShardedCheckpoint: ", dir, " holds the state of a ",
                                                   headers[0].at(kOptimizerKey), " optimizer; this run's is ",
                                                   optimizer->type_name()));
  }

  // Every parameter of this model, by name, in the saved units.
  struct Where {
    size_t unit, index;
  };
  std::map<std::string, Where> where;
  for (size_t u = 0; u < saved.size(); ++u) {
    for (size_t i = 0; i < saved[u].names.size(); ++i) where[saved[u].names[i]] = {u, i};
  }
  std::set<std::string> used;
  const int64_t kNone = -1;
  // For each unit and parameter of this model: the saved unit, and the
  // saved flat offset of its first element (kNone: not found).
  std::vector<std::vector<std::pair<size_t, int64_t>>> source(fsdp.num_units());
  for (size_t u = 0; u < fsdp.num_units(); ++u) {
    for (const auto& [name, shape] : fsdp.unit_parameters(u)) {
      auto it = where.find(name);
      if (it == where.end()) {
        problems.push_back(absl::StrCat("'", name, "' is not in the checkpoint"));
        source[u].emplace_back(0, kNone);
        continue;
      }
      const SavedUnit& s = saved[it->second.unit];
      if (s.shapes[it->second.index] != shape) {
        problems.push_back(absl::StrCat("'", name, "' is [", absl::StrJoin(s.shapes[it->second.index], ", "),
                                        "] in the checkpoint, [", absl::StrJoin(shape, ", "), "] here"));
      }
      used.insert(name);
      source[u].emplace_back(it->second.unit, s.layout.offsets[it->second.index]);
    }
  }
  for (const auto& [name, w] : where) {
    if (used.count(name) == 0) problems.push_back(absl::StrCat("the checkpoint's '", name, "' is not in this model"));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("LoadShardedCheckpoint: ", dir, " does not fit this model: ",
                                                   absl::StrJoin(problems, "; "), "; nothing was loaded"));
  }

  // The files holding this rank's elements, and the one its buffers and
  // scalars come from.
  const int home = rank % saved_world;
  std::set<int> needed = {home};
  for (size_t u = 0; u < fsdp.num_units(); ++u) {
    const FlatShardLayout& layout = fsdp.layout(u);
    for (size_t i = 0; i < source[u].size(); ++i) {
      const auto [begin, end] = layout.ParameterRange(i, rank);
      if (begin == end) continue;
      const SavedUnit& s = saved[source[u][i].first];
      const int64_t first = source[u][i].second + begin, last = source[u][i].second + end - 1;
      for (int64_t r = first / s.layout.shard; r <= last / s.layout.shard; ++r) needed.insert(static_cast<int>(r));
    }
  }
  std::map<int, TensorsByName> files;
  for (int r : needed) {
    LOCKSTEP_ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(found[r].path, kNoSymlinks));
    TensorsByName& by_name = files[r];
    for (auto& [name, t] : file.tensors) by_name[name] = std::move(t);
    for (const SavedUnit& s : saved) {
      auto it = by_name.find(FlatName(s.path));
      if (it == by_name.end() || it->second.dtype() != DType::kF32 || it->second.shape() != Shape{s.layout.shard}) {
        return absl::DataLossError(absl::StrCat("LoadShardedCheckpoint: ", found[r].path, ": '", FlatName(s.path),
                                                "' is ", it == by_name.end() ? "missing" : it->second.DebugString(),
                                                ", expected f32 [", s.layout.shard, "]"));
      }
    }
  }
  const TensorsByName& home_file = files.at(home);
  for (const NamedTensor& b : buffers) {
    auto it = home_file.find(kBufferPrefix + b.first);
    if (it == home_file.end() || it->second.dtype() != b.second.dtype() || it->second.shape() != b.second.shape()) {
      problems.push_back(absl::StrCat("buffer '", b.first, "' is ",
                                      it == home_file.end() ? "missing" : it->second.DebugString(), ", expected ",
                                      b.second.DebugString()));
    }
  }

  // This rank's new shards, and its optimizer's state, cut from the files.
  std::vector<Tensor> new_shards;
  std::vector<NamedTensor> state;
  const std::vector<Optimizer::StateKey> keys =
      optimizer != nullptr ? optimizer->local().state_keys() : std::vector<Optimizer::StateKey>();
  for (size_t u = 0; u < fsdp.num_units(); ++u) {
    const FlatShardLayout& layout = fsdp.layout(u);
    // The saved tensor to cut from for each parameter: the flat parameter,
    // then each per-element key's state.
    auto cut = [&](auto saved_name) -> absl::StatusOr<Tensor> {
      LOCKSTEP_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({layout.shard}, DType::kF32));
      for (size_t i = 0; i < source[u].size(); ++i) {
        const auto [begin, end] = layout.ParameterRange(i, rank);
        if (begin == end) continue;
        const size_t su = source[u][i].first;
        const std::string name = saved_name(su);
        for (int r : needed) {
          auto it = files.at(r).find(name);
          if (it == files.at(r).end() || it->second.dtype() != DType::kF32 ||
              it->second.shape() != Shape{saved[su].layout.shard}) {
            return absl::DataLossError(absl::StrCat("LoadShardedCheckpoint: ", found[r].path, ": '", name, "' is ",
                                                    it == files.at(r).end() ? "missing" : it->second.DebugString(),
                                                    ", expected f32 [", saved[su].layout.shard, "]"));
          }
        }
        const int64_t into = layout.offsets[i] + begin - rank * layout.shard;
        LOCKSTEP_RETURN_IF_ERROR(
            CopySaved(saved[su], name, source[u][i].second + begin, end - begin, files, out.data<float>() + into));
      }
      return out;
    };
    LOCKSTEP_ASSIGN_OR_RETURN(Tensor shard, cut([&](size_t su) { return FlatName(saved[su].path); }));
    new_shards.push_back(std::move(shard));
    for (const Optimizer::StateKey& key : keys) {
      // Saved state of the units this unit's parameters come from; none at
      // all: the optimizer had not stepped.
      std::set<size_t> from;
      for (const auto& [su, offset] : source[u]) from.insert(su);
      int present = 0;
      for (size_t su : from) present += home_file.count(absl::StrCat(kOptimizerPrefix, "state.", su, ".", key.key));
      if (present == 0) continue;
      if (present != static_cast<int>(from.size())) {
        problems.push_back(absl::StrCat("optimizer state '", key.key, "' exists for some of unit '",
                                        fsdp.unit_paths()[u], "''s saved units but not all"));
        continue;
      }
      const std::string my_name = absl::StrCat("state.", u, ".", key.key);
      if (key.scalar) {
        const Tensor* first = nullptr;
        for (size_t su : from) {
          const Tensor& t = home_file.at(absl::StrCat(kOptimizerPrefix, "state.", su, ".", key.key));
          if (first == nullptr) {
            first = &t;
          } else if (t.nbytes() != first->nbytes() || std::memcmp(t.raw_data(), first->raw_data(), t.nbytes()) != 0) {
            problems.push_back(absl::StrCat("unit '", fsdp.unit_paths()[u], "' gathers parameters whose '", key.key,
                                            "' differs in the checkpoint (they did not step together)"));
          }
        }
        LOCKSTEP_ASSIGN_OR_RETURN(Tensor copy, first->Clone());
        state.emplace_back(my_name, std::move(copy));
      } else {
        LOCKSTEP_ASSIGN_OR_RETURN(
            Tensor t, cut([&](size_t su) { return absl::StrCat(kOptimizerPrefix, "state.", su, ".", key.key); }));
        state.emplace_back(my_name, std::move(t));
      }
    }
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadShardedCheckpoint: ", dir, ": ", absl::StrJoin(problems, "; "), "; nothing was loaded"));
  }
  // Everything is read and checked: the optimizer first (it validates, and
  // changes nothing when it refuses), then the shards and the buffers.
  if (optimizer != nullptr && !state.empty()) LOCKSTEP_RETURN_IF_ERROR(optimizer->local().LoadStateTensors(state));
  std::vector<NamedParameter> shards = fsdp.ShardParameters();
  for (size_t u = 0; u < shards.size(); ++u)
    LOCKSTEP_RETURN_IF_ERROR(shards[u].parameter->value.CopyFrom(new_shards[u]));
  for (const NamedTensor& b : buffers)
    LOCKSTEP_RETURN_IF_ERROR(b.second.CopyFrom(home_file.at(kBufferPrefix + b.first)));

  ShardedCheckpointInfo info;
  info.world_size = saved_world;
  for (const auto& [key, value] : headers[0]) {
    if (!absl::StartsWith(key, "fsdp.") && !absl::StartsWith(key, "lockstep.") && key != kOptimizerKey) {
      info.metadata[key] = value;
    }
  }
  return info;
}

}  // namespace lockstep
