#!/usr/bin/env bash
# Installs, with apt, whatever lockstep needs that this Debian 12 machine lacks.
# Idempotent: installs nothing when everything is present, and says so (one
# dpkg-query, well under a second).
#   bash tools/setup.sh            # build and test dependencies
# The end-to-end launch tests (tests/launch_*, tests/slurm_test,
# tests/mpirun_test) need the cluster engines and PyTorch: Slurm with munge,
# Open MPI, and python3-torch (only tests/launch_pytorch_test uses it; also
# golden data and peer benchmarks). LOCKSTEP_SETUP_TORCH is accepted for old
# callers; python3-torch is always installed now.
set -euo pipefail

packages=(
  bazel-bootstrap   # Bazel 4.2.3, works offline
  g++
  libabsl-dev       # Abseil 20220623
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libopenblas-dev
  libdnnl-dev       # oneDNN 2.6 (the one PyTorch links): nn's CPU convolutions (optional: without it, im2col + BLAS)
  zlib1g-dev
  libssl-dev        # libcrypto: HMAC-SHA256 of the rank handshake
  nlohmann-json3-dev  # header-only JSON, for golden-data tests
  iproute2          # ip netns for multi-node tests
  time              # /usr/bin/time: the agent's peak RSS in tools/launch/launcher_test.sh
  dataset-fashion-mnist
  fortunes          # ~2.5 MB of text: data:char_corpus, the character-level corpus
  slurm-wlm         # slurmctld, slurmd, srun: tests/slurm_test (a one-node cluster of its own)
  munge             # Slurm's authentication (munged)
  openmpi-bin       # mpirun: tests/mpirun_test, the OpenMPI peer benchmark
  libopenmpi-dev    # mpicc for the OpenMPI peer benchmark
  iperf3            # the network's own bandwidth, beside the collective benchmark
  python3-torch     # PyTorch 1.13 (/usr/bin/python3): tests/launch_pytorch_test, golden data, interop/torch's Python twins
  libtorch-dev      # libtorch 1.13 C++ API: interop/torch (optional: without it those targets are skipped)
  libgloo-dev       # gloo's headers, for c10d's ProcessGroupGloo in interop/torch/ddp:ddp_bench (the C++ recipe peer)
  pybind11-dev      # interop/torch:lockstep_torch, the torch.distributed backend (a Python extension)
  python3-dev       # Python.h, for the same
  clang-format      # tools/format.sh (C++ formatting, checked in CI)
  cmake             # tests/cmake_consumer: a CMake project on the installed package (tools/install.sh)
  pkg-config        # the same, through lockstep's .pc files
  python3-venv      # python/: pip install into a venv (the pip install test)
  python3-pip
  libcurl4-openssl-dev  # lockstep-run --rdzv_backend=etcd: etcd's HTTP/JSON gateway
  etcd-server       # a real etcd for the etcd rendezvous tests (each test starts its own)
  etcd-client       # etcdctl: the tests read and forge keys with it
)

# buildifier (tools/format.sh: BUILD and .bzl formatting, checked in CI) is no
# Debian package: a pinned release from the npm registry (its package carries
# the binaries), into $LOCKSTEP_TOOLS. npm comes from Debian when missing.
buildifier_version=8.2.1
tools=${LOCKSTEP_TOOLS:-$HOME/.cache/lockstep-tools}
buildifier="$tools/node_modules/@bazel/buildifier/buildifier-linux_amd64"
need_buildifier() {
  [[ -x "$buildifier" ]] && "$buildifier" --version 2>/dev/null | grep -q "version: $buildifier_version" && return 1
  return 0
}
if need_buildifier && ! command -v npm >/dev/null; then packages+=(npm); fi

missing=()
for entry in "${packages[@]}"; do
  pkg=${entry%% *}
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == installed ]] || missing+=("$pkg")
done

install_buildifier() {
  need_buildifier || return 0
  echo "setup: installing buildifier $buildifier_version into $tools"
  mkdir -p "$tools"
  npm install --silent --no-save --no-audit --no-fund --prefix "$tools" "@bazel/buildifier@$buildifier_version" >/dev/null
  "$buildifier" --version >/dev/null
}

if [[ ${#missing[@]} -eq 0 ]]; then
  install_buildifier
  echo "setup: all ${#packages[@]} packages already installed; nothing to do"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then sudo=(sudo); else
    echo "setup: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: installed ${#missing[@]} package(s): ${missing[*]}"
install_buildifier
