// CharCorpus on a folder made here (file choice and order, the fortune
// split, windows, errors) and on Debian's fortunes when installed.
#include "data/char_corpus.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "data/data_loader.h"
#include "data/distributed_sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

std::string MakeDir() {
  std::string tmpl = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/corpusXXXXXX";
  char* made = ::mkdtemp(tmpl.data());
  EXPECT_NE(made, nullptr);
  return tmpl;
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// Files "b" and "a" (read as a, b), an index and a link that must be
// skipped, and a sub-folder.
std::string SmallCorpus() {
  const std::string dir = MakeDir();
  Write(dir + "/a", "one\n%\ntwo\nlines\n%\n%\nthree\n");
  Write(dir + "/b", "four\n%\nfive");
  Write(dir + "/a.dat", "binary index");
  EXPECT_EQ(::symlink("a", (dir + "/a.u8").c_str()), 0);
  EXPECT_EQ(::mkdir((dir + "/c").c_str(), 0755), 0);
  return dir;
}

std::string Window(const CharCorpus& corpus, CorpusSplit split, int64_t i, bool target) {
  std::vector<int64_t> in(corpus.context()), out(corpus.context());
  EXPECT_TRUE(corpus.GetWindow(split, i, absl::MakeSpan(in), absl::MakeSpan(out)).ok());
  return *corpus.vocabulary().Decode(target ? out : in);
}

// SmallCorpus with every second fortune a test one.
absl::StatusOr<CharCorpus> LoadSmall(int64_t context) {
  CharCorpusOptions options;
  options.dir = SmallCorpus();
  options.context = context;
  options.test_every = 2;
  return CharCorpus::Load(options);
}

TEST(CharCorpusTest, ReadsFortuneFilesInNameOrderAndSplitsEveryKthFortune) {
  absl::StatusOr<CharCorpus> corpus = LoadSmall(4);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  // Fortunes in order: one (train), two lines (test), three (train), four
  // (test), five (train); the empty one between "%" lines is none.
  const std::string train = "one\n%\nthree\n%\nfive\n%\n";
  const std::string test = "two\nlines\n%\nfour\n%\n";
  EXPECT_EQ(corpus->num_files(), 2);
  EXPECT_EQ(corpus->num_fortunes(CorpusSplit::kTrain), 3);
  EXPECT_EQ(corpus->num_fortunes(CorpusSplit::kTest), 2);
  EXPECT_EQ(corpus->num_tokens(CorpusSplit::kTrain), static_cast<int64_t>(train.size()));
  EXPECT_EQ(corpus->num_tokens(CorpusSplit::kTest), static_cast<int64_t>(test.size()));
  EXPECT_EQ(corpus->num_windows(CorpusSplit::kTrain), static_cast<int64_t>((train.size() - 1) / 4));
  for (int64_t i = 0; i < corpus->num_windows(CorpusSplit::kTrain); ++i) {
    EXPECT_EQ(Window(*corpus, CorpusSplit::kTrain, i, false), train.substr(i * 4, 4));
    EXPECT_EQ(Window(*corpus, CorpusSplit::kTrain, i, true), train.substr(i * 4 + 1, 4));
  }
  const int64_t last = corpus->num_windows(CorpusSplit::kTest) - 1;
  EXPECT_EQ(Window(*corpus, CorpusSplit::kTest, last, true), test.substr(last * 4 + 1, 4));
  // The vocabulary: every byte of both splits, in increasing order.
  EXPECT_EQ(corpus->vocabulary(), CharVocabulary::FromText(train + test));
  EXPECT_EQ(corpus->vocabulary().size(), 15);  // \n % e f h i l n o r s t u v w
}

// The windows through a DataLoader with a DistributedSampler: each batch
// row is the window GetWindow gives for its index.
TEST(CharCorpusTest, CharWindowsFeedTheDataLoader) {
  absl::StatusOr<CharCorpus> loaded = LoadSmall(2);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto corpus = std::make_shared<const CharCorpus>(*std::move(loaded));
  std::shared_ptr<const ExampleDataset> windows = CharWindows(corpus, CorpusSplit::kTrain);
  ASSERT_EQ(windows->size(), corpus->num_windows(CorpusSplit::kTrain));
  DistributedSamplerOptions so;
  so.num_replicas = 2;
  so.rank = 1;
  auto sampler = std::make_shared<DistributedSampler>(*DistributedSampler::Create(windows->size(), so));
  DataLoaderOptions lo;
  lo.batch_size = 3;
  lo.num_workers = 2;
  auto loader = *DataLoader::Create(windows, sampler, lo);
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  int64_t rows = 0;
  while (true) {
    absl::StatusOr<std::optional<Batch>> batch = loader->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    if (!batch->has_value()) break;
    const Batch& b = **batch;
    ASSERT_EQ(b.fields.size(), 2u);
    for (size_t r = 0; r < b.indices.size(); ++r, ++rows) {
      std::vector<int64_t> in(2), out(2);
      ASSERT_TRUE(corpus->GetWindow(CorpusSplit::kTrain, b.indices[r], absl::MakeSpan(in), absl::MakeSpan(out)).ok());
      EXPECT_EQ(b.fields[0].data<int64_t>()[2 * r], in[0]);
      EXPECT_EQ(b.fields[0].data<int64_t>()[2 * r + 1], in[1]);
      EXPECT_EQ(b.fields[1].data<int64_t>()[2 * r + 1], out[1]);
    }
  }
  EXPECT_EQ(rows, sampler->size());
}

TEST(CharCorpusTest, VocabularyRoundTripsAndRefusesMalformedJson) {
  const CharVocabulary v = CharVocabulary::FromText("hello, world\n");
  EXPECT_EQ(v.size(), 10);  // \n space , d e h l o r w
  std::vector<int64_t> ids(5);
  ASSERT_TRUE(v.Encode("hello", absl::MakeSpan(ids)).ok());
  EXPECT_EQ(*v.Decode(ids), "hello");
  absl::StatusOr<CharVocabulary> back = CharVocabulary::FromJson(v.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, v);
  EXPECT_THAT(v.Encode("hellx", absl::MakeSpan(ids)).message(), HasSubstr("byte 120 at offset 4"));
  EXPECT_THAT(v.Encode("hi", absl::MakeSpan(ids)).message(), HasSubstr("sizes must match"));
  EXPECT_THAT(v.Decode({0, 99}).status().message(), HasSubstr("id 99 at offset 1"));
  for (const char* bad : {"[1, 2]", "{\"format\": \"other\", \"bytes\": [1]}",
                          "{\"format\": \"lockstep.char_vocabulary.v1\", \"bytes\": []}",
                          "{\"format\": \"lockstep.char_vocabulary.v1\", \"bytes\": [5, 5]}",
                          "{\"format\": \"lockstep.char_vocabulary.v1\", \"bytes\": [10, 256]}",
                          "{\"format\": \"lockstep.char_vocabulary.v1\", \"bytes\": [\"a\"]}", "{\"format\":"}) {
    EXPECT_FALSE(CharVocabulary::FromJson(bad).ok()) << bad;
  }
  EXPECT_THAT(
      CharVocabulary::FromJson("{\"format\": \"lockstep.char_vocabulary.v1\", \"bytes\": [10, 9]}").status().message(),
      HasSubstr("bytes[1] is 9; expected an integer in (10, 255]"));
}

TEST(CharCorpusTest, BadFoldersAndArgumentsGetErrors) {
  CharCorpusOptions options;
  options.dir = MakeDir() + "/missing";
  EXPECT_THAT(CharCorpus::Load(options).status().message(), HasSubstr("cannot open"));
  options.dir = MakeDir();
  EXPECT_THAT(CharCorpus::Load(options).status().message(), HasSubstr("holds no fortune files"));
  options.dir = SmallCorpus();
  options.context = 0;
  EXPECT_THAT(CharCorpus::Load(options).status().message(), HasSubstr("context is 0"));
  options.context = 64;
  EXPECT_THAT(CharCorpus::Load(options).status().message(), HasSubstr("fewer than one window of context 64"));
  options.context = 4;
  options.test_every = 1;
  EXPECT_THAT(CharCorpus::Load(options).status().message(), HasSubstr("test_every is 1"));
  options.test_every = 2;
  absl::StatusOr<CharCorpus> corpus = CharCorpus::Load(options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  std::vector<int64_t> in(4), out(4), small(3);
  EXPECT_EQ(corpus
                ->GetWindow(CorpusSplit::kTest, corpus->num_windows(CorpusSplit::kTest), absl::MakeSpan(in),
                            absl::MakeSpan(out))
                .code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(corpus->GetWindow(CorpusSplit::kTrain, -1, absl::MakeSpan(in), absl::MakeSpan(out)).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_THAT(corpus->GetWindow(CorpusSplit::kTrain, 0, absl::MakeSpan(small), absl::MakeSpan(out)).message(),
              HasSubstr("context 4 ids each; got 3 and 4"));
}

TEST(CharCorpusTest, DebianFortunes) {
  struct stat st {};
  if (::stat(kDefaultFortunesDir, &st) != 0) {
    GTEST_SKIP() << kDefaultFortunesDir << " missing (apt-get install fortunes)";
  }
  CharCorpusOptions options;  // the defaults: the fortunes folder, context 128
  absl::StatusOr<CharCorpus> corpus = CharCorpus::Load(options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  absl::StatusOr<CharCorpus> again = CharCorpus::Load(options);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->vocabulary(), corpus->vocabulary());
  EXPECT_EQ(again->num_tokens(CorpusSplit::kTrain), corpus->num_tokens(CorpusSplit::kTrain));
  // fortunes 1:1.99.1-7.3 (Debian 12), counted independently by
  // data/testdata/fortunes_counts.py.
  EXPECT_EQ(corpus->num_files(), 43);
  EXPECT_EQ(corpus->num_fortunes(CorpusSplit::kTrain), 13696);
  EXPECT_EQ(corpus->num_fortunes(CorpusSplit::kTest), 1521);
  EXPECT_EQ(corpus->num_tokens(CorpusSplit::kTrain), 2314000);
  EXPECT_EQ(corpus->num_tokens(CorpusSplit::kTest), 262676);
  EXPECT_EQ(corpus->vocabulary().size(), 114);
  EXPECT_EQ(corpus->num_windows(CorpusSplit::kTrain), 18078);
  const int64_t train = corpus->num_tokens(CorpusSplit::kTrain), test = corpus->num_tokens(CorpusSplit::kTest);
  EXPECT_GT(train + test, 2'000'000);  // ~2.5 MB of text
  // A tenth of the fortunes: about a tenth of the bytes.
  EXPECT_GT(test * 100, (train + test) * 7);
  EXPECT_LT(test * 100, (train + test) * 13);
  EXPECT_GT(corpus->vocabulary().size(), 90);  // printable ASCII and more
  EXPECT_LE(corpus->vocabulary().size(), 256);
  // Window 0 is the first fortune of the first file in name order.
  std::ifstream first(std::string(kDefaultFortunesDir) + "/art", std::ios::binary);
  std::string head(128, '\0');
  first.read(head.data(), 128);
  ASSERT_EQ(first.gcount(), 128);
  const std::string window = Window(*corpus, CorpusSplit::kTrain, 0, false);
  const size_t separator = head.find("\n%\n");
  EXPECT_EQ(window.substr(0, std::min<size_t>(separator + 1, 128)),
            head.substr(0, std::min<size_t>(separator + 1, 128)));
}

}  // namespace
}  // namespace lockstep
