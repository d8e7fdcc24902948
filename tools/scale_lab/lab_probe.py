"""Tiny network probes for the scale lab's tests (no ping or nc here).

  lab_probe.py udp-echo --bind ADDR --port P --ready FILE [--seconds S]
  lab_probe.py udp-ping --to ADDR --port P --count N --interval S --timeout S
      prints one JSON object: sent, received, rtt_us (a list), min/max in us
  lab_probe.py tcp-sink --bind ADDR --port P --ready FILE --out FILE [--seconds S]
      accepts one connection, reads to EOF, writes {"bytes", "sha256"} to FILE
  lab_probe.py tcp-source --to ADDR --port P --bytes N --seed K
      sends N pseudo-random bytes, prints {"bytes", "sha256"}

Every call has its own deadline (--seconds / --timeout); none waits forever.
"""

import argparse
import hashlib
import json
import os
import random
import socket
import sys
import time


def write_ready(path):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("ready\n")
    os.rename(tmp, path)


def udp_echo(args):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((args.bind, args.port))
    write_ready(args.ready)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            data, peer = s.recvfrom(65535)
        except socket.timeout:
            break
        s.sendto(data, peer)


def udp_ping(args):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((args.to, args.port))
    rtts = []
    for i in range(args.count):
        payload = b"%d" % i
        t0 = time.monotonic_ns()
        s.send(payload)
        deadline = time.monotonic() + args.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                reply = s.recv(65535)
            except (socket.timeout, ConnectionRefusedError):
                break
            if reply == payload:
                rtts.append((time.monotonic_ns() - t0) / 1e3)
                break
        time.sleep(args.interval)
    print(json.dumps({"sent": args.count, "received": len(rtts), "rtt_us": rtts,
                      "min_us": min(rtts) if rtts else None,
                      "max_us": max(rtts) if rtts else None}))


def tcp_sink(args):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((args.bind, args.port))
    ls.listen(1)
    write_ready(args.ready)
    ls.settimeout(args.seconds)
    conn, _ = ls.accept()
    end = time.monotonic() + args.seconds
    h = hashlib.sha256()
    n = 0
    while True:
        left = end - time.monotonic()
        if left <= 0:
            sys.exit("tcp-sink: no EOF within %s s" % args.seconds)
        conn.settimeout(left)
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        h.update(chunk)
        n += len(chunk)
    with open(args.out + ".tmp", "w") as f:
        json.dump({"bytes": n, "sha256": h.hexdigest()}, f)
    os.rename(args.out + ".tmp", args.out)


def tcp_source(args):
    data = random.Random(args.seed).randbytes(args.bytes)
    s = socket.create_connection((args.to, args.port), timeout=args.timeout)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    s.settimeout(args.timeout)
    s.recv(1)  # the sink's close: everything was read
    print(json.dumps({"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("udp-echo")
    e.add_argument("--bind", required=True)
    e.add_argument("--port", type=int, required=True)
    e.add_argument("--ready", required=True)
    e.add_argument("--seconds", type=float, default=60)
    q = sub.add_parser("udp-ping")
    q.add_argument("--to", required=True)
    q.add_argument("--port", type=int, required=True)
    q.add_argument("--count", type=int, default=20)
    q.add_argument("--interval", type=float, default=0.01)
    q.add_argument("--timeout", type=float, default=5)
    k = sub.add_parser("tcp-sink")
    k.add_argument("--bind", required=True)
    k.add_argument("--port", type=int, required=True)
    k.add_argument("--ready", required=True)
    k.add_argument("--out", required=True)
    k.add_argument("--seconds", type=float, default=60)
    c = sub.add_parser("tcp-source")
    c.add_argument("--to", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--bytes", type=int, required=True)
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--timeout", type=float, default=30)
    args = p.parse_args()
    {"udp-echo": udp_echo, "udp-ping": udp_ping, "tcp-sink": tcp_sink,
     "tcp-source": tcp_source}[args.cmd](args)


if __name__ == "__main__":
    main()
