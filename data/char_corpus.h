// CharCorpus: a character-level language-modelling corpus made of a folder
// of fortune(6) files (Debian's `fortunes`: /usr/share/games/fortunes), cut
// into fixed-length windows of token ids with a deterministic train/test
// split, and the vocabulary that maps bytes to ids (saved with checkpoints:
// a model's ids mean nothing without it).
//
//   CharCorpusOptions options;            // the fortunes folder, context 128
//   LOCKSTEP_ASSIGN_OR_RETURN(CharCorpus corpus, CharCorpus::Load(options));
//   std::vector<int64_t> input(options.context), target(options.context);
//   LOCKSTEP_RETURN_IF_ERROR(corpus.GetWindow(CorpusSplit::kTrain, 0, absl::MakeSpan(input),
//                                             absl::MakeSpan(target)));
//   LOCKSTEP_ASSIGN_OR_RETURN(std::string text, corpus.vocabulary().Decode(input));
//
// Files: every regular file of the folder whose name has no extension (the
// fortune files; the strfile indexes `*.dat` and the `*.u8` links are
// skipped), in byte order of their names, so every machine reads the same
// corpus. Each file is a list of fortunes separated by lines holding only
// "%". Fortune k of the whole corpus (counted over the files in that order,
// from 0) is a test fortune when k % test_every == test_every - 1, else a
// training one: a tenth by default, from every file alike (a split at one
// offset would test only the alphabetically last files). Each split's text
// is its fortunes in order, each followed by "%\n", as the files hold them.
//
// Tokens are bytes (the files are UTF-8: a non-ASCII character is several
// tokens): the vocabulary is the set of byte values present anywhere in the
// corpus, ids in increasing byte order. Window i of a split starts at token
// i * context: input = tokens [s, s + context), target = tokens [s + 1, s +
// context + 1) (the next byte of each); num_windows = (tokens - 1) /
// context, the remainder unused. A sampler picks the windows' order.
//
// Load reads everything into memory (~2.5 MB); GetWindow is const and safe
// to call from several threads. CharWindows views one split's windows as
// examples for the DataLoader (data/example_dataset.h): fields "input" and
// "target", i64 [context] each.
#ifndef LOCKSTEP_DATA_CHAR_CORPUS_H_
#define LOCKSTEP_DATA_CHAR_CORPUS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/example_dataset.h"

namespace lockstep {

inline constexpr char kDefaultFortunesDir[] = "/usr/share/games/fortunes";

// Byte <-> id.
class CharVocabulary {
 public:
  // The distinct bytes of `text`, in increasing order.
  static CharVocabulary FromText(absl::string_view text);
  // {"format": "lockstep.char_vocabulary.v1", "bytes": [10, 32, ...]}:
  // strictly increasing byte values, at least one.
  static absl::StatusOr<CharVocabulary> FromJson(absl::string_view json);
  std::string ToJson() const;

  int64_t size() const { return static_cast<int64_t>(bytes_.size()); }
  // Errors name the first byte outside the vocabulary and its offset.
  absl::Status Encode(absl::string_view text, absl::Span<int64_t> ids) const;
  absl::StatusOr<std::string> Decode(absl::Span<const int64_t> ids) const;
  bool operator==(const CharVocabulary& other) const { return bytes_ == other.bytes_; }

 private:
  std::vector<unsigned char> bytes_;  // id -> byte
  std::array<int16_t, 256> ids_{};    // byte -> id, -1 when absent
};

enum class CorpusSplit { kTrain, kTest };

struct CharCorpusOptions {
  std::string dir = kDefaultFortunesDir;
  int64_t context = 128;    // tokens per window
  int64_t test_every = 10;  // fortune k is a test one when k % test_every == test_every - 1
};

class CharCorpus {
 public:
  // Errors: a missing folder (naming the `fortunes` package when it is the
  // default one), a folder without fortune files, an unreadable file,
  // context < 1, test_every < 2, or a split too short for one window.
  static absl::StatusOr<CharCorpus> Load(const CharCorpusOptions& options);

  const CharVocabulary& vocabulary() const { return vocabulary_; }
  int64_t context() const { return context_; }
  int64_t num_files() const { return num_files_; }
  int64_t num_fortunes(CorpusSplit split) const { return fortunes_[Index(split)]; }
  int64_t num_tokens(CorpusSplit split) const { return static_cast<int64_t>(tokens_[Index(split)].size()); }
  int64_t num_windows(CorpusSplit split) const { return (num_tokens(split) - 1) / context_; }

  // Window `index` of `split` into `input` and `target` (context() ids each).
  absl::Status GetWindow(CorpusSplit split, int64_t index, absl::Span<int64_t> input, absl::Span<int64_t> target) const;

 private:
  static int Index(CorpusSplit split) { return split == CorpusSplit::kTrain ? 0 : 1; }

  CharVocabulary vocabulary_;
  int64_t context_ = 0;
  int64_t num_files_ = 0;
  std::array<int64_t, 2> fortunes_{};
  std::array<std::vector<uint8_t>, 2> tokens_;  // ids (a vocabulary has at most 256)
};

// The windows of `split` as an ExampleDataset (see above).
std::shared_ptr<const ExampleDataset> CharWindows(std::shared_ptr<const CharCorpus> corpus, CorpusSplit split);

}  // namespace lockstep

#endif  // LOCKSTEP_DATA_CHAR_CORPUS_H_
