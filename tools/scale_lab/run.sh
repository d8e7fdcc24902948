#!/usr/bin/env bash
# The scale lab: a virtual cluster on this machine, a workload on it, and
# everything torn down again (on success, failure and Ctrl-C alike).
#
#   sudo bash tools/scale_lab/run.sh --hosts=8 --ranks_per_host=8 --link_delay_us=1000 \
#       --workload=bench --json=out.jsonl
#
# Hosts are network namespaces (lab-h0 .. lab-hH-1, each rank also in a UTS
# namespace of its own with that hostname): inside a host, ranks meet over
# shared memory as on a real node; across hosts over TCP, through links with
# latency. This kernel has no delay qdisc (no netem), so the links are
# tools/scale_lab:delay_link, a forwarder between one TUN device per host
# that holds every packet for --link_delay_us (plus, with --link_rate, the
# sending host's serialization) and measures its own lateness: a run whose
# p99 lateness exceeds 10 % of the delay is marked invalid ("valid": false).
#
# Workloads:
#   bench    //tools/bench:collectives for every op in --ops (default: all
#            that both sides run), --check, sizes --min_bytes..--max_bytes
#            (4K..64M, x --step_factor=4), --iters=20 (--warmup=5) up to
#            --large_bytes=1M and --iters_large=2 (--warmup_large=1) above it,
#            as OSU's benchmarks do, so that 8 x 8 ranks sweep every op beside
#            OpenMPI in under 20 minutes (12 here); OpenMPI beside it with the
#            same placement (a hostfile of the hosts, an rsh agent that enters
#            a namespace, btl tcp across and vader inside), one peer per name
#            in --peers (default openmpi; han adds OpenMPI with its HAN
#            hierarchical collectives, ~10 minutes more at 8 x 8; none:
#            lockstep only);
#   trainer  //trainers:ddp_trainer (the MLP on synthetic data) on every rank;
#   setup    group set-up alone: process start to the end of the first collective.
#   launch   lockstep-run on every host, for each backend in --rdzv (default
#            c10d,etcd; etcd: a real etcd-server in host 0): first a 4-byte
#            all-reduce, whose start-up (startup_s: every agent started to
#            the end of the first collective, one wall clock) is the row's;
#            then, for each backend, the DDP trainer (--trainer_steps; 0:
#            none) under the same launcher.
# --lockstep_flags="--transport=tcp ..." passes flags to lockstep's benchmark.
#
# Ranks outnumber cores here, so lockstep runs with spinning off
# (--worker_spin_microseconds=0, --wait_spin_microseconds=0,
# --transport_spin_microseconds=0), as OpenMPI yields under --oversubscribe:
# neither side burns a core the others need. Many ranks on 2 cores measure the
# scheduler as much as the network: every row records the machine's load, and
# the cost model (tools/scale_lab/validate.sh) uses the rows where the link
# term dominates.
#
# Output: a table on stdout, and with --json=FILE one JSON object per line and
# measurement: impl ("lockstep", "openmpi", "openmpi_han"), op, bytes, p,
# hosts, ranks_per_host, delay_us, rate, time_us (the slowest rank's mean),
# p50_us, p95_us, wrong, setup_s, rss_mib, fds, load, valid, lateness_p50_us and
# lateness_p99_us (the forwarder's, over the whole run: how much later than D
# its packets left), iters.
#
# Binaries: built with Bazel (-c opt) unless LAB_BENCH, LAB_DELAY_LINK and
# LAB_TRAINER name them (the CI test passes its runfiles). Needs root.
# lockstep's TCP ranks connect on first use; LOCKSTEP_RUNTIME_CONNECT=0 in
# the environment builds the full mesh at start-up instead (rows say which:
# "connections").
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

hosts=2 ranks_per_host=2 delay_us=0 rate="" workload=bench ops="" json="" peers="openmpi" rdzv="c10d,etcd"
min_bytes=4K max_bytes=64M iters=20 warmup=5 timeout_s=1800 trainer_steps=40 check=1 lockstep_flags=""
step_factor=4 large_bytes=1M iters_large=2 warmup_large=1
usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
for arg in "$@"; do
  case $arg in
    --hosts=*) hosts=${arg#*=} ;;
    --ranks_per_host=*) ranks_per_host=${arg#*=} ;;
    --link_delay_us=*) delay_us=${arg#*=} ;;
    --link_rate=*) rate=${arg#*=} ;;
    --workload=*) workload=${arg#*=} ;;
    --ops=*) ops=${arg#*=} ;;
    --json=*) json=${arg#*=} ;;
    --peers=*) peers=${arg#*=} ;;
    --min_bytes=*) min_bytes=${arg#*=} ;;
    --max_bytes=*) max_bytes=${arg#*=} ;;
    --iters=*) iters=${arg#*=} ;;
    --warmup=*) warmup=${arg#*=} ;;
    --step_factor=*) step_factor=${arg#*=} ;;
    --large_bytes=*) large_bytes=${arg#*=} ;;
    --iters_large=*) iters_large=${arg#*=} ;;
    --warmup_large=*) warmup_large=${arg#*=} ;;
    --timeout_s=*) timeout_s=${arg#*=} ;;
    --trainer_steps=*) trainer_steps=${arg#*=} ;;
    --no_check) check=0 ;;
    --lockstep_flags=*) lockstep_flags=${arg#*=} ;;
    --rdzv=*) rdzv=${arg#*=} ;;
    -h|--help) usage 0 ;;
    *) echo "run.sh: unknown argument $arg" >&2; usage ;;
  esac
done

die() { echo "run.sh: $*" >&2; exit 2; }
# Progress on stderr, with the seconds since the start: where a run's time goes.
say() { echo "run.sh: [${SECONDS} s] $*" >&2; }
int_in() { [[ $1 =~ ^[0-9]+$ ]] && (( $1 >= $2 && $1 <= $3 )); }
int_in "$hosts" 1 16 || die "--hosts=$hosts: must be 1..16"
int_in "$ranks_per_host" 1 16 || die "--ranks_per_host=$ranks_per_host: must be 1..16"
p=$(( hosts * ranks_per_host ))
(( p <= 64 )) || die "--hosts x --ranks_per_host = $p ranks: at most 64 in all"
int_in "$delay_us" 0 1000000 || die "--link_delay_us=$delay_us: must be 0..1000000"
[[ -z "$rate" || "$rate" =~ ^[0-9]+(\.[0-9]+)?[kmg]?bit$ ]] || die "--link_rate=$rate: use e.g. 1gbit, 100mbit"
case $workload in bench|trainer|setup|launch) ;; *) die "--workload=$workload: bench, trainer, setup or launch" ;; esac
for b in ${rdzv//,/ }; do [[ $b == c10d || $b == etcd ]] || die "--rdzv: no backend $b (c10d, etcd)"; done
if [[ $workload == launch && ",$rdzv," == *",etcd,"* ]]; then
  command -v etcd >/dev/null || die "etcd-server is missing: bash tools/setup.sh"
fi
[[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, TUN devices, SCHED_FIFO)"
all_ops="all_reduce,all_gather,reduce_scatter,broadcast,reduce,gather,scatter,all_to_all"
[[ -n "$ops" ]] || ops=$all_ops
for op in ${ops//,/ }; do [[ ",$all_ops," == *",$op,"* ]] || die "--ops: no op $op (ops: $all_ops)"; done
[[ -z "$json" ]] || : >"$json" || die "cannot write --json=$json"

# --- everything this run creates, and its removal -----------------------------
tag=${LAB_TAG:-lsl$$}  # Names every namespace of this run (tests pass their own).
tmp=$(mktemp -d "${LAB_TMPDIR:-/tmp}/lockstep_scale_lab.XXXXXX")
chmod 755 "$tmp"
namespaces=()
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null
  done
  # Whatever still runs inside the lab's namespaces (an orted, a rank).
  local ns
  for ns in "${namespaces[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- binaries ------------------------------------------------------------------
if [[ -z "${LAB_BENCH:-}" || -z "${LAB_DELAY_LINK:-}" || -z "${LAB_TRAINER:-}" || -z "${LAB_LAUNCHER:-}" ]]; then
  say "building (bazel build -c opt) ..."
  (cd "$repo" && bazel build -c opt //tools/bench:collectives //tools/scale_lab:delay_link //trainers:ddp_trainer \
    //tools/launch:lockstep-run >"$tmp/build.log" 2>&1) || { tail -20 "$tmp/build.log" >&2; die "the build failed"; }
  bin=$(cd "$repo" && bazel info -c opt bazel-bin 2>/dev/null)
  LAB_BENCH=$bin/tools/bench/collectives LAB_DELAY_LINK=$bin/tools/scale_lab/delay_link
  LAB_TRAINER=$bin/trainers/ddp_trainer LAB_LAUNCHER=$bin/tools/launch/lockstep-run
fi
for b in "$LAB_BENCH" "$LAB_DELAY_LINK" "$LAB_TRAINER" "$LAB_LAUNCHER"; do [[ -x "$b" ]] || die "no executable $b"; done
# Copies other users' processes (uid 65534 in no namespace here) could not
# replace: the lab's own directory, root's.
cp "$LAB_BENCH" "$tmp/collectives"; cp "$LAB_DELAY_LINK" "$tmp/delay_link"; cp "$LAB_TRAINER" "$tmp/ddp_trainer"
cp "$LAB_LAUNCHER" "$tmp/lockstep-run"
want_mpi=0
if [[ "$workload" != trainer && "$workload" != launch && "$peers" != none ]]; then
  command -v mpicc >/dev/null && command -v mpirun >/dev/null || die "OpenMPI is missing: bash tools/setup.sh"
  mpicc -O2 -o "$tmp/mpi_collectives" "$here/mpi_collectives.c" 2>"$tmp/mpicc.log" ||
    { cat "$tmp/mpicc.log" >&2; die "mpicc failed"; }
  want_mpi=1
fi

# --- the cluster ---------------------------------------------------------------
say "the cluster: $hosts hosts x $ranks_per_host ranks, links of $delay_us us ..."
for (( h = 0; h < hosts; h++ )); do
  ns="${tag}h$h"
  ip netns add "$ns" || die "ip netns add $ns failed"
  namespaces+=("$ns")
  ip -n "$ns" link set lo up
done
# Host h's address on the lab's links (one host alone has none: loopback).
address() { if (( hosts > 1 )); then echo "10.77.0.$(( $1 + 1 ))"; else echo 127.0.0.1; fi; }
link_args=(--netns="$(IFS=,; echo "${namespaces[*]}")" --delay_us="$delay_us" --ifname=lab0
  --stats_json="$tmp/link_stats.json" --ready_file="$tmp/link_ready")
[[ -n "$rate" ]] && link_args+=(--rate="$rate")
if (( hosts > 1 )); then
  setsid "$tmp/delay_link" "${link_args[@]}" >"$tmp/link.log" 2>&1 &
  link_pid=$!
  pids+=("$link_pid")
  for _ in $(seq 300); do [[ -e "$tmp/link_ready" ]] && break; kill -0 "$link_pid" 2>/dev/null || break; sleep 0.1; done
  [[ -e "$tmp/link_ready" ]] || { cat "$tmp/link.log" >&2; die "the delay links did not come up within 30 s"; }
fi

load() { cut -d' ' -f1 /proc/loadavg; }
link_field() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ''))" "$@" 2>/dev/null; }

# Appends to the JSON output the rows of $1 (JSON lines), with the lab's fields.
emit() {
  local file=$1 impl=$2 measured_load=$3
  /usr/bin/python3 - "$file" "$impl" "$hosts" "$ranks_per_host" "$delay_us" "${rate:-none}" "$measured_load" \
    "${json:-/dev/null}" <<'PY'
import json, sys
src, impl, hosts, rph, delay, rate, load, out = sys.argv[1:]
with open(out, "a") as o:
  for line in open(src):
    line = line.strip()
    if not line.startswith("{"):
      continue
    row = json.loads(line)
    if "op" not in row:
      continue
    row.update(impl=impl, hosts=int(hosts), ranks_per_host=int(rph), delay_us=int(delay), rate=rate,
               load=float(load))
    row.setdefault("p", int(hosts) * int(rph))
    if "peak_rss_mib" in row:  # //tools/bench:collectives' name for it.
      row["rss_mib"] = row.pop("peak_rss_mib")
    o.write(json.dumps(row, sort_keys=True) + "\n")
    print(json.dumps(row, sort_keys=True))
PY
}

spin_off=(--worker_spin_microseconds=0 --wait_spin_microseconds=0 --transport_spin_microseconds=0 --bind_to=none)
port=$(( 20000 + RANDOM % 9000 ))

# Starts every rank of lockstep's program "$@" (host by host), each as its
# host (its network namespace, a UTS namespace named lab-h<h>), rank 0's
# stdout to $out; waits for all, within --timeout_s.
run_lockstep() {
  local out=$1; shift
  port=$(( port + 1 ))
  local h l r rank_pids=()
  for (( h = 0; h < hosts; h++ )); do
    for (( l = 0; l < ranks_per_host; l++ )); do
      r=$(( h * ranks_per_host + l ))
      setsid ip netns exec "${tag}h$h" unshare --uts -- /bin/sh -c 'hostname "$0" && exec "$@"' "lab-h$h" \
        env RANK=$r WORLD_SIZE=$p LOCAL_RANK=$l LOCAL_WORLD_SIZE=$ranks_per_host GROUP_RANK=$h \
        MASTER_ADDR="$(address 0)" MASTER_PORT=$port OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        timeout -k 10 "$timeout_s" "$@" >"$out.$r" 2>"$out.$r.err" </dev/null &
      rank_pids+=($!)
      pids+=($!)
    done
  done
  local failed=0 pid rc
  for (( r = 0; r < p; r++ )); do
    wait "${rank_pids[$r]}"
    rc=$?
    (( rc == 124 || rc == 137 )) && echo "rank $r: no end within --timeout_s=$timeout_s s (rc $rc)" >>"$out.$r.err"
    (( rc == 0 )) || failed=1
  done
  cp "$out.0" "$out"
  if (( failed )); then
    echo "run.sh: a lockstep rank failed; its errors:" >&2
    for (( r = 0; r < p; r++ )); do [[ -s "$out.$r.err" ]] && { echo "--- rank $r" >&2; tail -5 "$out.$r.err" >&2; }; done
    return 1
  fi
}

# etcd in host 0 (for --workload=launch --rdzv=etcd), once: sets etcd_endpoint.
etcd_endpoint=""
start_lab_etcd() {
  [[ -n "$etcd_endpoint" ]] && return 0
  local a; a=$(address 0)
  setsid ip netns exec "${tag}h0" etcd --name=lab --data-dir="$tmp/etcd" \
    --listen-client-urls="http://$a:2379" --advertise-client-urls="http://$a:2379" \
    --listen-peer-urls=http://127.0.0.1:2380 --initial-advertise-peer-urls=http://127.0.0.1:2380 \
    --initial-cluster=lab=http://127.0.0.1:2380 >"$tmp/etcd.log" 2>&1 </dev/null &
  pids+=($!)
  local _
  for _ in $(seq 600); do grep -q "ready to serve client requests" "$tmp/etcd.log" && break; sleep 0.05; done
  grep -q "ready to serve client requests" "$tmp/etcd.log" || { tail -20 "$tmp/etcd.log" >&2; return 1; }
  etcd_endpoint="$a:2379"
}

# lockstep-run on every host (each in its namespace and UTS namespace) with
# backend $2, running "${@:3}" as each host's workers; the agents' output to
# $1.<h>; the time the agents were started (seconds since the epoch) in
# launch_started. Waits for all, within --timeout_s.
run_launch() {
  local out=$1 backend=$2; shift 2
  port=$(( port + 1 ))
  local endpoint="$(address 0):$port"
  if [[ $backend == etcd ]]; then start_lab_etcd || return 1; endpoint=$etcd_endpoint; fi
  local token; token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  local h agent_pids=()
  launch_started=$(date +%s.%N)
  for (( h = 0; h < hosts; h++ )); do
    setsid ip netns exec "${tag}h$h" unshare --uts -- /bin/sh -c 'hostname "$0" && exec "$@"' "lab-h$h" \
      env LOCKSTEP_RDZV_TOKEN="$token" OPENBLAS_NUM_THREADS=1 \
      timeout -k 10 "$timeout_s" "$tmp/lockstep-run" --nnodes="$hosts" --nproc_per_node="$ranks_per_host" \
      --rdzv_backend="$backend" --rdzv_endpoint="$endpoint" --rdzv_id="lab$port" --monitor_interval=0.1 \
      --rdzv_conf=join_timeout=$(( timeout_s > 60 ? timeout_s - 30 : timeout_s )) --no_python "$@" \
      >"$out.$h" 2>&1 </dev/null &
    agent_pids+=($!)
    pids+=($!)
  done
  local failed=0 rc
  for (( h = 0; h < hosts; h++ )); do
    wait "${agent_pids[$h]}"
    rc=$?
    (( rc == 0 )) || { failed=1; echo "run.sh: lockstep-run ($backend) on host $h exited with $rc:" >&2; tail -8 "$out.$h" >&2; }
  done
  return $failed
}

# OpenMPI over the same hosts: mpirun in host 0, the others reached by an
# rsh agent that enters their namespaces.
run_mpi() {
  local out=$1 impl=$2; shift 2
  local agent="$tmp/lab_rsh"
  cat >"$agent" <<EOF
#!/bin/bash
# mpirun's rsh agent in the lab: the host is an address 10.77.0.N.
host=\$1; shift
h=\$(( \${host##*.} - 1 ))
exec ip netns exec "${tag}h\$h" unshare --uts -- /bin/sh -c 'hostname "\$0" && exec /bin/sh -c "\$1"' "lab-h\$h" "\$*"
EOF
  chmod 755 "$agent"
  : >"$tmp/hostfile"
  local h
  for (( h = 0; h < hosts; h++ )); do echo "$(address "$h") slots=$ranks_per_host" >>"$tmp/hostfile"; done
  # slots=R per host says "not oversubscribed", so OpenMPI would busy-poll
  # without yielding: ranks outnumber cores here, so make it yield, as it does
  # when it sees the oversubscription itself.
  local mca=(--mca btl self,vader,tcp --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
    --mca btl_vader_single_copy_mechanism none --mca mpi_yield_when_idle 1)
  (( hosts > 1 )) && mca+=(--mca btl_tcp_if_include lab0 --mca oob_tcp_if_include lab0)
  [[ "$impl" == openmpi_han ]] && mca+=(--mca coll_han_priority 100)
  setsid ip netns exec "${tag}h0" unshare --uts -- /bin/sh -c 'hostname lab-h0 && exec "$@"' _ \
    timeout -k 10 "$timeout_s" mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$p" \
    --hostfile "$tmp/hostfile" --map-by "ppr:$ranks_per_host:node" "${mca[@]}" \
    -x OMP_NUM_THREADS=1 "$tmp/mpi_collectives" "$@" >"$out" 2>"$out.err" </dev/null &
  local pid=$!
  pids+=("$pid")
  wait "$pid" || { echo "run.sh: $impl failed:" >&2; tail -15 "$out.err" >&2; return 1; }
}

status=0
lab_rows="$tmp/rows.jsonl"
: >"$lab_rows"
json_keep=$json
json=$lab_rows
# --lockstep_flags adds the benchmark's own flags (e.g. --transport=tcp).
read -r -a extra_flags <<<"$lockstep_flags"
bench_args=(--json --min_bytes="$min_bytes" --max_bytes="$max_bytes" --iters="$iters" --warmup="$warmup"
  --step_factor="$step_factor" --large_bytes="$large_bytes" --iters_large="$iters_large" --warmup_large="$warmup_large"
  --timeout=$(( timeout_s > 60 ? timeout_s - 30 : timeout_s )) "${spin_off[@]}" "${extra_flags[@]}")
(( check )) && bench_args+=(--check)
to_bytes() { numfmt --from=iec "$1"; }

case $workload in
  bench)
    # One launch sweeps every op on one group, as the peers' one mpirun does.
    say "lockstep ($ops) on $hosts x $ranks_per_host (delay $delay_us us) ..."
    if run_lockstep "$tmp/ls_bench" "$tmp/collectives" --op="$ops" "${bench_args[@]}"; then
      emit "$tmp/ls_bench" lockstep "$(load)" >/dev/null
    else
      status=1
    fi
    if (( want_mpi )); then
      for impl in ${peers//,/ }; do
        case $impl in openmpi) ;; han) impl=openmpi_han ;; *) echo "run.sh: no peer $impl" >&2; status=1; continue ;; esac
        say "$impl ($ops) ..."
        mpi_args=(--ops="$ops" --min_bytes="$(to_bytes "$min_bytes")" --max_bytes="$(to_bytes "$max_bytes")"
          --iters="$iters" --warmup="$warmup" --step_factor="$step_factor" --large_bytes="$(to_bytes "$large_bytes")"
          --iters_large="$iters_large" --warmup_large="$warmup_large")
        (( check )) && mpi_args+=(--check)
        if run_mpi "$tmp/mpi_$impl" "$impl" "${mpi_args[@]}"; then
          emit "$tmp/mpi_$impl" "$impl" "$(load)" >/dev/null
        else
          status=1
        fi
      done
    fi
    ;;
  setup)
    say "lockstep set-up on $hosts x $ranks_per_host ..."
    if run_lockstep "$tmp/ls_setup" "$tmp/collectives" --op=all_reduce --min_bytes=4 --max_bytes=4 --iters=1 \
        --warmup=0 --json "${spin_off[@]}" "${extra_flags[@]}"; then
      emit "$tmp/ls_setup" lockstep "$(load)" >/dev/null
    else
      status=1
    fi
    if (( want_mpi )); then
      if run_mpi "$tmp/mpi_setup" openmpi --ops=all_reduce --min_bytes=4 --max_bytes=4 --iters=1 --warmup=0; then
        emit "$tmp/mpi_setup" openmpi "$(load)" >/dev/null
      else
        status=1
      fi
    fi
    ;;
  launch)
    for backend in ${rdzv//,/ }; do
      say "lockstep-run ($backend) on $hosts hosts x $ranks_per_host ranks: start-up ..."
      if run_launch "$tmp/launch_$backend" "$backend" "$tmp/collectives" --op=all_reduce --min_bytes=4 --max_bytes=4 \
          --iters=1 --warmup=0 --check --json "${spin_off[@]}" "${extra_flags[@]}"; then
        # Rank 0 is on whichever host the rendezvous made node rank 0.
        /usr/bin/python3 - "$tmp/launch_$backend" "$tmp/launch_$backend.jsonl" "$backend" "$launch_started" "$hosts" <<'PY'
import json, re, sys
src, out, backend, started, hosts = sys.argv[1:]
lines = [l for h in range(int(hosts)) for l in open(f"{src}.{h}")]
for line in lines:
  m = re.match(r"^\[0\]: ?(\{.*\})\s*$", line)
  if not m:
    continue
  row = json.loads(m.group(1))
  row.update(op="launch_setup", rdzv=backend, bytes=0,
             startup_s=round(row["ready_unix_s"] - float(started), 3))
  open(out, "w").write(json.dumps(row) + "\n")
  break
else:
  sys.exit("run.sh: rank 0's row is missing from " + src)
PY
        [[ $? -eq 0 ]] && emit "$tmp/launch_$backend.jsonl" lockstep "$(load)" >/dev/null || status=1
      else
        status=1
      fi
    done
    # The trainers after every start-up row, so those ran on a quiet machine.
    (( trainer_steps > 0 )) || rdzv_trainers=""
    for backend in ${rdzv_trainers-${rdzv//,/ }}; do
      say "lockstep-run ($backend): the DDP trainer ..."
      if run_launch "$tmp/launch_trainer_$backend" "$backend" "$tmp/ddp_trainer" --dataset=synthetic \
          --synthetic_train_size=$(( 64 * p * trainer_steps )) --synthetic_test_size=$(( 64 * p )) --epochs=1 \
          --max_steps="$trainer_steps" --num_workers=0; then
        /usr/bin/python3 - "$tmp/launch_trainer_$backend" "$tmp/launch_trainer_$backend.jsonl" "$backend" \
            "$launch_started" "$hosts" <<'PY'
import json, re, sys, time
src, out, backend, started, hosts = sys.argv[1:]
text = "".join(open(f"{src}.{h}").read() for h in range(int(hosts)))
m = re.search(r"final test accuracy .* over (\d+) ranks, (\d+) steps", text)
if not m:
  sys.exit("run.sh: the trainer's final line is missing from " + src)
row = {"op": "launch_trainer", "rdzv": backend, "bytes": 0, "ranks_trained": int(m.group(1)),
       "steps": int(m.group(2)), "wall_s": round(time.time() - float(started), 3)}
m = re.search(r"([0-9.]+) samples/s", text)
if m: row["samples_per_s"] = float(m.group(1))
open(out, "w").write(json.dumps(row) + "\n")
PY
        [[ $? -eq 0 ]] && emit "$tmp/launch_trainer_$backend.jsonl" lockstep "$(load)" >/dev/null || status=1
      else
        status=1
      fi
    done
    ;;
  trainer)
    say "the DDP trainer on $hosts x $ranks_per_host ..."
    if run_lockstep "$tmp/trainer" "$tmp/ddp_trainer" --dataset=synthetic --synthetic_train_size=$(( 64 * p * trainer_steps )) \
        --synthetic_test_size=$(( 64 * p )) --epochs=1 --max_steps="$trainer_steps" --num_workers=0 \
        --metrics="$tmp/trainer_metrics.jsonl"; then
      /usr/bin/python3 - "$tmp/trainer" "$tmp/trainer.jsonl" "$trainer_steps" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
row = {"op": "ddp_trainer", "bytes": 0}
m = re.search(r"([0-9.]+) samples/s", text)
if m: row["samples_per_s"] = float(m.group(1))
m = re.search(r"peak RSS ([0-9.]+) MiB", text)
if m: row["rss_mib"] = float(m.group(1))
open(sys.argv[2], "w").write(json.dumps(row) + "\n")
PY
      emit "$tmp/trainer.jsonl" lockstep "$(load)" >/dev/null
    else
      status=1
    fi
    ;;
esac

# --- the links' own account, the table ----------------------------------------
say "$workload done; tearing the lab down"
valid=true lateness="" lateness_p50=""
if (( hosts > 1 )); then
  kill -TERM "$link_pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$link_pid" 2>/dev/null || break; sleep 0.1; done
  if [[ -s "$tmp/link_stats.json" ]]; then
    lateness=$(link_field "$tmp/link_stats.json" lateness_p99_us)
    lateness_p50=$(link_field "$tmp/link_stats.json" lateness_p50_us)
    [[ "$(link_field "$tmp/link_stats.json" valid)" == True ]] || valid=false
  else
    echo "run.sh: the delay links wrote no statistics: the run is not valid" >&2
    valid=false
  fi
fi
/usr/bin/python3 - "$lab_rows" "$valid" "${lateness:-0}" "${lateness_p50:-0}" "${json_keep:-/dev/null}" <<'PY'
import json, os, sys
rows_path, valid, lateness, lateness_p50, out = sys.argv[1:]
rows = [json.loads(l) for l in open(rows_path) if l.strip()]
# How lockstep's TCP ranks connected: on first use, or every pair at start-up.
connections = "full_mesh" if os.environ.get("LOCKSTEP_RUNTIME_CONNECT") == "0" else "on_demand"
with open(out, "w") as o:
  for r in rows:
    if r.get("impl", "lockstep") == "lockstep":
      r["connections"] = connections
    r["valid"] = valid == "true"
    r["lateness_p99_us"] = float(lateness or 0)
    r["lateness_p50_us"] = float(lateness_p50 or 0)
    o.write(json.dumps(r, sort_keys=True) + "\n")
cols = ["impl", "op", "bytes", "p", "hosts", "delay_us", "time_us", "p50_us", "p95_us", "wrong", "setup_s",
        "rss_mib", "fds", "load"]
if any(r.get("op", "").startswith("launch_") for r in rows):
  cols = ["impl", "op", "rdzv", "connections", "p", "hosts", "delay_us", "startup_s", "setup_s", "wall_s",
          "ranks_trained", "load"]
print("| " + " | ".join(cols) + " |")
print("|" + "---|" * len(cols))
for r in rows:
  print("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
if valid != "true":
  print(f"INVALID: the links' p99 lateness ({lateness} us) exceeds 10 % of the delay")
PY
exit $status
