// A golden test's safetensors file (written by a committed script from
// PyTorch): its tensors by name and its metadata, read once.
//
//   const GoldenFile& golden = GoldenFile::Get("ddp/testdata/join_golden.safetensors");
//   const Tensor& w = golden.at("w2_initial.weight");       // a test failure if missing
//   const int world = std::stoi(golden.meta("w2_initial.world"));
#ifndef LOCKSTEP_NN_TESTING_GOLDEN_FILE_H_
#define LOCKSTEP_NN_TESTING_GOLDEN_FILE_H_

#include <map>
#include <string>

#include "core/tensor.h"

namespace lockstep {

class GoldenFile {
 public:
  // The file at `path` (relative to the test's runfiles), read at the first
  // call; a failure of the running test when it cannot be read.
  static const GoldenFile& Get(const std::string& path);

  bool has(const std::string& key) const { return tensors_.count(key) > 0; }
  // The tensor named `key`; a test failure and an undefined tensor if none.
  const Tensor& at(const std::string& key) const;
  // The metadata entry `key`; a test failure and "" if none.
  const std::string& meta(const std::string& key) const;
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }

 private:
  std::string path_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_NN_TESTING_GOLDEN_FILE_H_
