#!/usr/bin/python3
"""How much of DDP's communication overlaps backward, from a trainer's trace.

    /usr/bin/python3 tools/bench/trace_overlap.py TRACE_DIR/trace_rank0.json

Reads the Chrome trace a trainer writes with --trace (trainers/trace.h: "X"
events; "backward" on the training thread, "allreduce bucket <i>" on the
communication thread) and prints, per step, how many bucket all-reduces
completed before that step's backward ended, and how long the backward went
on after the first bucket completed. One line per step, then a summary line
(steps from the second on).
"""
import json
import sys


def main(path):
    events = json.load(open(path))["traceEvents"]
    backward = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and e["name"] == "backward")
    buckets = sorted((e["ts"] + e["dur"], e["name"]) for e in events
                     if e.get("ph") == "X" and e["name"].startswith("allreduce bucket"))
    before_all, total_all, steps_with_overlap = 0, 0, 0
    for i, (start, end) in enumerate(backward):
        mine = [t for t, _ in buckets if start <= t <= end + 1e9 and
                (i + 1 == len(backward) or t < backward[i + 1][0])]
        before = [t for t in mine if t <= end]
        lead_ms = (end - min(before)) / 1e3 if before else 0.0
        print(f"step {i + 1}: {len(before)} of {len(mine)} buckets done before backward ended "
              f"(backward {(end - start) / 1e3:.1f} ms; {lead_ms:.1f} ms of it after the first bucket completed)")
        if i > 0:
            before_all += len(before)
            total_all += len(mine)
            steps_with_overlap += bool(before)
    later = max(len(backward) - 1, 0)
    print(f"from step 2 on: {before_all} of {total_all} buckets completed before their backward ended; "
          f"{steps_with_overlap} of {later} steps had at least one")


if __name__ == "__main__":
    main(sys.argv[1])
