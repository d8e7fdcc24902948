// CPU kernels for any x86-64 (SSE2) or other CPU.
#define LOCKSTEP_CPU_ISA baseline
#include "core/internal/cpu_kernels_impl.h"
