#include "dp/balance.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// The first minimum and first maximum, as Python's min/max with itemgetter.
std::string Check(const std::vector<int>& ids, const std::vector<double>& values) {
  size_t lo = 0, hi = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] < values[lo]) lo = i;
    if (values[i] > values[hi]) hi = i;
  }
  if (values[hi] <= 0 || values[lo] / values[hi] >= 0.75) return "";
  return absl::StrCat("There is an imbalance between your GPUs. You may want to exclude GPU ", ids[lo],
                      " which has less than 75% of the memory or cores of GPU ", ids[hi],
                      ". You can do so by setting the device_ids argument to DataParallel, or by setting the "
                      "CUDA_VISIBLE_DEVICES environment variable.");
}

}  // namespace

std::string ImbalanceWarning(const std::vector<int>& device_ids,
                             const std::vector<cuda::DeviceProperties>& properties) {
  if (device_ids.size() < 2 || device_ids.size() != properties.size()) return "";
  std::vector<double> memory, cores;
  for (const cuda::DeviceProperties& p : properties) {
    memory.push_back(static_cast<double>(p.total_memory));
    cores.push_back(p.multiprocessors);
  }
  std::string warning = Check(device_ids, memory);
  return warning.empty() ? Check(device_ids, cores) : warning;
}

}  // namespace lockstep
