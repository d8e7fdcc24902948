#!/usr/bin/env bash
# Installs lockstep for CMake and pkg-config projects:
#
#   bash tools/install.sh --prefix=DIR
#
# Builds //tools/install:lockstep (optimized) and copies it to DIR:
#   DIR/include/lockstep/...                    the public headers (old include paths too)
#   DIR/lib/liblockstep_<layer>.{so,a}          core, collectives, data, nn, amp, dp, ddp,
#                                               trainers and, with libtorch-dev, torch_bridge,
#                                               torch_ddp, torch_c10d, torch_models, torch_trainers
#   DIR/lib/cmake/lockstep/lockstepConfig.cmake find_package(lockstep): lockstep::<layer>
#   DIR/lib/pkgconfig/lockstep-<layer>.pc       pkg-config
#   DIR/bin/lockstep-run                        the launcher
# Then, in a CMake project:
#   find_package(Torch REQUIRED)     # for the lockstep::torch_* targets
#   find_package(lockstep REQUIRED)
#   target_link_libraries(train PRIVATE lockstep::torch_ddp lockstep::collectives)
# and cmake -DCMAKE_PREFIX_PATH=DIR. tests/cmake_consumer is such a project.
# Installing again replaces the previous install's files.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=""
for arg in "$@"; do
  case $arg in
    --prefix=*) prefix=${arg#--prefix=} ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install: unknown argument '$arg' (expected --prefix=DIR)" >&2; exit 2 ;;
  esac
done
[[ -n $prefix ]] || { echo "install: --prefix=DIR is required (where to install, e.g. --prefix=\$HOME/.local)" >&2; exit 2; }
bash tools/setup.sh
bazel build --config=opt //tools/install:lockstep
tree="$(bazel info --config=opt bazel-bin)/tools/install/lockstep"
bash tools/install/copy_tree.sh "$tree" "$prefix"
echo "installed lockstep into $prefix: cmake -DCMAKE_PREFIX_PATH=$prefix, then find_package(lockstep)"
