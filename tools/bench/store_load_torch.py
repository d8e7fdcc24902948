"""store_load's peer: PyTorch 1.13's torch.distributed.TCPStore under the same
start-up pattern (store_load.cc): N clients each set their own key, wait for
all N, get each one (TCPStore has no multi-get) and leave through a barrier
(add on a counter; the last one in sets a key the others wait for).

    /usr/bin/python3 store_load_torch.py --clients=N --timeout_s=T

This process runs the server (TCPStore's is a thread of the master's
process) and nothing else, so its CPU time and peak RSS are the server's;
the clients are threads in worker processes (TCPStore's calls release the
GIL). The clock starts once every worker has imported torch and started
nothing yet, and stops when the last client is through the barrier. Prints
"duration_s D server_cpu_s C server_peak_mib M server_idle_mib I" (the
idle figure is the process with torch imported, before any client), or "timeout T" when the
clients were not done within T seconds (they are killed).
"""

import argparse
import datetime
import os
import resource
import select
import subprocess
import sys
import threading
import time


def key(i):
    return f"addr/{i}"


def value(i):
    return f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}:29500"


def raise_file_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def worker(args):
    import torch.distributed as dist
    raise_file_limit()
    timeout = datetime.timedelta(seconds=args.timeout_s)
    errors = []

    def client(i):
        try:
            store = dist.TCPStore("127.0.0.1", args.port, None, False, timeout=timeout)
            store.set(key(i), value(i))
            store.wait([key(j) for j in range(args.clients)])
            for j in range(args.clients):
                got = store.get(key(j)).decode()
                if got != value(j):
                    raise RuntimeError(f"client {i} read {got!r} for {key(j)}, expected {value(j)!r}")
            if store.add("barrier/count", 1) == args.clients:
                store.set("barrier/done", "1")
            store.wait(["barrier/done"])
        except Exception as e:  # noqa: BLE001 - reported to the driver
            errors.append(f"client {i}: {e}")

    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.first, args.clients, args.stride)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("\n".join(errors[:5]), file=sys.stderr, flush=True)
        sys.exit(1)
    print("done", flush=True)


def usage():
    """CPU seconds so far, resident MiB now, peak resident MiB."""
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    mib = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                mib[line[:5]] = float(line.split()[1]) / 1024
    return cpu.ru_utime + cpu.ru_stime, mib.get("VmRSS", 0.0), mib.get("VmHWM", 0.0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--timeout_s", type=int, default=600)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--port", type=int)
    parser.add_argument("--first", type=int)
    parser.add_argument("--stride", type=int)
    args = parser.parse_args()
    if args.port is not None:
        worker(args)
        return
    import torch.distributed as dist
    raise_file_limit()
    server = dist.TCPStore("127.0.0.1", 0, None, True, timeout=datetime.timedelta(seconds=args.timeout_s),
                           wait_for_workers=False)
    processes = max(1, min(args.processes, args.clients))
    workers = [subprocess.Popen([sys.executable, os.path.abspath(__file__), f"--clients={args.clients}",
                                 f"--timeout_s={args.timeout_s}", f"--port={server.port}", f"--first={p}",
                                 f"--stride={processes}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for p in range(processes)]
    try:
        for w in workers:
            if w.stdout.readline().strip() != "ready":
                sys.exit("store_load_torch: a worker did not start")
        cpu_before, idle, _ = usage()
        start = time.monotonic()
        for w in workers:
            w.stdin.write("go\n")
            w.stdin.flush()
        pending = {w.stdout.fileno(): w for w in workers}
        deadline = start + args.timeout_s
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                print(f"timeout {args.timeout_s}", flush=True)
                return
            ready, _, _ = select.select(list(pending), [], [], left)
            for fd in ready:
                w = pending.pop(fd)
                if w.stdout.readline().strip() != "done":
                    sys.exit(f"store_load_torch: a worker failed (exit {w.wait()})")
        seconds = time.monotonic() - start
        cpu_after, _, peak = usage()
        print(f"duration_s {seconds:.3f} server_cpu_s {cpu_after - cpu_before:.2f} server_peak_mib {peak:.1f} "
              f"server_idle_mib {idle:.1f}", flush=True)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
            w.wait()


if __name__ == "__main__":
    main()
