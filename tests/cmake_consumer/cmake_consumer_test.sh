#!/usr/bin/env bash
# The installed package as a CMake user meets it: copies the install tree
# (//tools/install:lockstep) to a prefix as tools/install.sh does, configures
# this directory's CMake project against it with find_package(Torch) and
# find_package(lockstep), once with the shared libraries and once with the
# static archives, builds it, and trains on 2 ranks under the installed
# lockstep-run: the README's libtorch DDP example and lockstep's own DDP. Then
# the same plain program once more from a compiler line with pkg-config's
# flags. Every run: both ranks end with the same model and the loss fell.
set -euo pipefail
# Bazel's test PATH starts with /bin; with /bin a link to /usr/bin, CMake would
# find Debian's TorchConfig.cmake under /lib/... and compute libtorch's prefix
# as / (its include directory "//include"). A user's PATH has /usr/bin first.
export PATH="/usr/local/bin:/usr/bin:/bin"
here="$TEST_SRCDIR/$TEST_WORKSPACE"
tree="$here/tools/install/lockstep"
src="$here/tests/cmake_consumer"
work="$TEST_TMPDIR"
prefix="$work/prefix"
bash "$here/tools/install/copy_tree.sh" "$tree" "$prefix"
# An install is plain files: nothing in it points back into Bazel's output.
if [[ -n $(find "$prefix" -type l) ]]; then echo "the install has symlinks:"; find "$prefix" -type l; exit 1; fi
[[ -x $prefix/bin/lockstep-run && -f $prefix/lib/cmake/lockstep/lockstepConfig.cmake ]]

# check NAME OUTPUT WORLD: every rank printed one checksum, all equal, and the
# loss fell on rank 0 ("loss A -> B" or "held-out loss A -> B").
check() {
  local name=$1 out=$2 world=$3
  local sums
  sums=$(grep -o 'checksum .*' <<<"$out" | sort -u | wc -l)
  [[ $(grep -c 'checksum' <<<"$out") -eq $world && $sums -eq 1 ]] || { echo "$name: the ranks' models differ"; exit 1; }
  read -r a b < <(sed -nE 's/.*rank 0 .*loss ([0-9.]+) -> ([0-9.]+).*/\1 \2/p' <<<"$out")
  [[ -n ${a:-} && -n ${b:-} ]] || { echo "$name: no loss line from rank 0"; exit 1; }
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }' || { echo "$name: loss did not fall: $a -> $b"; exit 1; }
  echo "$name: ok ($a -> $b)"
}

# Each 2-rank run has its own deadline (the launcher stops a stuck group with it).
run2() { timeout -k 5 180 "$prefix/bin/lockstep-run" --standalone --nproc_per_node 2 "$@" 2>&1; }

for kind in shared static; do
  build="$work/build-$kind"
  static=OFF
  [[ $kind == static ]] && static=ON
  cmake -S "$src" -B "$build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
    -Dlockstep_USE_STATIC_LIBS=$static >"$work/cmake-$kind.log" 2>&1 || { cat "$work/cmake-$kind.log"; exit 1; }
  cmake --build "$build" -j 2 >"$work/build-$kind.log" 2>&1 || { cat "$work/build-$kind.log"; exit 1; }
  # Shared: the programs load lockstep from the prefix; static: they do not.
  needed=$(readelf -d "$build/libtorch_ddp" | grep -c 'liblockstep_' || true)
  if [[ $kind == shared ]]; then [[ $needed -gt 0 ]]; else [[ $needed -eq 0 ]]; fi
  out=$(run2 "$build/libtorch_ddp")
  echo "$out"
  check "libtorch_ddp ($kind)" "$out" 2
  if [[ $kind == shared ]]; then
    out=$(run2 "$build/libtorch_fsdp")
    echo "$out"
    check "libtorch_fsdp ($kind)" "$out" 2
  fi
  out=$(run2 "$build/plain_ddp")
  echo "$out"
  check "plain_ddp ($kind)" "$out" 2
  grep -q 'examples 320 ' <<<"$out" || { echo "plain_ddp: a rank did not see its 32 examples an epoch"; exit 1; }
done

# pkg-config, shared libraries.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
c++ -O1 -o "$work/plain_ddp_pc" "$src/plain_ddp.cc" $(pkg-config --cflags --libs lockstep-ddp lockstep-data lockstep-amp) \
  -Wl,-rpath,"$prefix/lib"
out=$(run2 "$work/plain_ddp_pc")
check "plain_ddp (pkg-config)" "$out" 2
echo ok
