#include "nn/testing/golden_file.h"

#include <memory>
#include <mutex>

#include "gtest/gtest.h"
#include "nn/checkpoint/safetensors.h"

namespace lockstep {

const GoldenFile& GoldenFile::Get(const std::string& path) {
  // One per path for the test binary's life: goldens are read-only.
  static std::mutex* mu = new std::mutex();
  static auto* files = new std::map<std::string, std::unique_ptr<GoldenFile>>();
  std::lock_guard<std::mutex> lock(*mu);
  std::unique_ptr<GoldenFile>& file = (*files)[path];
  if (file == nullptr) {
    file = std::make_unique<GoldenFile>();
    file->path_ = path;
    absl::StatusOr<SafetensorsFile> read = ReadSafetensorsFile(path);
    EXPECT_TRUE(read.ok()) << "golden file " << path << ": " << read.status();
    if (read.ok()) {
      for (auto& [name, tensor] : read->tensors) file->tensors_[name] = tensor;
      file->metadata_ = read->metadata;
    }
  }
  return *file;
}

const Tensor& GoldenFile::at(const std::string& key) const {
  static const Tensor* missing = new Tensor();
  auto it = tensors_.find(key);
  if (it == tensors_.end()) {
    ADD_FAILURE() << path_ << " has no tensor '" << key << "'";
    return *missing;
  }
  return it->second;
}

const std::string& GoldenFile::meta(const std::string& key) const {
  static const std::string* missing = new std::string();
  auto it = metadata_.find(key);
  if (it == metadata_.end()) {
    ADD_FAILURE() << path_ << " has no metadata '" << key << "'";
    return *missing;
  }
  return it->second;
}

}  // namespace lockstep
