// Status plumbing, one spelling for the whole tree:
//
//   TPSERVE_RETURN_IF_ERROR(backend.Reserve(capacity));
//   TPSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir, backend, comm));
//
// Both return the failed absl::Status from the enclosing function (which must
// return absl::Status or absl::StatusOr<T>).
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TPSERVE_RETURN_IF_ERROR(expr)                                       \
  do {                                                                      \
    if (::absl::Status tpserve_status_ = (expr); !tpserve_status_.ok()) {   \
      return tpserve_status_;                                               \
    }                                                                       \
  } while (false)

#define TPSERVE_STATUS_CONCAT_INNER(a, b) a##b
#define TPSERVE_STATUS_CONCAT(a, b) TPSERVE_STATUS_CONCAT_INNER(a, b)

#define TPSERVE_ASSIGN_OR_RETURN(lhs, expr) \
  TPSERVE_ASSIGN_OR_RETURN_IMPL(TPSERVE_STATUS_CONCAT(tpserve_statusor_, __LINE__), lhs, expr)

#define TPSERVE_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)
