// Samples per second through the DataLoader: one epoch of Fashion-MNIST
// train (normalized, shuffled, batch 128) per iteration, with 0, 1 and 2
// workers. Falls back to the synthetic set of the same shape when the Debian
// package is not installed. Peer: tools/bench/peers/torch_data_loader.py.
//   bazel run --config=opt //data:data_loader_benchmark
#include <memory>

#include "benchmark/benchmark.h"
#include "data/data_loader.h"
#include "data/idx_dataset.h"
#include "data/normalize.h"
#include "data/sampler.h"
#include "data/synthetic_dataset.h"

namespace lockstep {
namespace {

std::shared_ptr<const Dataset> TrainSet() {
  static const std::shared_ptr<const Dataset> data = [] {
    std::shared_ptr<const Dataset> base;
    absl::StatusOr<std::shared_ptr<IdxDataset>> fashion = LoadFashionMnist(kDefaultFashionMnistDir, Split::kTrain);
    if (fashion.ok()) {
      base = *fashion;
    } else {
      base = *SyntheticDataset::Create(SyntheticOptions{});
    }
    return std::shared_ptr<const Dataset>(*Normalize::Create(base, {kFashionMnistMean}, {kFashionMnistStd}));
  }();
  return data;
}

void BM_LoaderEpoch(benchmark::State& state) {
  const std::shared_ptr<const Dataset> data = TrainSet();
  auto sampler = std::make_shared<RandomSampler>(data->size(), 0);
  DataLoaderOptions options;
  options.batch_size = 128;
  options.num_workers = static_cast<int>(state.range(0));
  auto loader = *DataLoader::Create(data, sampler, options);
  int64_t epoch = 0, samples = 0;
  for (auto _ : state) {
    if (!loader->StartEpoch(epoch++).ok()) state.SkipWithError("StartEpoch failed");
    while (true) {
      auto batch = loader->Next();
      if (!batch.ok() || !batch->has_value()) break;
      samples += (*batch)->labels.numel();
      benchmark::DoNotOptimize((*batch)->features.raw_data());
    }
  }
  state.SetItemsProcessed(samples);
}
BENCHMARK(BM_LoaderEpoch)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace
}  // namespace lockstep
