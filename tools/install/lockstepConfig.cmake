# lockstepConfig.cmake: lockstep's libraries for CMake projects, installed by
# `bash tools/install.sh --prefix=DIR` (then -DCMAKE_PREFIX_PATH=DIR):
#
#   find_package(Torch REQUIRED)          # first, for the lockstep::torch_* targets
#   find_package(lockstep REQUIRED)       # or COMPONENTS torch_ddp collectives ...
#   target_link_libraries(train PRIVATE lockstep::torch_ddp lockstep::collectives)
#
# One imported target per layer, each carrying the layers below it and its
# system libraries (absl, OpenBLAS, oneDNN, OpenSSL's crypto, and CUDA's
# runtime when lockstep was built with CUDA):
#   lockstep::core, ::collectives, ::data, ::nn, ::amp, ::dp, ::ddp,
#   ::trainers, and with libtorch ::torch_bridge, ::torch_ddp, ::torch_c10d
#   (ProcessGroupLockstep for C++ programs), ::torch_models, ::torch_trainers.
# lockstep_TARGETS lists the targets defined, lockstep_LAYERS every layer
# installed. Any set of them links into one program: every object is in
# exactly one library. Headers keep their repository paths
# (#include "collectives/communicator.h", and the old paths too).
#
# Shared libraries by default; set lockstep_USE_STATIC_LIBS to ON before
# find_package for the static archives (position-independent: they also go
# into shared libraries and Python extensions).
#
# The torch layers were compiled against one libtorch (lockstep_TORCH_VERSION).
# They are defined when this project's `torch` target (from find_package(Torch),
# called here if the project did not) has that major.minor version; otherwise
# they are left out, with a message saying why, and asking for one of them as
# a COMPONENT fails.
get_filename_component(_lockstep_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(lockstep_USE_STATIC_LIBS)
  set(_lockstep_kind STATIC)
  set(_lockstep_suffix .a)
else()
  set(_lockstep_kind SHARED)
  set(_lockstep_suffix .so)
endif()

# lockstep_VERSION, lockstep_LAYERS, lockstep_TORCH_LAYERS, lockstep_TORCH_VERSION.
include("${CMAKE_CURRENT_LIST_DIR}/lockstepLayers.cmake")

set(_lockstep_have_torch FALSE)
set(_lockstep_torch_why "")
if(lockstep_TORCH_LAYERS)
  if(NOT TARGET torch)
    find_package(Torch QUIET)
  endif()
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _lockstep_built "${lockstep_TORCH_VERSION}")
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _lockstep_found "${Torch_VERSION}")
  if(NOT TARGET torch)
    set(_lockstep_torch_why "no libtorch found (find_package(Torch): Debian's libtorch-dev, or Torch_DIR)")
  elseif(_lockstep_found AND NOT _lockstep_found VERSION_EQUAL _lockstep_built)
    set(_lockstep_torch_why
        "they were built against libtorch ${lockstep_TORCH_VERSION}, this project uses ${Torch_VERSION}: "
        "install lockstep again with that libtorch (LIBTORCH_PATH=... bash tools/install.sh)")
  else()
    set(_lockstep_have_torch TRUE)
  endif()
  if(NOT _lockstep_have_torch AND NOT lockstep_FIND_QUIETLY)
    message(STATUS "lockstep: leaving out ${lockstep_TORCH_LAYERS}: ${_lockstep_torch_why}")
  endif()
endif()

set(lockstep_TARGETS "")
include("${CMAKE_CURRENT_LIST_DIR}/lockstepTargets.cmake")

set(lockstep_FOUND TRUE)
foreach(_lockstep_component IN LISTS lockstep_FIND_COMPONENTS)
  if(TARGET lockstep::${_lockstep_component})
    set(lockstep_${_lockstep_component}_FOUND TRUE)
  else()
    set(lockstep_${_lockstep_component}_FOUND FALSE)
    if(lockstep_FIND_REQUIRED_${_lockstep_component})
      set(lockstep_FOUND FALSE)
      if(_lockstep_component IN_LIST lockstep_TORCH_LAYERS)
        set(lockstep_NOT_FOUND_MESSAGE "lockstep::${_lockstep_component} is not available: ${_lockstep_torch_why}")
      else()
        set(lockstep_NOT_FOUND_MESSAGE
            "lockstep has no layer ${_lockstep_component} (installed: ${lockstep_LAYERS})")
      endif()
    endif()
  endif()
endforeach()
