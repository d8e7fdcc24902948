// CPU kernels for CPUs with AVX2 (compiled with -mavx2 -mf16c).
#define LOCKSTEP_CPU_ISA avx2
#include "core/internal/cpu_kernels_impl.h"
