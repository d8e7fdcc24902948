// PyTorch's DataParallel balance check (torch/nn/parallel/data_parallel.py,
// _check_balance): with several CUDA devices, warn when one has less than
// 75% of another's memory, else of its multiprocessors, since the slowest
// replica sets every step's pace.
#ifndef LOCKSTEP_DP_BALANCE_H_
#define LOCKSTEP_DP_BALANCE_H_

#include <string>
#include <vector>

#include "core/cuda/cuda_runtime.h"

namespace lockstep {

// PyTorch's warning text naming the weakest and the strongest device, or ""
// when the devices are balanced. `properties[i]` belongs to `device_ids[i]`.
std::string ImbalanceWarning(const std::vector<int>& device_ids, const std::vector<cuda::DeviceProperties>& properties);

}  // namespace lockstep

#endif  // LOCKSTEP_DP_BALANCE_H_
