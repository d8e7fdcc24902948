#!/usr/bin/env bash
# lockstep-run with --rdzv_backend etcd against a real etcd that this test
# starts (and stops, whatever happens):
#  a. 2 agents, the DDP trainer trains (1 worker each); a second job with the
#     same --rdzv_id is refused (the run ended), naming the etcdctl fix.
#  b. 3 agents (--nnodes 2:3); node rank 0's agent is SIGKILLed while its
#     workers run: with the state on etcd nobody hosted it, so the other two
#     see its lease lapse, re-form as a group of 2 and succeed.
#  c. etcd with TLS and client certificates: agents given cacert/cert/key
#     run; a stranger (uid 65534) without a certificate, or with one from
#     another CA, is refused at the TLS handshake with an error that says
#     which rdzv_conf keys to check.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "the etcd launch test (uid 65534 as a stranger, exclusive ports)"
launcher="$runfiles/tools/launch/lockstep-run"
trainer="$runfiles/trainers/ddp_trainer"
worker="$runfiles/tools/launch/test_worker"
tmp=$(mktemp -d /tmp/lockstep_etcd_test.XXXXXX)
chmod 755 "$tmp"
agents=()
cleanup() {
  [[ ${#agents[@]} -gt 0 ]] && lib_kill_all "${agents[@]}"
  local p
  for p in $(lib_pids_of "$tmp" "$trainer") $(lib_pids_of "$tmp" "$worker"); do kill -9 "$p" 2>/dev/null; done
  lib_etcd_stop
  rm -rf "$tmp"
}
trap cleanup EXIT

lib_etcd_start "$tmp/etcd" || { echo "FAIL: etcd did not start"; exit 1; }
etcd_flags=(--rdzv_backend etcd --rdzv_endpoint "$etcd_endpoint" --monitor_interval 0.1)

# a. Train on 2 agents that meet on etcd.
for node in 0 1; do
  { timeout -k 5 120 "$launcher" --nnodes 2 --nproc_per_node 1 "${etcd_flags[@]}" --rdzv_id train \
      --no_python "$trainer" --dataset=synthetic --synthetic_train_size=2048 --synthetic_test_size=100 \
      --batch_size=32 --epochs=1 --num_workers=0 --timeout=30 >"$tmp/a.$node.log" 2>&1
    exit $?; } 2>/dev/null &
  agents+=($!)
done
wait "${agents[0]}"; rc0=$?; wait "${agents[1]}"; rc1=$?; agents=()
lib_check '[[ $rc0 -eq 0 && $rc1 -eq 0 ]]' "$tmp/a.0.log" "$tmp/a.1.log" || echo "a: agents exited with $rc0 and $rc1"
lib_check 'grep -Eq "ddp_trainer: final test accuracy .* over 2 ranks, 32 steps" "$tmp/a.0.log" "$tmp/a.1.log"' \
  "$tmp/a.0.log"
timeout -k 5 60 "$launcher" --nnodes 2 "${etcd_flags[@]}" --rdzv_id train --no_python "$worker" >"$tmp/a.again.log" 2>&1
rc=$?
lib_check '[[ $rc -eq 1 ]] && grep -q "the run --rdzv_id train on etcd at $etcd_endpoint already ended (succeeded" "$tmp/a.again.log" &&
  grep -q "etcdctl del --prefix /lockstep-run/train/" "$tmp/a.again.log"' "$tmp/a.again.log"
[[ $fail -eq 0 ]] && echo "ok: a. trained on 2 agents over etcd; the ended run is refused: $(tail -1 "$tmp/a.again.log" | cut -c1-120)..."

# b. Node rank 0's agent dies; the others go on without it.
fail_before=$fail
out="$tmp/b"; mkdir -p "$out"
for node in 0 1 2; do
  { timeout -k 5 120 "$launcher" --nnodes 2:3 --nproc_per_node 1 "${etcd_flags[@]}" --rdzv_id lose0 --max_restarts 1 \
      --rdzv_conf heartbeat_timeout=3,last_call_timeout=1 \
      --no_python "$worker" --out="$out" --fail_attempt=0 --fail_rank=99 --others_wait="$out/never" \
      >"$tmp/b.$node.log" 2>&1
    exit $?; } 2>/dev/null &
  agents+=($!)
done
lib_wait_for 60 "b: 3 workers running" test -e "$out/env.2.0" -a -e "$out/env.1.0" -a -e "$out/env.0.0" || fail=1
victim=
for node in 0 1 2; do grep -q "node rank 0 of 3" "$tmp/b.$node.log" && victim=$node; done
lib_check '[[ -n "$victim" ]]' "$tmp/b.0.log"
agent0=$(for p in $(lib_descendants "${agents[$victim]}"); do
  [[ "$(readlink -f "/proc/$p/exe")" == "$(readlink -f "$launcher")" ]] && echo "$p"; done | head -1)
w0=$(sed -n 's/^PID=//p' "$out/env.0.0")
lib_check '[[ -n "$agent0" && -n "$w0" ]]' "$tmp/b.$victim.log"
kill -9 "$agent0"
lib_check 'lib_wait_for 10 "b: the killed agent'"'"'s worker (pid $w0) to die" lib_dead "$w0"' "$tmp/b.$victim.log"
survivors=()
for node in 0 1 2; do [[ $node != "$victim" ]] && survivors+=($node); done
for node in "${survivors[@]}"; do
  wait "${agents[$node]}"; rc=$?
  log="$tmp/b.$node.log"
  lib_check '[[ $rc -eq 0 ]]' "$log" || echo "b: agent $node exited with $rc"
  lib_check 'grep -q "attempt 0 failed (the agent of node rank 0 on host .*no heartbeat" "$log"' "$log"
  lib_check 'grep -Eq "attempt 1 \(restart 1\): node rank [01] of 2" "$log"' "$log"
  lib_check 'grep -q "every worker on every node succeeded (attempt 1)" "$log"' "$log"
done
wait "${agents[$victim]}" 2>/dev/null
agents=()
for rank in 0 1; do
  lib_check 'grep -qx "WORLD_SIZE=2" "$out/env.$rank.1"' "$tmp/b.${survivors[0]}.log"
done
lib_check '[[ ! -e "$out/env.2.1" ]]'
[[ $fail -eq $fail_before ]] && echo "ok: b. node rank 0's agent SIGKILLed: the other two re-formed as 2 nodes and succeeded"

# c. TLS with client certificates: members in, strangers out.
fail_before=$fail
lib_etcd_stop
pki="$tmp/pki"; mkdir -p "$pki"
(
  cd "$pki" || exit 1
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=lockstep-test-ca
  openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem -days 2 -subj /CN=stranger-ca
  printf 'subjectAltName=IP:127.0.0.1\n' >san.ext
  openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=etcd
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile san.ext
  openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=agent
  openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2
  openssl req -newkey rsa:2048 -nodes -keyout forged.key -out forged.csr -subj /CN=agent
  openssl x509 -req -in forged.csr -CA other-ca.pem -CAkey other-ca.key -CAcreateserial -out forged.pem -days 2
  chmod 644 ./*.pem && chmod 600 ./*.key && chmod 644 forged.key
) >"$tmp/pki.log" 2>&1 || { echo "FAIL: openssl could not make the test certificates"; cat "$tmp/pki.log"; exit 1; }
lib_etcd_start "$tmp/etcd-tls" https --cert-file="$pki/server.pem" --key-file="$pki/server.key" \
  --client-cert-auth --trusted-ca-file="$pki/ca.pem" || { echo "FAIL: etcd with TLS did not start"; exit 1; }
tls_flags=(--rdzv_backend etcd-v2 --rdzv_endpoint "$etcd_endpoint" --monitor_interval 0.1)
for node in 0 1; do
  { timeout -k 5 60 "$launcher" --nnodes 2 "${tls_flags[@]}" --rdzv_id tls \
      --rdzv_conf "ca_cert=$pki/ca.pem,ssl_cert=$pki/client.pem,ssl_cert_key=$pki/client.key" \
      --no_python "$worker" --print=tls >"$tmp/c.$node.log" 2>&1
    exit $?; } 2>/dev/null &
  agents+=($!)
done
wait "${agents[0]}"; rc0=$?; wait "${agents[1]}"; rc1=$?; agents=()
lib_check '[[ $rc0 -eq 0 && $rc1 -eq 0 ]]' "$tmp/c.0.log" "$tmp/c.1.log" || echo "c: members exited with $rc0 and $rc1"
# The stranger: no certificate, then a certificate of another CA.
# (Copies of the binaries where uid 65534 can run them.)
mkdir -p "$tmp/bin" && cp "$launcher" "$worker" "$tmp/bin/" && chmod 755 "$tmp/bin" "$tmp/bin/"*
stranger() { setpriv --reuid=65534 --regid=65534 --clear-groups -- timeout -k 5 60 "$tmp/bin/lockstep-run" "$@"; }
stranger --nnodes 2 "${tls_flags[@]}" --rdzv_id tls2 --rdzv_conf "cacert=$pki/ca.pem" \
  --no_python "$tmp/bin/test_worker" >"$tmp/c.nocert.log" 2>&1
rc_nocert=$?
stranger --nnodes 2 "${tls_flags[@]}" --rdzv_id tls2 \
  --rdzv_conf "cacert=$pki/ca.pem,cert=$pki/forged.pem,key=$pki/forged.key" --no_python "$tmp/bin/test_worker" >"$tmp/c.forged.log" 2>&1
rc_forged=$?
# The members' key is not the stranger's to read.
stranger --nnodes 2 "${tls_flags[@]}" --rdzv_id tls2 \
  --rdzv_conf "cacert=$pki/ca.pem,cert=$pki/client.pem,key=$pki/client.key" --no_python "$tmp/bin/test_worker" >"$tmp/c.steal.log" 2>&1
rc_steal=$?
for f in nocert forged; do
  log="$tmp/c.$f.log"
  lib_check 'grep -q "lockstep-run: cannot use etcd at $etcd_endpoint for the rendezvous: .*etcd at https://$etcd_endpoint" "$log" &&
    grep -q "check rdzv_conf protocol, cacert, cert and key" "$log"' "$log"
done
lib_check '[[ $rc_nocert -eq 1 && $rc_forged -eq 1 ]]' "$tmp/c.nocert.log" "$tmp/c.forged.log"
lib_check '[[ $rc_steal -ne 0 ]] && grep -q "key=$pki/client.key cannot be read" "$tmp/c.steal.log"' "$tmp/c.steal.log"
lib_check '! ETCDCTL_API=3 setpriv --reuid=65534 --regid=65534 --clear-groups -- timeout 20 etcdctl \
  --endpoints="https://$etcd_endpoint" --cacert="$pki/ca.pem" get --prefix /lockstep-run/ >"$tmp/c.etcdctl.log" 2>&1' \
  "$tmp/c.etcdctl.log"
[[ $fail -eq $fail_before ]] && echo "ok: c. TLS: members ran; strangers refused: $(grep -o 'etcd at https[^;]*' "$tmp/c.forged.log" | head -1)"
lib_finish
