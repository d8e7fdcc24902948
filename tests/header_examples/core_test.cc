// The usage examples of core's public headers, compiled and run. Each
// example's lines appear below exactly as in its header (checked by
// //tests:header_examples_check); lines in between set up its inputs or check
// its results.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/cuda/cuda_caching_allocator.h"
#include "core/cuda/cuda_runtime.h"
#include "core/deadline.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/fd.h"
#include "core/half.h"
#include "core/kernels.h"
#include "core/mt19937.h"
#include "core/process_stats.h"
#include "core/reduce_op.h"
#include "core/status.h"
#include "core/storage.h"
#include "core/subprocess.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Set while this test binary runs as the child of SubprocessExample.
constexpr char kChildEnv[] = "LOCKSTEP_HEADER_EXAMPLE_CHILD";

// core/status.h
absl::Status CheckSizes(int64_t n) {
  return n >= 0 ? absl::OkStatus() : absl::InvalidArgumentError("negative size");
}

absl::StatusOr<Tensor> MakeBucket(int64_t n) {
  LOCKSTEP_RETURN_IF_ERROR(CheckSizes(n));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({n}, DType::kF32));
  return t;
}

TEST(CoreExamplesTest, StatusMacrosReturnErrorsAndValues) {
  absl::StatusOr<Tensor> bucket = MakeBucket(5);
  ASSERT_TRUE(bucket.ok()) << bucket.status();
  EXPECT_EQ(bucket->numel(), 5);
  EXPECT_EQ(bucket->dtype(), DType::kF32);
  EXPECT_EQ(MakeBucket(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

// core/deadline.h: waits for a pipe to become readable.
absl::Status DeadlineExample(int fd) {
  pollfd p{fd, POLLIN, 0};
  bool done = false;
  const Deadline deadline = DeadlineIn(std::chrono::seconds(30));
  while (!done) {
    if (SteadyClock::now() >= deadline) return absl::DeadlineExceededError("pipe not readable");
    poll(&p, 1, PollTimeoutMs(deadline));
    done = (p.revents & POLLIN) != 0;
  }
  return absl::OkStatus();
}

TEST(CoreExamplesTest, DeadlineBoundsAPollLoop) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  Fd read_end(fds[0]), write_end(fds[1]);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(write(write_end.get(), "x", 1), 1);
  });
  const auto start = SteadyClock::now();
  const absl::Status s = DeadlineExample(read_end.get());
  writer.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_GE(SteadyClock::now() - start, std::chrono::milliseconds(15));
  const int left = PollTimeoutMs(DeadlineIn(std::chrono::seconds(30)));
  EXPECT_GT(left, 29000);
  EXPECT_LE(left, 30000);
  EXPECT_EQ(PollTimeoutMs(DeadlineIn(std::chrono::milliseconds(-5))), 0);
}

// The device and dtype examples show values as statements (a discarded
// StatusOr warns).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-result"

// core/process_stats.h
TEST(CoreExamplesTest, ProcessStatsSayAgeAndDescriptors) {
  const double age = ProcessAgeSeconds();  // since exec; -1 if unknown
  const int fds = OpenDescriptorCount();   // -1 if /proc is unreadable
  EXPECT_GE(age, 0);
  EXPECT_GE(fds, 3);
}

// core/device.h
TEST(CoreExamplesTest, DeviceNamesAndParsing) {
  Device d = Device::Cuda(1);
  d.ToString();                                  // "cuda:1"
  absl::StatusOr<Device> p = Device::Parse("cpu");  // Device::Cpu()
  Device::Parse("gpu:0");  // InvalidArgument naming the accepted forms

  EXPECT_EQ(d.ToString(), "cuda:1");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, Device::Cpu());
  const absl::Status bad = Device::Parse("gpu:0").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("cpu"), absl::string_view::npos) << bad;
  EXPECT_NE(bad.message().find("cuda"), absl::string_view::npos) << bad;
}

// core/dtype.h
TEST(CoreExamplesTest, DTypeSizesNamesAndParsing) {
  DType t = DType::kBF16;
  DTypeSize(t);            // 2
  DTypeName(t);            // "bf16"
  ParseDType("float16");   // DType::kF16 (also accepts "f16", "half")

  EXPECT_EQ(DTypeSize(t), 2u);
  EXPECT_EQ(DTypeName(t), "bf16");
  for (const char* name : {"float16", "f16", "half"}) {
    absl::StatusOr<DType> parsed = ParseDType(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(*parsed, DType::kF16) << name;
  }
}

#pragma GCC diagnostic pop

// core/fd.h: the first bytes of a file.
absl::StatusOr<std::string> FdExample(const char* path) {
  char buf[64];
  Fd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return absl::ErrnoToStatus(errno, path);
  const ssize_t n = read(fd.get(), buf, sizeof(buf));  // ... read(fd.get(), ...) ...
  if (n < 0) return absl::ErrnoToStatus(errno, "read");
  if (fd.Close() != 0) return absl::ErrnoToStatus(errno, "close");   // where the close error matters (after writing)
  if (fd.valid()) return absl::InternalError("Close() left the descriptor held");
  return std::string(buf, static_cast<size_t>(n));
}

TEST(CoreExamplesTest, FdOwnsAndClosesADescriptor) {
  const std::string path = ::testing::TempDir() + "/fd_example.txt";
  std::ofstream(path) << "hello";
  absl::StatusOr<std::string> text = FdExample(path.c_str());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "hello");
  EXPECT_EQ(FdExample("/nonexistent/fd_example").status().code(), absl::StatusCode::kNotFound);
}

// core/mt19937.h
TEST(CoreExamplesTest, Mt19937IsSeededWithTheLow32Bits) {
  const uint64_t seed = (uint64_t{7} << 32) | 5489;
  Mt19937 gen(seed);        // init_genrand(seed & 0xffffffff)
  uint32_t r = gen.Next32();

  std::mt19937 reference(5489);
  EXPECT_EQ(r, reference());
  for (int i = 2; i < 10000; ++i) gen.Next32();
  EXPECT_EQ(gen.Next32(), 4123659995u);  // the 10,000th output, as the header says
}

// core/kernels.h
struct KernelsOut {
  bool finite = false;
};

absl::Status KernelsExample(const Tensor& grad, const Tensor& other, const Tensor& a, const Tensor& b,
                            const Tensor& c, const Tensor& out, const Tensor& fp32_master,
                            const Tensor& fp16_copy, int world_size, KernelsOut* result) {
  // grad = grad + other (in place), f16 accumulated in f32, rounded once:
  LOCKSTEP_RETURN_IF_ERROR(ReduceInto(ReduceOp::kSum, other, grad));
  // out = max(a, b, c):
  LOCKSTEP_RETURN_IF_ERROR(Reduce(ReduceOp::kMax, {a, b, c}, out));
  LOCKSTEP_RETURN_IF_ERROR(Scale(grad, 1.0 / world_size));
  LOCKSTEP_RETURN_IF_ERROR(Cast(fp32_master, fp16_copy));
  LOCKSTEP_ASSIGN_OR_RETURN(bool finite, AllFinite(grad));
  result->finite = finite;
  return absl::OkStatus();
}

std::vector<Half> Halves(const std::vector<float>& values) {
  std::vector<Half> out;
  for (float v : values) out.push_back(FloatToHalf(v));
  return out;
}

std::vector<float> Floats(const Tensor& halves) {
  std::vector<float> out;
  const std::vector<Half> values = *halves.ToVector<Half>();
  for (Half h : values) out.push_back(HalfToFloat(h));
  return out;
}

TEST(CoreExamplesTest, KernelsReduceScaleCastAndCheck) {
  Tensor grad = *Tensor::FromVector<Half>(Halves({1.0f, 2.0f, -3.0f}));
  Tensor other = *Tensor::FromVector<Half>(Halves({0.5f, 2.0f, 1.0f}));
  Tensor a = *Tensor::FromVector<float>({1.0f, 5.0f, -1.0f});
  Tensor b = *Tensor::FromVector<float>({4.0f, 2.0f, -2.0f});
  Tensor c = *Tensor::FromVector<float>({3.0f, 6.0f, -3.0f});
  Tensor out = *Tensor::Zeros({3}, DType::kF32);
  Tensor fp32_master = *Tensor::FromVector<float>({0.1f, 1.0f, 65504.0f});
  Tensor fp16_copy = *Tensor::Zeros({3}, DType::kF16);
  KernelsOut result;
  const absl::Status s = KernelsExample(grad, other, a, b, c, out, fp32_master, fp16_copy, 2, &result);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(Floats(grad), (std::vector<float>{0.75f, 2.0f, -1.0f}));
  EXPECT_EQ(*out.ToVector<float>(), (std::vector<float>{4.0f, 6.0f, -1.0f}));
  EXPECT_EQ(Floats(fp16_copy), (std::vector<float>{HalfToFloat(FloatToHalf(0.1f)), 1.0f, 65504.0f}));
  EXPECT_TRUE(result.finite);

  // An Inf in the gradient: AllFinite says so.
  Tensor inf = *Tensor::FromVector<Half>(Halves({INFINITY, 0.0f, 0.0f}));
  const absl::Status s2 = KernelsExample(grad, inf, a, b, c, out, fp32_master, fp16_copy, 2, &result);
  ASSERT_TRUE(s2.ok()) << s2;
  EXPECT_FALSE(result.finite);
}

// core/storage.h
TEST(CoreExamplesTest, StorageAllocatesAlignedHostMemory) {
  absl::StatusOr<std::shared_ptr<Storage>> s = Storage::Allocate(1 << 20, Device::Cpu());

  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->nbytes(), size_t{1} << 20);
  EXPECT_EQ((*s)->device(), Device::Cpu());
  EXPECT_FALSE((*s)->pinned());
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*s)->data()) % kHostAlignment, 0u);
}

// core/subprocess.h: the child is this test binary again, which runs only
// SubprocessChildSeesItsEnvironment (GTEST_FILTER is inherited).
absl::Status SubprocessExample() {
  const Subprocess::Deadline deadline = DeadlineIn(std::chrono::seconds(60));
  SubprocessOptions options;
  options.argv = {"/proc/self/exe", "--nproc=0"};
  options.env = {{"RANK", "1"}, {"WORLD_SIZE", "2"}};  // On top of this process's environment.
  options.env.push_back({"GTEST_FILTER", "CoreExamplesTest.SubprocessChildSeesItsEnvironment"});
  options.env.push_back({kChildEnv, "subprocess"});
  options.env.push_back({"XML_OUTPUT_FILE", ::testing::TempDir() + "/subprocess_child.xml"});
  options.env.push_back({"TEST_PREMATURE_EXIT_FILE", ::testing::TempDir() + "/subprocess_child.exited"});
  LOCKSTEP_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(options));
  LOCKSTEP_ASSIGN_OR_RETURN(ExitStatus status, child.Wait(deadline));
  if (!status.success()) return absl::InternalError(status.ToString());
  return absl::OkStatus();
}

TEST(CoreExamplesTest, SubprocessSpawnsAndWaits) {
  if (std::getenv(kChildEnv) != nullptr) GTEST_SKIP() << "in the child";
  const absl::Status s = SubprocessExample();
  EXPECT_TRUE(s.ok()) << s;
}

// Runs only in the child that SubprocessExample starts.
TEST(CoreExamplesTest, SubprocessChildSeesItsEnvironment) {
  const char* role = std::getenv(kChildEnv);
  if (role == nullptr || std::string(role) != "subprocess") GTEST_SKIP() << "runs as SubprocessExample's child";
  ASSERT_NE(std::getenv("RANK"), nullptr);
  ASSERT_NE(std::getenv("WORLD_SIZE"), nullptr);
  EXPECT_STREQ(std::getenv("RANK"), "1");
  EXPECT_STREQ(std::getenv("WORLD_SIZE"), "2");
}

// core/tensor.h. The last two lines need a CUDA device: without one the
// function returns To()'s error, after filling `out` with the views.
struct TensorOut {
  Tensor grads, bucket, rows;
  float* p = nullptr;
};

absl::Status TensorExample(const Tensor& batch, TensorOut* out) {
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor grads, Tensor::Zeros({1000}, DType::kF32));
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor bucket, grads.Flat(200, 300));  // no copy
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor rows, batch.Slice(0, 64));      // no copy
  out->grads = grads;
  out->bucket = bucket;
  out->rows = rows;
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor on_gpu, grads.To(Device::Cuda(0)));
  float* p = grads.data<float>();
  out->p = p;
  if (on_gpu.device() != Device::Cuda(0)) return absl::InternalError("To(cuda:0) did not copy to cuda:0");
  return absl::OkStatus();
}

TEST(CoreExamplesTest, TensorViewsShareStorage) {
  const Tensor batch = *Tensor::Zeros({100, 784}, DType::kF32);
  TensorOut out;
  const absl::Status s = TensorExample(batch, &out);
  if (cuda::DeviceCount() > 0) {
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ(out.p, out.grads.raw_data());
  } else {
    EXPECT_FALSE(s.ok());  // To(cuda:0) without a device
  }
  EXPECT_EQ(out.bucket.numel(), 300);
  EXPECT_TRUE(out.bucket.SharesStorageWith(out.grads));
  EXPECT_EQ(out.bucket.storage_offset(), 200 * sizeof(float));
  EXPECT_EQ(out.rows.shape(), (Shape{64, 784}));
  EXPECT_TRUE(out.rows.SharesStorageWith(batch));
}

// core/thread_pool.h
struct Replica {
  std::atomic<int>* runs;
  std::thread::id thread;
  void Forward() {
    thread = std::this_thread::get_id();
    runs->fetch_add(1);
  }
};

TEST(CoreExamplesTest, ThreadPoolRunsEveryTaskBeforeWaitReturns) {
  std::atomic<int> runs{0};
  std::vector<Replica> replicas(8, Replica{&runs, {}});
  ThreadPool pool(4);
  for (auto& replica : replicas) pool.Schedule([&] { replica.Forward(); });
  pool.Wait();  // until every scheduled task has finished

  EXPECT_EQ(runs.load(), 8);
  for (const Replica& r : replicas) {
    EXPECT_NE(r.thread, std::thread::id());
    EXPECT_NE(r.thread, std::this_thread::get_id());
  }
}

// core/cuda/cuda_runtime.h (the header of //core:cuda_runtime): returns at once
// without a CUDA device.
absl::Status CudaRuntimeExample(const Tensor& host, Tensor* out) {
  if (cuda::DeviceCount() == 0) return absl::OkStatus();  // or GTEST_SKIP()
  LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(host.shape(), host.dtype(), Device::Cuda(0)));
  LOCKSTEP_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create(0));
  LOCKSTEP_RETURN_IF_ERROR(t.CopyFromAsync(host, stream));
  LOCKSTEP_RETURN_IF_ERROR(stream.Synchronize());
  *out = t;
  return absl::OkStatus();
}

TEST(CoreExamplesTest, CudaRuntimeCopiesOnAStream) {
  const Tensor host = *Tensor::FromVector<float>({1, 2, 3, 4});
  Tensor on_device;
  const absl::Status s = CudaRuntimeExample(host, &on_device);
  ASSERT_TRUE(s.ok()) << s;
  if (cuda::DeviceCount() == 0) {
    EXPECT_FALSE(on_device.defined());
    EXPECT_FALSE(cuda::Stream::Create(0).ok());  // every other call fails without a device
    GTEST_SKIP() << "no CUDA device";
  }
  EXPECT_EQ(on_device.device(), Device::Cuda(0));
  EXPECT_EQ(*on_device.ToVector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

// core/cuda/cuda_caching_allocator.h: needs a CUDA device; without one Allocate
// fails and the function returns its error.
absl::StatusOr<DeviceMemoryStats> CudaCachingAllocatorExample(size_t bytes) {
  CudaCachingAllocator& allocator = DefaultCudaAllocator();  // the process's
  LOCKSTEP_ASSIGN_OR_RETURN(void* p, allocator.Allocate(bytes, /*device=*/0));
  // ... (the block in use)
  LOCKSTEP_RETURN_IF_ERROR(allocator.Free(p));          // back to the cache
  DeviceMemoryStats s = allocator.Stats(0);             // current and peak bytes
  allocator.EmptyCache();                               // cached blocks to cudaFree
  return s;
}

TEST(CoreExamplesTest, CudaCachingAllocatorAllocatesAndCaches) {
  const size_t bytes = 3000;
  absl::StatusOr<DeviceMemoryStats> s = CudaCachingAllocatorExample(bytes);
  if (cuda::DeviceCount() == 0) {
    EXPECT_FALSE(s.ok());
    return;
  }
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GE(s->peak_allocated_bytes, CudaCachingAllocator::RoundSize(bytes));
  EXPECT_GE(s->allocations, 1u);
  EXPECT_GE(s->reserved_bytes, CudaCachingAllocator::RoundSize(bytes));  // cached until EmptyCache
}

}  // namespace
}  // namespace lockstep
