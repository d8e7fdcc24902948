# Sourced by the tests that load lockstep_torch.so into Debian's Python:
#
#   source .../interop/torch/c10d/asan_python_env.sh
#   asan_python_env "$dir/lockstep_torch.so"
#
# When the module was built with AddressSanitizer (--config=asan), exports
# the LD_PRELOAD that lets the (uninstrumented) interpreter load it, so that
# lockstep's code under Python is checked too: the sanitizer's runtime, and
# libstdc++ beside it, since ASan resolves the real __cxa_throw when it
# starts, before the interpreter would load libstdc++ (else the first C++
# throw aborts). Leak checking is off there: CPython keeps its objects to
# the end by design. Does nothing for a plain build.
asan_python_env() {
  local libs
  libs=$(ldd "$1" 2>/dev/null)  # Not piped into grep -q: under pipefail its early exit fails the pipe.
  [[ $libs == *libasan* ]] || return 0
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libstdc++.so.6)${LD_PRELOAD:+:$LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0:abort_on_error=1"  # later options win
  echo "lockstep_torch.so is built with ASan: preloading $LD_PRELOAD"
}
