#!/usr/bin/env bash
# Formats the repository's C++ (clang-format, .clang-format) and Bazel files
# (buildifier), or checks that they are formatted:
#
#   bash tools/format.sh           # rewrite every file that is not formatted
#   bash tools/format.sh --check   # CI: list them and exit 1 (nothing written)
#
# clang-format is Debian's (14); buildifier is pinned (tools/setup.sh installs
# it from the npm registry into $LOCKSTEP_TOOLS, ~/.cache/lockstep-tools):
# another version formats differently, so both sides of a check must agree.
set -uo pipefail
cd "$(dirname "$0")/.."
check=0
[[ "${1:-}" == --check ]] && check=1

tools=${LOCKSTEP_TOOLS:-$HOME/.cache/lockstep-tools}
buildifier="$tools/node_modules/@bazel/buildifier/buildifier-linux_amd64"
for tool in clang-format "$buildifier"; do
  command -v "$tool" >/dev/null || { echo "format: $tool is missing; run: bash tools/setup.sh" >&2; exit 2; }
done

mapfile -t cc < <(git ls-files '*.cc' '*.h' '*.cu')
mapfile -t bazel < <(git ls-files 'WORKSPACE' '*/WORKSPACE' 'BUILD' '*/BUILD' '*.bzl')
if [[ $check -eq 0 ]]; then
  clang-format -i "${cc[@]}"
  "$buildifier" --lint=fix --warnings=load "${bazel[@]}"
  "$buildifier" "${bazel[@]}"
  exit 0
fi

bad=0
# One clang-format per 64 files, both cores busy; each file it would change
# is named in its warnings.
if ! out=$(printf '%s\0' "${cc[@]}" | xargs -0 -n 64 -P 2 clang-format --dry-run -Werror 2>&1); then
  echo "$out" | grep -o '^[^:]*:[0-9]*:[0-9]*: error' | cut -d: -f1 | sort -u |
    sed 's/.*/not formatted: & (clang-format -i &)/'
  bad=1
fi
if ! out=$("$buildifier" --mode=check "${bazel[@]}" 2>&1); then
  echo "$out" | sed 's/^/not formatted: /'
  bad=1
fi
if ! out=$("$buildifier" --lint=warn --warnings=load "${bazel[@]}" 2>&1); then
  echo "$out" | sed 's/^/unused load: /'
  bad=1
fi
if [[ $bad -ne 0 ]]; then
  echo "format: run bash tools/format.sh to fix the files above" >&2
  exit 1
fi
echo "format: ${#cc[@]} C++ files and ${#bazel[@]} Bazel files are formatted"
