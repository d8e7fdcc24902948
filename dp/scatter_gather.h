// Scatter and gather: split a tensor into chunks along one dimension, one
// chunk per device, and concatenate chunks back on one device
// (torch.nn.parallel's Scatter / Gather functions and torch.cuda.comm).
//
//   std::vector<Device> devices = {Device::Cpu(0), Device::Cpu(1), Device::Cpu(2)};
//   LOCKSTEP_ASSIGN_OR_RETURN(std::vector<Tensor> chunks, Scatter(batch, devices));
//   // batch [5, 784] -> chunks [2, 784] on cpu:0, [2, 784] on cpu:1, [1, 784] on cpu:2
//   LOCKSTEP_ASSIGN_OR_RETURN(Tensor whole, Gather(chunks, Device::Cpu(0)));
//
// Chunking is torch.chunk's: chunk size ceil(N / k), the last chunk takes
// what is left, and there are ceil(N / chunk size) chunks, which is FEWER
// than k when N is small (N = 5 over 4 devices: 2, 2, 1; N = 2 over 3: 1, 1).
// DataParallel then runs only that many replicas, as PyTorch does.
//
// The backward of each is the other: the gradient of Scatter's outputs is
// Gather'ed onto the input's device, the gradient of Gather's output is
// scattered with the sizes of Gather's inputs (ScatterSizes). There is no
// autograd, so callers (DataParallel) apply them explicitly.
//
// A chunk that lands on the device its source is on is a view (no copy)
// when the dimension is 0; every other chunk is a copy on its device.
// Devices of any kind may be mixed; all CPU devices share host memory.
#ifndef LOCKSTEP_DP_SCATTER_GATHER_H_
#define LOCKSTEP_DP_SCATTER_GATHER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "core/tensor.h"

namespace lockstep {

// torch.chunk's sizes for a dimension of `n` split `chunks` ways (n >= 1,
// chunks >= 1): ceil(n / chunks) each, the last one smaller, possibly fewer
// than `chunks` entries.
absl::StatusOr<std::vector<int64_t>> ChunkSizes(int64_t n, int64_t chunks);

// Splits `input` along `dim` with ChunkSizes(size of dim, devices.size());
// chunk i goes to devices[i]. The result may have fewer entries than
// `devices`. An error for an empty device list, a 0-d or undefined input,
// a dimension out of range or of size 0.
absl::StatusOr<std::vector<Tensor>> Scatter(const Tensor& input, absl::Span<const Device> devices, int64_t dim = 0);

// Splits `input` along `dim` into chunks of the given sizes (which must add
// up to the dimension; one device per size): torch.cuda.comm.scatter with
// chunk_sizes. Gather's backward.
absl::StatusOr<std::vector<Tensor>> ScatterSizes(const Tensor& input, absl::Span<const int64_t> sizes,
                                                 absl::Span<const Device> devices, int64_t dim = 0);

// Concatenates `chunks` along `dim` on `device`. All chunks must have the
// same dtype and rank and agree on every dimension but `dim`. Scatter's
// backward (onto the scattered input's device).
absl::StatusOr<Tensor> Gather(absl::Span<const Tensor> chunks, Device device, int64_t dim = 0);

}  // namespace lockstep

#endif  // LOCKSTEP_DP_SCATTER_GATHER_H_
