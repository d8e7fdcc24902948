// DataParallel's replica threads call OpenBLAS at the same time. Debian's
// libopenblas0-pthread is built with USE_THREAD=1, whose level-3 calls take
// their work buffers from a locked pool and, with one BLAS thread (nn's
// default), run on the caller's thread; this checks that concurrent SGEMMs
// of different shapes from three threads give exactly the serial results,
// many times over. Also meant for --config=tsan and --config=asan (OpenBLAS
// itself is not instrumented; the test's own memory is).
#include <cstring>
#include <thread>
#include <vector>

#include "core/mt19937.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "nn/math.h"

namespace lockstep {
namespace {

struct Problem {
  Tensor a, b, expected;
};

Tensor Random(Shape shape, Mt19937& gen) {
  Tensor t = *Tensor::Empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data<float>()[i] = static_cast<float>(gen.Next32() / 4294967296.0 - 0.5);
  }
  return t;
}

TEST(BlasConcurrency, ConcurrentSgemmEqualsSerial) {
  constexpr int kThreads = 3;
  constexpr int kRounds = 40;
  Mt19937 gen(11);
  // Shapes of the reference MLP's layers (batch 64 per replica) plus odd ones.
  const int64_t shapes[kThreads][3] = {{64, 784, 512}, {67, 512, 256}, {31, 256, 10}};
  std::vector<Problem> problems;
  for (const auto& s : shapes) {
    Problem p{Random({s[0], s[1]}, gen), Random({s[2], s[1]}, gen), Tensor()};
    p.expected = *Tensor::Empty({s[0], s[2]}, DType::kF32);
    ASSERT_TRUE(Gemm(p.a, false, p.b, true, p.expected).ok());  // serial reference
    problems.push_back(p);
  }
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const Problem& p = problems[t];
      Tensor c = *Tensor::Empty(p.expected.shape(), DType::kF32);
      for (int r = 0; r < kRounds; ++r) {
        if (!Gemm(p.a, false, p.b, true, c).ok() || std::memcmp(c.raw_data(), p.expected.raw_data(), c.nbytes()) != 0) {
          ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace lockstep
