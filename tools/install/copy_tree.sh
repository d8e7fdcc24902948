#!/usr/bin/env bash
# copy_tree.sh TREE PREFIX: copies the install tree Bazel built
# (//tools/install:lockstep, symlinks into Bazel's output) to PREFIX as plain
# files, exactly the paths its share/lockstep/MANIFEST lists. Used by
# tools/install.sh and by the tests that install into a temporary prefix.
set -euo pipefail
tree=${1:?usage: copy_tree.sh TREE PREFIX}
prefix=${2:?usage: copy_tree.sh TREE PREFIX}
manifest="$tree/share/lockstep/MANIFEST"
[[ -f $manifest ]] || { echo "install: $manifest is missing: is $tree the tree //tools/install:lockstep built?" >&2; exit 2; }
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
# Remove what the previous install listed first, so that a header or library
# this one no longer has is not left behind.
if [[ -f $prefix/share/lockstep/MANIFEST ]]; then
  while IFS= read -r path; do
    [[ -n $path && $path != /* && $path != *..* ]] && rm -f "$prefix/$path"
  done <"$prefix/share/lockstep/MANIFEST"
fi
while IFS= read -r path; do
  [[ -n $path ]] || continue
  case $path in /* | *..*) echo "install: refusing path '$path' from $manifest" >&2; exit 2 ;; esac
  mode=0644
  [[ $path == bin/* || $path == lib/*.so ]] && mode=0755
  install -D -m "$mode" "$tree/$path" "$prefix/$path"
done <"$manifest"
