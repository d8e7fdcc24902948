#!/usr/bin/env bash
# GPU checks in two halves.
#
#   bash tools/gpu_check.sh build   # here: a machine with Bazel and the CUDA toolkit, no GPU
#   bash tools/gpu_check.sh run     # there: a GPU machine without Bazel (gpu_bundle/ copied along)
#
# `build` compiles every test tagged `gpu` and every benchmark tagged `gpu`
# with --config=gpu_bundle (optimized, fully static except the CUDA driver,
# cuBLAS, NCCL and cuDNN, found on the GPU machine, and Google Benchmark,
# whose Debian package has no static archive and is copied in), and gathers them with this script into the
# git-ignored folder gpu_bundle/ (checked to stay under 64 MiB).
#
# `build` also bundles the trainers (bin/ddp_trainer, bin/dp_trainer) and the
# collective benchmark (bin/collectives) for the
# trainer runs below.
#
# `run` finds the CUDA/NCCL libraries at run time (/usr/local/cuda*, a Python
# environment's nvidia/*/lib, ldconfig), runs every test binary and benchmark
# with a deadline, then the trainer runs (DDP with 2 ranks sharing cuda:0 over
# the host backend; the same forced to NCCL, which must refuse clearly; with 2+
# GPUs DDP over NCCL; DP on cuda:0), and prints one summary line:
#   gpu_check: N passed, M failed, K skipped
# GPU tests skip (GTEST_SKIP) where no device is visible.
set -uo pipefail

mode=${1:-}
here=$(cd "$(dirname "$0")/.." && pwd)
bundle=${GPU_BUNDLE:-$here/gpu_bundle}

build() {
  set -e
  cd "$here"
  local tests benchmarks
  tests=$(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
  benchmarks=$(bazel query 'attr(tags, "\bgpu\b", attr(tags, "\bbenchmark\b", kind("cc_binary", //...)))' 2>/dev/null || true)
  echo "gpu_check build: tests: $(echo $tests)"
  echo "gpu_check build: benchmarks: $(echo $benchmarks)"
  local trainers="//trainers:ddp_trainer //trainers:dp_trainer //tools/bench:collectives"
  bazel build --config=gpu_bundle $tests $benchmarks $trainers
  rm -rf "$bundle"
  mkdir -p "$bundle/tests" "$bundle/benchmarks" "$bundle/lib" "$bundle/bin"
  # bazel-bin follows the last build's configuration: take gpu_bundle's own.
  local t bin out
  out=$(bazel info --config=gpu_bundle bazel-bin 2>/dev/null)
  for t in $tests; do
    bin=$out/$(echo "${t#//}" | tr ':' '/')
    cp "$bin" "$bundle/tests/$(echo "${t#//}" | tr '/:' '__')"
  done
  for t in $benchmarks; do
    bin=$out/$(echo "${t#//}" | tr ':' '/')
    cp "$bin" "$bundle/benchmarks/$(echo "${t#//}" | tr '/:' '__')"
  done
  for t in $trainers; do
    cp "$out/$(echo "${t#//}" | tr ':' '/')" "$bundle/bin/"
  done
  # Shared libraries the GPU machine may lack (not CUDA's: found there).
  local lib
  for lib in $(ldd "$bundle"/tests/* "$bundle"/benchmarks/* "$bundle"/bin/* 2>/dev/null | awk '/libbenchmark/ {print $3}' | sort -u); do
    cp -L "$lib" "$bundle/lib/"
  done
  cp tools/gpu_check.sh "$bundle/"
  strip --strip-debug "$bundle"/tests/* "$bundle"/benchmarks/* "$bundle"/bin/* 2>/dev/null || true
  # Statically linked binaries are large (the trainers ~30 MiB each) and
  # compress about 4x: gzip them so the bundle fits one device call; `run`
  # unpacks them first.
  gzip -9 "$bundle"/tests/* "$bundle"/benchmarks/* "$bundle"/bin/*
  local size
  size=$(du -sm "$bundle" | cut -f1)
  echo "gpu_check build: $bundle holds $(ls "$bundle/tests" | wc -l) test(s), $(ls "$bundle/benchmarks" | wc -l) benchmark(s), $(ls "$bundle/bin" | wc -l) trainer(s), ${size} MiB"
  echo "gpu_check build: tests: $(ls "$bundle/tests" | sed "s/\.gz$//" | tr '\n' ' ')"
  echo "gpu_check build: benchmarks: $(ls "$bundle/benchmarks" | sed "s/\.gz$//" | tr '\n' ' ')"
  if [[ $size -ge 64 ]]; then
    echo "gpu_check build: bundle is ${size} MiB, over the 64 MiB a device call can carry" >&2
    exit 1
  fi
}

library_path() {
  local dirs=("$bundle/lib") d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
           /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
    [[ -d $d ]] && dirs+=("$d")
  done
  # pip-installed CUDA libraries (nvidia-nccl-cu*, nvidia-cublas-cu*, ...).
  while IFS= read -r d; do dirs+=("$d"); done < <(
    # /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib is 8 deep.
    find /usr /opt /root /home -maxdepth 9 -type d -path '*site-packages/nvidia/*/lib' 2>/dev/null | sort -u)
  local IFS=:
  echo "${dirs[*]}"
}

# Unpacks the gzipped binaries of the bundle into a scratch copy and points
# `bundle` at it (the carried bundle may be read-only).
unpack() {
  compgen -G "$bundle/*/*.gz" >/dev/null || return 0
  local dest=${TMPDIR:-/tmp}/gpu_bundle_unpacked f rel
  rm -rf "$dest" && mkdir -p "$dest"
  for f in "$bundle"/*/*; do
    rel=${f#"$bundle"/}
    mkdir -p "$dest/$(dirname "$rel")"
    if [[ $f == *.gz ]]; then
      gzip -dc "$f" >"$dest/${rel%.gz}" && chmod +x "$dest/${rel%.gz}"
    else
      cp "$f" "$dest/$rel"
    fi
  done
  bundle=$dest
}

# GPU_ONLY=<extended regex>: only the tests, benchmarks, trainer runs and
# figures whose names match (a rerun of what failed, in less device time).
selected() {
  [[ -z ${GPU_ONLY:-} || $1 =~ $GPU_ONLY ]]
}

run() {
  unpack
  export LD_LIBRARY_PATH="$(library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  local passed=0 failed=0 skipped=0 bin name log rc
  local failures=()
  log=$(mktemp)
  for bin in "$bundle"/tests/*; do
    [[ -x $bin ]] || continue
    name=$(basename "$bin")
    selected "$name" || continue
    timeout "${GPU_TEST_TIMEOUT:-300}" "$bin" >"$log" 2>&1
    rc=$?
    if [[ $rc -ne 0 ]]; then
      failed=$((failed + 1)); failures+=("$name (exit $rc)")
      echo "--- $name FAILED (exit $rc)"; tail -40 "$log"
    elif grep -q '^\[  SKIPPED \]' "$log" && ! grep -q '^\[       OK \]' "$log"; then
      skipped=$((skipped + 1)); echo "--- $name SKIPPED: $(grep -m1 -A1 'Skipped' "$log" | tail -1)"
    else
      passed=$((passed + 1)); echo "--- $name PASSED ($(grep -c '^\[       OK \]' "$log") cases)"
    fi
  done
  for bin in "$bundle"/benchmarks/*; do
    [[ -x $bin ]] || continue
    name=$(basename "$bin")
    selected "$name" || continue
    echo "--- benchmark $name"
    if timeout "${GPU_BENCH_TIMEOUT:-300}" "$bin" --benchmark_min_time=0.05 2>&1; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1)); failures+=("benchmark $name")
    fi
  done
  # Trainer runs: name, a pattern the output must hold, expected exit (0 or
  # "fail"), command.
  local gpus=0
  command -v nvidia-smi >/dev/null && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  local synthetic=(--dataset=synthetic --synthetic_train_size=4096 --synthetic_test_size=1024 --epochs=1
                   --num_workers=1 --batch_size=64)
  trainer_run() {
    local name=$1 pattern=$2 expect=$3; shift 3
    selected "$name" || return 0
    if [[ $gpus -eq 0 ]]; then
      skipped=$((skipped + 1)); echo "--- $name SKIPPED: no GPU"; return
    fi
    timeout "${GPU_TRAINER_TIMEOUT:-240}" "$@" >"$log" 2>&1
    rc=$?
    if { [[ $expect == 0 && $rc -eq 0 ]] || [[ $expect == fail && $rc -ne 0 && $rc -ne 124 ]]; } &&
       grep -q -- "$pattern" "$log"; then
      passed=$((passed + 1)); echo "--- $name PASSED"; grep -E 'backend|convolutions|final test|^ +[0-9]' "$log" | head -12
    else
      failed=$((failed + 1)); failures+=("$name (exit $rc)")
      echo "--- $name FAILED (exit $rc)"; tail -30 "$log"
    fi
  }
  if [[ -x $bundle/bin/ddp_trainer ]]; then
    # One GPU, two ranks: NCCL refuses that, so auto picks the host backend.
    trainer_run "ddp_trainer 2 ranks on cuda:0 (host backend)" "gradient backend host" 0 \
      env CUDA_VISIBLE_DEVICES=0 "$bundle/bin/ddp_trainer" --device=cuda --nproc=2 --bind_to=none "${synthetic[@]}"
    trainer_run "ddp_trainer --backend=nccl, 2 ranks on cuda:0, refuses clearly" "NCCL refuses several ranks on one GPU" fail \
      env CUDA_VISIBLE_DEVICES=0 "$bundle/bin/ddp_trainer" --device=cuda --nproc=2 --bind_to=none --backend=nccl "${synthetic[@]}"
    # The CNN on cuda:0: cuDNN convolutions and BatchNorm's CUDA kernels in
    # training. The synthetic clusters take the CNN 4 epochs at lr 0.01 to
    # learn (47.56% on the CPU, 10 classes): at least 30% is learning.
    trainer_run "ddp_trainer --model=cnn, 2 ranks on cuda:0" "final test accuracy [3-9][0-9]\." 0 \
      env CUDA_VISIBLE_DEVICES=0 "$bundle/bin/ddp_trainer" --model=cnn --device=cuda --nproc=2 --bind_to=none \
      "${synthetic[@]}" --epochs=4 --lr=0.01
    # --amp=bf16: cuDNN's bf16 convolutions, BatchNorm/ReLU/MaxPool on bf16
    # activations and bf16 Linear layers, as torch.autocast.
    trainer_run "ddp_trainer --model=cnn --amp=bf16, 2 ranks on cuda:0" "precision bf16" 0 \
      env CUDA_VISIBLE_DEVICES=0 "$bundle/bin/ddp_trainer" --model=cnn --amp=bf16 --device=cuda --nproc=2 \
      --bind_to=none "${synthetic[@]}" --epochs=2 --lr=0.01
    # Device prefetch (trainers/device_prefetch.h): the next batch's input
    # crosses to the GPU on a side stream while the step runs, ordered by an
    # event; it changes when the copy happens, never what is computed, so
    # with and without it the run ends with the same test loss, bit for bit.
    trainer_run "ddp_trainer --model=cnn, device prefetch on" "copied to cuda:0 on a side stream" 0 \
      env CUDA_VISIBLE_DEVICES=0 "$bundle/bin/ddp_trainer" --model=cnn --device=cuda --nproc=1 --bind_to=none \
      "${synthetic[@]}" --seed=3 --grad_accum_steps=2 --log_every=16
    local with_prefetch
    with_prefetch=$(grep -o 'final test accuracy.*' "$log" | cut -d, -f1)
    trainer_run "ddp_trainer --model=cnn, device prefetch off, same result" "device prefetch off" 0 \
      env CUDA_VISIBLE_DEVICES=0 "$bundle/bin/ddp_trainer" --model=cnn --device=cuda --nproc=1 --bind_to=none \
      "${synthetic[@]}" --seed=3 --grad_accum_steps=2 --log_every=16 --device_prefetch=false
    if selected "device prefetch changes no number" && [[ $gpus -gt 0 ]]; then
      local without
      without=$(grep -o 'final test accuracy.*' "$log" | cut -d, -f1)
      if [[ -n "$with_prefetch" && "$with_prefetch" == "$without" ]]; then
        passed=$((passed + 1)); echo "--- device prefetch changes no number PASSED ($with_prefetch)"
      else
        failed=$((failed + 1)); failures+=("device prefetch changes no number")
        echo "--- device prefetch changes no number FAILED: with '$with_prefetch', without '$without'"
      fi
    fi
    if [[ $gpus -ge 2 ]]; then
      trainer_run "ddp_trainer 2 ranks on 2 GPUs (NCCL)" "gradient backend nccl" 0 \
        "$bundle/bin/ddp_trainer" --device=cuda --nproc=2 --bind_to=none "${synthetic[@]}"
    fi
  fi
  if [[ -x $bundle/bin/dp_trainer ]]; then
    trainer_run "dp_trainer on cuda:0" "final test accuracy" 0 \
      "$bundle/bin/dp_trainer" --devices=cuda:0 "${synthetic[@]}"
  fi
  if [[ -x $bundle/bin/collectives ]]; then
    # The collective benchmark on CUDA tensors: NCCL with one rank (the only
    # NCCL figure one GPU allows), and the host backend with 2 ranks on it.
    trainer_run "collectives bench, NCCL, 1 rank on cuda:0" "backend nccl" 0 \
      "$bundle/bin/collectives" --nproc=1 --bind_to=none --device=cuda --backend=nccl --check \
      --min_bytes=4K --max_bytes=256M --step_factor=16
    trainer_run "collectives bench, host backend, 2 ranks on cuda:0" "backend host" 0 \
      env CUDA_VISIBLE_DEVICES=0 "$bundle/bin/collectives" --nproc=2 --bind_to=none --device=cuda --check \
      --min_bytes=4K --max_bytes=16M --step_factor=16
  fi
  cnn_figures
  rm -f "$log"
  [[ ${#failures[@]} -gt 0 ]] && printf 'failed: %s\n' "${failures[@]}"
  echo "gpu_check: $passed passed, $failed failed, $skipped skipped"
  [[ $failed -eq 0 ]]
}

# The CNN's training throughput on cuda:0 beside PyTorch's on the same GPU
# (figures for docs/PERFORMANCE.md, not checks): lockstep's ddp_trainer with
# one rank, batch 128, the second of two epochs of 150 steps (data loading
# included), against tools/bench/peers/torch_single_mlp.py (tensors already
# on the GPU, a synchronize per step) with full f32 convolutions (as ours)
# and with PyTorch's default TF32 ones; each with --amp=bf16 too. Needs a
# python3 whose torch sees the GPU; skipped otherwise.
cnn_figures() {
  [[ ${GPU_FIGURES:-1} == 1 && -x $bundle/bin/ddp_trainer && $gpus -ge 1 ]] || return 0
  selected "CNN figures" || return 0
  # PyTorch with its own cuDNN: our LD_LIBRARY_PATH may hold an older one,
  # which it refuses (and then convolves without cuDNN).
  local py=(env -u LD_LIBRARY_PATH python3)
  "${py[@]}" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || {
    echo "--- CNN figures skipped: no python3 with CUDA torch"; return 0; }
  echo "--- CNN figures on cuda:0 (samples/s, batch 128): $("${py[@]}" -c 'import torch; print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version())')"
  local amp rep line
  for rep in $(seq "${GPU_FIGURE_REPS:-2}"); do
    for amp in off bf16; do
      line=$(timeout 120 env CUDA_VISIBLE_DEVICES=0 "$bundle/bin/ddp_trainer" --model=cnn --device=cuda --nproc=1 \
               --bind_to=none --dataset=synthetic --synthetic_train_size=19200 --synthetic_test_size=1024 \
               --epochs=2 --batch_size=128 --num_workers=2 --amp=$amp 2>&1 | grep 'final test accuracy')
      echo "figure lockstep amp=$amp rep=$rep: $(echo "$line" | sed -n 's/.*, \([0-9.]*\) samples\/s.*/\1/p')  ($line)"
      for tf32 in "" --tf32; do
        line=$(cd "$here/tools/bench/peers" && timeout 120 "${py[@]}" torch_single_mlp.py --model cnn --device cuda \
                 --steps 300 --warmup 30 --amp $amp $tf32 2>&1 | tail -1)
        echo "figure torch amp=$amp${tf32:+ tf32} rep=$rep: $line"
      done
    done
  done
}

case "$mode" in
  build) build ;;
  run) run ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
