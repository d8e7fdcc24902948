// Moved to core/atomic_file.h (//core:atomic_file): crash-safe writes serve
// more than checkpoints (the flight recorder's dump, traces). This path keeps
// working.
#ifndef LOCKSTEP_NN_ATOMIC_FILE_H_
#define LOCKSTEP_NN_ATOMIC_FILE_H_

#include "core/atomic_file.h"  // IWYU pragma: export

#endif  // LOCKSTEP_NN_ATOMIC_FILE_H_
