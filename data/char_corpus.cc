#include "data/char_corpus.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace lockstep {
namespace {

constexpr char kVocabularyFormat[] = "lockstep.char_vocabulary.v1";

// The fortune files of `dir`, sorted: regular files whose name has no '.'.
absl::StatusOr<std::vector<std::string>> FortuneFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    const int err = errno;
    std::string hint = dir == kDefaultFortunesDir
                           ? "install Debian's fortunes package (apt-get install fortunes, or bash tools/setup.sh)"
                           : "pass the folder that holds the fortune files";
    return absl::NotFoundError(absl::StrCat("CharCorpus: cannot open ", dir, " (", std::strerror(err), "): ", hint));
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name.find('.') != std::string::npos) continue;  // ., .., *.dat, *.u8
    struct stat st {};
    if (::lstat((dir + "/" + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    return absl::NotFoundError(
        absl::StrCat("CharCorpus: ", dir, " holds no fortune files (regular files without an extension)"));
  }
  return names;
}

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::DataLossError(absl::StrCat("CharCorpus: cannot open ", path, ": ", std::strerror(errno)));
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("CharCorpus: cannot read ", path));
  return contents;
}

// Calls fn(fortune) for each non-empty fortune of `text` (lines between
// lines that hold only "%"), each with its lines' newlines.
template <typename Fn>
void ForEachFortune(absl::string_view text, Fn fn) {
  std::string fortune;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    const bool last = end == absl::string_view::npos;
    if (last) end = text.size();
    const absl::string_view line = text.substr(at, end - at);
    if (line == "%") {
      if (!fortune.empty()) fn(fortune);
      fortune.clear();
    } else {
      fortune.append(line.data(), line.size());
      fortune.push_back('\n');
    }
    at = end + 1;
  }
  if (!fortune.empty()) fn(fortune);
}

}  // namespace

CharVocabulary CharVocabulary::FromText(absl::string_view text) {
  std::array<bool, 256> seen{};
  for (char c : text) seen[static_cast<unsigned char>(c)] = true;
  CharVocabulary v;
  v.ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    v.ids_[b] = static_cast<int16_t>(v.bytes_.size());
    v.bytes_.push_back(static_cast<unsigned char>(b));
  }
  return v;
}

absl::StatusOr<CharVocabulary> CharVocabulary::FromJson(absl::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("CharVocabulary::FromJson: not a JSON object");
  }
  if (!j.contains("format") || j["format"] != kVocabularyFormat) {
    return absl::InvalidArgumentError(
        absl::StrCat("CharVocabulary::FromJson: \"format\" must be \"", kVocabularyFormat, "\""));
  }
  if (!j.contains("bytes") || !j["bytes"].is_array() || j["bytes"].empty()) {
    return absl::InvalidArgumentError("CharVocabulary::FromJson: \"bytes\" must be a non-empty array");
  }
  CharVocabulary v;
  v.ids_.fill(-1);
  int previous = -1;
  for (size_t i = 0; i < j["bytes"].size(); ++i) {
    const nlohmann::json& b = j["bytes"][i];
    if (!b.is_number_integer() || b.get<int64_t>() <= previous || b.get<int64_t>() > 255) {
      return absl::InvalidArgumentError(absl::StrCat("CharVocabulary::FromJson: bytes[", i, "] is ", b.dump(),
                                                     "; expected an integer in (", previous,
                                                     ", 255]: byte values strictly increasing"));
    }
    previous = b.get<int>();
    v.ids_[previous] = static_cast<int16_t>(v.bytes_.size());
    v.bytes_.push_back(static_cast<unsigned char>(previous));
  }
  return v;
}

std::string CharVocabulary::ToJson() const {
  nlohmann::json j;
  j["format"] = kVocabularyFormat;
  j["bytes"] = nlohmann::json::array();
  for (unsigned char b : bytes_) j["bytes"].push_back(static_cast<int>(b));
  return j.dump();
}

absl::Status CharVocabulary::Encode(absl::string_view text, absl::Span<int64_t> ids) const {
  if (ids.size() != text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("CharVocabulary::Encode: ", text.size(), " bytes into ", ids.size(),
                                                   " ids; the sizes must match"));
  }
  for (size_t i = 0; i < text.size(); ++i) {
    const int16_t id = ids_[static_cast<unsigned char>(text[i])];
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("CharVocabulary::Encode: byte ", static_cast<int>(static_cast<unsigned char>(text[i])),
                       " at offset ", i, " is not in the vocabulary of ", size(), " bytes"));
    }
    ids[i] = id;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CharVocabulary::Decode(absl::Span<const int64_t> ids) const {
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("CharVocabulary::Decode: id ", ids[i], " at offset ", i, " is outside [0, ", size(), ")"));
    }
    text[i] = static_cast<char>(bytes_[static_cast<size_t>(ids[i])]);
  }
  return text;
}

absl::StatusOr<CharCorpus> CharCorpus::Load(const CharCorpusOptions& options) {
  if (options.context < 1) {
    return absl::InvalidArgumentError(absl::StrCat("CharCorpus: context is ", options.context, "; it must be >= 1"));
  }
  if (options.test_every < 2) {
    return absl::InvalidArgumentError(absl::StrCat("CharCorpus: test_every is ", options.test_every,
                                                   "; it must be >= 2 (every k-th fortune is a test one)"));
  }
  absl::StatusOr<std::vector<std::string>> files = FortuneFiles(options.dir);
  if (!files.ok()) return files.status();
  std::array<std::string, 2> text;
  CharCorpus corpus;
  int64_t k = 0;
  for (const std::string& name : *files) {
    absl::StatusOr<std::string> contents = ReadAll(options.dir + "/" + name);
    if (!contents.ok()) return contents.status();
    ForEachFortune(*contents, [&](const std::string& fortune) {
      const int split = k % options.test_every == options.test_every - 1 ? 1 : 0;
      text[split] += fortune;
      text[split] += "%\n";
      ++corpus.fortunes_[split];
      ++k;
    });
  }
  corpus.num_files_ = static_cast<int64_t>(files->size());
  corpus.context_ = options.context;
  corpus.vocabulary_ = CharVocabulary::FromText(text[0] + text[1]);
  for (int split = 0; split < 2; ++split) {
    if (static_cast<int64_t>(text[split].size()) < options.context + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CharCorpus: the ", split == 0 ? "training" : "test", " split of ", options.dir, " has ", text[split].size(),
          " bytes (", corpus.fortunes_[split], " fortunes), fewer than one window of context ", options.context,
          " + 1; use a smaller context or more files"));
    }
    std::vector<int64_t> ids(text[split].size());
    absl::Status encoded = corpus.vocabulary_.Encode(text[split], absl::MakeSpan(ids));
    if (!encoded.ok()) return encoded;  // Cannot happen: the vocabulary is built from this text.
    corpus.tokens_[split].assign(ids.begin(), ids.end());
  }
  return corpus;
}

absl::Status CharCorpus::GetWindow(CorpusSplit split, int64_t index, absl::Span<int64_t> input,
                                   absl::Span<int64_t> target) const {
  const int64_t windows = num_windows(split);
  if (index < 0 || index >= windows) {
    return absl::OutOfRangeError(absl::StrCat("CharCorpus::GetWindow: window ", index, " of the ",
                                              split == CorpusSplit::kTrain ? "training" : "test", " split; it has ",
                                              windows, " (indices [0, ", windows, "))"));
  }
  if (static_cast<int64_t>(input.size()) != context_ || static_cast<int64_t>(target.size()) != context_) {
    return absl::InvalidArgumentError(absl::StrCat("CharCorpus::GetWindow: input and target must hold context ",
                                                   context_, " ids each; got ", input.size(), " and ", target.size()));
  }
  const std::vector<uint8_t>& tokens = tokens_[Index(split)];
  const size_t start = static_cast<size_t>(index * context_);
  for (int64_t i = 0; i < context_; ++i) {
    input[i] = tokens[start + i];
    target[i] = tokens[start + i + 1];
  }
  return absl::OkStatus();
}

namespace {

class CharWindowExamples final : public ExampleDataset {
 public:
  CharWindowExamples(std::shared_ptr<const CharCorpus> corpus, CorpusSplit split)
      : corpus_(std::move(corpus)), split_(split) {}
  int64_t size() const override { return corpus_->num_windows(split_); }
  std::vector<ExampleField> fields() const override {
    return {{"input", DType::kI64, {corpus_->context()}}, {"target", DType::kI64, {corpus_->context()}}};
  }
  absl::Status Get(int64_t index, absl::Span<const absl::Span<char>> out) const override {
    if (absl::Status s = CheckExampleArgs(*this, "CharWindows", index, out); !s.ok()) return s;
    // The DataLoader's rows are i64-aligned (rows of i64 tensors).
    auto ids = [&](int f) {
      return absl::MakeSpan(reinterpret_cast<int64_t*>(out[f].data()), static_cast<size_t>(corpus_->context()));
    };
    return corpus_->GetWindow(split_, index, ids(0), ids(1));
  }

 private:
  std::shared_ptr<const CharCorpus> corpus_;
  CorpusSplit split_;
};

}  // namespace

std::shared_ptr<const ExampleDataset> CharWindows(std::shared_ptr<const CharCorpus> corpus, CorpusSplit split) {
  return std::make_shared<CharWindowExamples>(std::move(corpus), split);
}

}  // namespace lockstep
