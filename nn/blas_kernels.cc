#include "nn/blas_kernels.h"

#include <cblas.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace lockstep {
namespace {

// OpenBLAS's generic x86-64 fallbacks: what it runs on a CPU it does not know.
bool IsFallback(const std::string& core) {
  return core == "Prescott" || core == "Core2" || core == "Nehalem" || core == "Penryn" || core == "Dunnington" ||
         core == "Atom" || core == "Barcelona";
}

}  // namespace

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name == nullptr ? "" : name;
}

std::string BetterBlasCoreType() {
#if defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  if (!IsFallback(BlasCoreName())) return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

void RestartWithFasterBlasKernelsIfNeeded(char** argv) {
  const std::string core = BetterBlasCoreType();
  if (core.empty()) return;
  // setenv before exec: the new image's OpenBLAS reads it while loading.
  if (setenv("OPENBLAS_CORETYPE", core.c_str(), 1) != 0) return;
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // exec failed: carry on as we are (slower, still correct).
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace lockstep
