// Status helpers over absl::Status and absl::StatusOr.
//
// lockstep reports every failure as a value: functions at API boundaries return
// absl::Status or absl::StatusOr<T>, never throw. These two macros keep the
// call sites short:
//
//   absl::StatusOr<Tensor> MakeBucket(...) {
//     LOCKSTEP_RETURN_IF_ERROR(CheckSizes(...));
//     LOCKSTEP_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({n}, DType::kF32));
//     return t;
//   }
#ifndef LOCKSTEP_CORE_STATUS_H_
#define LOCKSTEP_CORE_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define LOCKSTEP_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    ::absl::Status lockstep_status_ = (expr);            \
    if (!lockstep_status_.ok()) return lockstep_status_; \
  } while (0)

#define LOCKSTEP_STATUS_CONCAT_INNER_(x, y) x##y
#define LOCKSTEP_STATUS_CONCAT_(x, y) LOCKSTEP_STATUS_CONCAT_INNER_(x, y)

// `LOCKSTEP_ASSIGN_OR_RETURN(lhs, expr)`: evaluates `expr` (an
// absl::StatusOr<T>); on error returns its status, else moves the value into
// `lhs`, which may be a declaration (`auto x`) or an existing variable.
#define LOCKSTEP_ASSIGN_OR_RETURN(lhs, expr) \
  LOCKSTEP_ASSIGN_OR_RETURN_IMPL_(LOCKSTEP_STATUS_CONCAT_(lockstep_statusor_, __LINE__), lhs, expr)

#define LOCKSTEP_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = std::move(statusor).value()

#endif  // LOCKSTEP_CORE_STATUS_H_
