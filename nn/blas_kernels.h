// OpenBLAS picks its kernels for the CPU it finds when the library loads.
// An OpenBLAS older than the CPU (Debian 12's 0.3.21 on Intel's 2023 Xeons,
// model 207) does not recognize it and falls back to its oldest x86-64
// kernels ("Prescott", SSE3): GEMMs, and so every Linear and Conv2d, run
// about 4x slower (the reference MLP step: 10.2 ms instead of 2.7 ms). The
// variable OPENBLAS_CORETYPE overrides the choice, but only before the
// library loads, so a program fixes it by starting itself again:
//
//   int main(int argc, char** argv) {
//     lockstep::RestartWithFasterBlasKernelsIfNeeded(argv);  // may not return
//     ...
//
// Nothing happens when OPENBLAS_CORETYPE is already set (the user decided),
// when OpenBLAS recognized the CPU, or when the CPU lacks what the faster
// kernels need (the choice follows the CPU's own feature flags: SkylakeX
// kernels need AVX-512 F/BW/DQ/VL, Haswell's AVX2 and FMA).
#ifndef LOCKSTEP_NN_BLAS_KERNELS_H_
#define LOCKSTEP_NN_BLAS_KERNELS_H_

#include <string>

namespace lockstep {

// OpenBLAS's name for the kernels in use, e.g. "SkylakeX", "Prescott".
std::string BlasCoreName();

// The OPENBLAS_CORETYPE to run with, or "" to keep OpenBLAS's choice.
std::string BetterBlasCoreType();

// If BetterBlasCoreType() is not empty: sets OPENBLAS_CORETYPE and execs
// /proc/self/exe with the same arguments (returns only if that fails, and
// then the program continues with the slow kernels).
void RestartWithFasterBlasKernelsIfNeeded(char** argv);

}  // namespace lockstep

#endif  // LOCKSTEP_NN_BLAS_KERNELS_H_
