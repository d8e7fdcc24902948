#include "collectives/transport.h"

#include "core/dtype.h"

namespace lockstep {

std::string ElementName(uint8_t element) {
  if (element == 0) return "untyped";
  return std::string(DTypeName(static_cast<DType>(element - 1)));
}

}  // namespace lockstep
