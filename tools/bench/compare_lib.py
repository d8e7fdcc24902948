#!/usr/bin/python3
"""The medians, ratios and markdown tables of the tools/bench/compare_*.sh scripts.

The scripts run the measurements (shell) and write one measurement per line
to a rows file, whitespace-separated fields; this module reads them and
prints the tables. Standard library only (/usr/bin/python3).

    python3 tools/bench/compare_lib.py table ROWS --fields "run tool bytes mean busbw" \\
        --series tool --pair run --rows bytes \\
        --col 'size={size(bytes)}' \\
        --col 'lockstep={v("mean", "lockstep"):.1f} us' \\
        --col 'OpenMPI / lockstep={ratio("mean", "mpi", "lockstep").spread(".2f", "x")}'

prints one markdown row per size: the size, lockstep's median mean time,
and the median (and range) of the per-run ratios OpenMPI / lockstep.

Subcommands:
  table ROWS ...      a markdown table (or one per --by group); see below.
  say ROWS ... TPL    one line, TPL evaluated over all the rows.
  json FIELD...       fields of the last JSON line on stdin (or of the one
                      JSON document there), space-separated: nan where
                      absent, a.b for b inside a, lists joined by commas
                      (FIELD:max: their largest); --all: of every JSON
                      line; --has TEXT: only lines containing TEXT.
  gbench CSV COLUMN   "name value" per row of a Google Benchmark CSV file.
  trace-phases TRACE NAME...  a one-row table: mean ms per step of each named
                      span of a Chrome trace (steps: the "forward" spans);
                      --title: a line before it ({steps}: their number).

A table's rows: one per distinct value of the --rows fields (sorted, numbers
as numbers; F:seen in order of appearance; --order F=a,b to pick and order),
or one per row of the file (--each). Its cells are templates: Python f-string
bodies, evaluated once per table row. They see the row's grouping fields (all
of a row's fields with --each) by name, as text, and:
  v(field, *series, **filters)  the row's values of `field` (of these
      series; --series names the field that holds them) as a Sample: a
      float that is their median (nan when none) with .lo, .hi, .n,
      .values, .range(fmt) "lo-hi", .spread(fmt, unit) "med (lo-hi)" and
      .join(fmt) "a, b, c".
  V(...)                  the same over every row of the table (or --by group).
  ratio(field, num, den, **filters)  per-pair ratios num/den (rows paired
      by --pair) as a Sample; num or den may be a tuple of series, of which
      each pair takes the smallest value (the best of several peers).
  rowratio(num_field, den_field)  the ratio of two fields of each row.
  best(*samples)          the sample with the smallest median.
  timing(*series)         a benchmark's cell: "mean us / busbw (p50, p95; range)".
  distinct(field), counts(field)  how many values; "a 3, b 2".
  last(field), join(field, fmt)  the last value; every value, in order.
  size(bytes)             "4 KiB", "64 MiB", "512 B".
nan prints as "n/a". Names given by --let are there too.
"""
import argparse
import csv
import json
import math
import re
import statistics
import sys

NAN = float("nan")


def num(text):
    """`text` as a float, nan if it is not a number."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return NAN


def ok(x):
    return x is not None and not math.isnan(x)


def median(values):
    """The median of the numbers among `values` (nan when there are none)."""
    v = [x for x in values if ok(x)]
    return statistics.median(v) if v else NAN


def size(b):
    b = int(float(b))
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"


def na(text):
    """Cells print nan (a median of nothing, a ratio with a hole) as n/a."""
    return re.sub(r"(?<![A-Za-z])-?nan(?![a-wyz])", "n/a", text)


class Sample(float):
    """Measurements of one thing: a float equal to their median."""

    def __new__(cls, values):
        values = [x for x in values if ok(x)]
        self = super().__new__(cls, statistics.median(values) if values else NAN)
        self.values = values
        return self

    @property
    def n(self):
        return len(self.values)

    @property
    def lo(self):
        return min(self.values) if self.values else NAN

    @property
    def hi(self):
        return max(self.values) if self.values else NAN

    def range(self, fmt=".2f"):
        return f"{self.lo:{fmt}}-{self.hi:{fmt}}" if self.values else "n/a"

    def join(self, fmt=".2f", unit="", sep=", "):
        """Every value, in the order measured."""
        return sep.join(f"{x:{fmt}}{unit}" for x in self.values)

    def spread(self, fmt=".2f", unit=""):
        """'median<unit> (lo-hi)', or n/a."""
        return f"{self:{fmt}}{unit} ({self.range(fmt)})" if self.values else "n/a"


def best(*samples):
    """The sample with the smallest median (a missing one never wins)."""
    return min(samples, key=lambda s: s if ok(s) else math.inf)


# --- rows -------------------------------------------------------------------


def read_rows(path, fields):
    """Each line of `path` with as many fields as `fields`, as a dict of text
    (a line with more or fewer, a half-written one, is left out)."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == len(fields):
                rows.append(dict(zip(fields, parts)))
    return rows


def read_json_lines(lines, has=None):
    """The JSON objects among `lines` (those containing `has`, if given); a
    bare nan or inf, as C's printf writes them, reads as NaN or Infinity."""
    out = []
    for line in lines:
        line = line.strip()
        if line.startswith("{") and (has is None or has in line):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                try:
                    out.append(json.loads(re.sub(r"(:\s*)(-?)(nan|inf)\b", lambda m: m.group(1) + (
                        "NaN" if m.group(3) == "nan" else m.group(2) + "Infinity"), line)))
                except json.JSONDecodeError:
                    continue
    return out


def same(value, want):
    """Field text `value` equals `want` (numbers compare as numbers)."""
    if ok(num(value)) and ok(num(want)):
        return num(value) == num(want)
    return str(value) == str(want)


def sort_key(value):
    """Numbers before text, numbers in numeric order."""
    return (0, num(value), "") if ok(num(value)) else (1, 0.0, str(value))


def group(rows, fields, seen=()):
    """[(values, rows)] per distinct combination of `fields`: sorted, but in
    order of appearance for the fields in `seen`."""
    groups, first = {}, [{} for _ in fields]
    for r in rows:
        key = tuple(r.get(f, "") for f in fields)
        groups.setdefault(key, []).append(r)
        for i, k in enumerate(key):
            first[i].setdefault(k, len(first[i]))

    def order(key):
        return tuple((0, first[i][k], "") if fields[i] in seen else sort_key(k) for i, k in enumerate(key))

    return [(k, groups[k]) for k in sorted(groups, key=order)]


def pair_key(row, pair):
    return tuple(row.get(f, "") for f in pair)


def unify(rows, field, pair):
    """Within each pair, a field whose values differ becomes 'mixed'."""
    values = {}
    for r in rows:
        values.setdefault(pair_key(r, pair), set()).add(r[field])
    for r in rows:
        if len(values[pair_key(r, pair)]) > 1:
            r[field] = "mixed"


def complete_pairs(rows, series, pair):
    """The rows of pairs that hold every series, and how many pairs did not."""
    every = {r[series] for r in rows}
    held = {}
    for r in rows:
        held.setdefault(pair_key(r, pair), set()).add(r[series])
    whole = {k for k, s in held.items() if s == every}
    return [r for r in rows if pair_key(r, pair) in whole], len(held) - len(whole)


# --- templates --------------------------------------------------------------


class Scope:
    """What a template sees for one table row: its rows, and the table's."""

    def __init__(self, rows, table_rows, series, pair):
        self.rows, self.table_rows, self.series, self.pair = rows, table_rows, series, pair

    def select(self, rows, series, filters):
        out = []
        for r in rows:
            if series and (self.series is None or r.get(self.series) not in series):
                continue
            if all(same(r.get(k), w) for k, w in filters.items()):
                out.append(r)
        return out

    def v(self, field, *series, **filters):
        return Sample(num(r.get(field)) for r in self.select(self.rows, series, filters))

    def V(self, field, *series, **filters):
        return Sample(num(r.get(field)) for r in self.select(self.table_rows, series, filters))

    def ratio(self, field, num_series, den_series, **filters):
        def by_pair(series):
            series = (series,) if isinstance(series, str) else tuple(series)
            out = {}
            for r in self.select(self.rows, series, filters):
                x = num(r.get(field))
                if ok(x):
                    k = pair_key(r, self.pair)
                    out[k] = min(out.get(k, math.inf), x)
            return out

        top, bottom = by_pair(num_series), by_pair(den_series)
        return Sample(top[k] / bottom[k] for k in top if k in bottom and bottom[k] > 0)

    def rowratio(self, num_field, den_field):
        return Sample(num(r.get(num_field)) / num(r.get(den_field)) for r in self.rows
                      if ok(num(r.get(den_field))) and num(r.get(den_field)) > 0)

    def timing(self, *series, **filters):
        """A benchmark's cell from rows with mean, bw, p50 and p95 fields:
        'mean us / busbw (p50 x, p95 y; range lo-hi us)', p50 and p95 where
        the tool reports them."""
        rows = self.select(self.rows, series, filters)
        if not rows:
            return "n/a"
        mean = Sample(num(r.get("mean")) for r in rows)
        pct = ""
        if any(ok(num(r.get("p50"))) for r in rows):
            pct = f"p50 {self.v('p50', *series, **filters):.1f}, p95 {self.v('p95', *series, **filters):.1f}; "
        return na(f"{mean:.1f} us / {self.v('bw', *series, **filters):.2f} ({pct}range {mean.range('.0f')} us)")

    def distinct(self, field):
        return len({r.get(field) for r in self.rows})

    def counts(self, field):
        """'a 3, b 2': how many pairs (or rows) have each value of `field`."""
        found = {}
        for r in self.rows:
            found.setdefault(r.get(field), set()).add(pair_key(r, self.pair) if self.pair else id(r))
        return ", ".join(f"{k} {len(v)}" for k, v in sorted(found.items()))

    def last(self, field):
        return self.rows[-1].get(field, "n/a") if self.rows else "n/a"

    def join(self, field, fmt="", sep=", "):
        return sep.join(f"{num(r.get(field)):{fmt}}" if fmt else str(r.get(field)) for r in self.rows)

    def names(self, extra):
        env = {"v": self.v, "V": self.V, "ratio": self.ratio, "rowratio": self.rowratio, "best": best,
               "timing": self.timing, "distinct": self.distinct, "counts": self.counts, "last": self.last,
               "join": self.join, "size": size, "num": num, "median": median, "math": math}
        env.update(extra)  # The row's fields and --let's names (a field hides a helper of its name).
        return env


def render(template, env):
    """The f-string body `template` evaluated in `env`, nan as n/a (and a
    division by zero too: a figure that cannot be). Its expressions may use
    both kinds of quotes."""
    for quote in ("'''", '"""'):
        if quote not in template and not template.endswith(quote[0]):
            source = "rf" + quote + template + quote
            break
    else:
        source = "f" + repr(template)
    try:
        return na(eval(source, {"__builtins__": __builtins__}, env))  # noqa: S307 (our own scripts' text)
    except ZeroDivisionError:
        return "n/a"


def print_table(headers, rows, note=None, header=True):
    """A markdown table; `note`: one more header cell, outside the columns."""
    if header:
        print("| " + " | ".join(headers) + " |" + (f" {note}" if note else ""))
        print("|" + "---|" * len(headers))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


# --- subcommands ------------------------------------------------------------


def parse_assignments(items, what):
    out = []
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep:
            sys.exit(f"compare_lib: {what} '{item}': expected NAME=VALUE")
        out.append((name.strip(), value))
    return out


def load(args):
    """The rows of args.path after --fill, --where, --unify and --complete."""
    fields = args.fields.split()
    rows = read_rows(args.path, fields)
    for target, source in parse_assignments(args.fill, "--fill"):
        for r in rows:
            if not ok(num(r.get(target))):
                r[target] = r[source]
    lets = {name: eval(value, {}, {}) for name, value in parse_assignments(args.let, "--let")}  # noqa: S307
    for where in args.where or []:
        rows = [r for r in rows if eval(where, {}, {**lets, **r, "num": num})]  # noqa: S307
    pair = args.pair.split() if args.pair else []
    for field in args.unify or []:
        unify(rows, field, pair)
    missing = 0
    if args.complete:
        rows, missing = complete_pairs(rows, args.series, pair)
    return rows, lets, pair, missing


def table_rows(args, rows, lets, pair, columns):
    """The cells of every table row of one table (or --by group)."""
    out = []
    if args.each:
        for r in rows:
            scope = Scope([r], rows, args.series, pair)
            out.append([render(t, scope.names({**lets, **r})) for _, t in columns])
        return out
    spec = (args.rows or "").split()
    fields = [f.split(":")[0] for f in spec]
    seen = {f.split(":")[0] for f in spec if f.endswith(":seen")}
    groups = group(rows, fields, seen)
    for field, values in parse_assignments(args.order, "--order"):
        wanted = values.split(",")
        i = fields.index(field)
        groups = sorted((g for g in groups if g[0][i] in wanted), key=lambda g: wanted.index(g[0][i]))
    if args.require:
        groups = [g for g in groups if all(any(r.get(args.series) == s for r in g[1]) for s in args.require)]
    if args.rollup:
        groups = rolled_up(args, groups, fields, rows, lets, pair)
    for key, members in groups:
        scope = Scope(members, rows, args.series, pair)
        env = scope.names({**lets, **dict(zip(fields, key))})
        out.append([render(t, env) for _, t in columns])
    return out


def rolled_up(args, groups, fields, rows, lets, pair):
    """--rollup F=LABEL: per value of the other row fields, a group over every
    value of F labelled LABEL (a template), when F has more than one value."""
    ((field, label),) = parse_assignments([args.rollup], "--rollup")
    i = fields.index(field)
    out, by_rest = [], {}
    for key, members in groups:
        by_rest.setdefault(key[:i] + key[i + 1:], []).append((key, members))
    for rest, parts in by_rest.items():
        if len(parts) > 1:
            members = [r for _, m in parts for r in m]
            text = render(label, Scope(members, rows, args.series, pair).names(lets))
            whole = (rest[:i] + (text,) + rest[i:], members)
            parts = [whole] + parts if args.rollup_first else parts + [whole]
        out.extend(parts)
    return out


def cmd_table(args):
    rows, lets, pair, missing = load(args)
    columns = parse_assignments(args.col, "--col")
    by = args.by.split() if args.by else []
    for key, members in group(rows, by, set(by)) if by else [((), rows)]:
        env = Scope(members, members, args.series, pair).names({**lets, **dict(zip(by, key))})
        if args.title is not None:
            print(render(args.title, env))
        print_table([h for h, _ in columns], table_rows(args, members, lets, pair, columns),
                    note=render(args.note, env) if args.note else None, header=not args.no_header)
        for footer in args.footer or []:
            print(render(footer, env))
    if missing:
        print(f"({missing} pair(s) with a side missing (a run failed): not counted)")


def cmd_say(args):
    rows, lets, pair, _ = load(args)
    print(render(args.template, Scope(rows, rows, args.series, pair).names(lets)))


def cmd_json(args):
    text = sys.stdin.read()
    try:
        found = [json.loads(text)]  # One document (iperf3 -J), not JSON lines.
    except json.JSONDecodeError:
        found = read_json_lines(text.splitlines(), args.has)
    if not found:
        sys.exit("compare_lib json: no JSON line" + (f" with '{args.has}'" if args.has else ""))

    def text_of(d, field):
        path, _, how = field.partition(":")
        value = d
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if value is None:
            return "nan"
        if isinstance(value, list):
            return str(max(value)) if how == "max" else ",".join(str(x) for x in value)
        return str(value)

    for d in found if args.all else found[-1:]:
        print(" ".join(text_of(d, f) for f in args.fields))


def cmd_gbench(args):
    with open(args.csv) as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            if row.get(args.column):
                print(row["name"], row[args.column])


def cmd_trace_phases(args):
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    steps = sum(1 for e in events if e.get("name") == "forward")
    total = {}
    for e in events:
        if e.get("ph") == "X":
            total[e["name"]] = total.get(e["name"], 0.0) + e["dur"]
    if args.title:
        print(args.title.format(steps=steps))
    steps = steps or 1
    print_table(args.names, [[f"{total.get(n, 0) / steps / 1000:.3f}" for n in args.names]])


def add_row_options(p):
    p.add_argument("path", metavar="ROWS", help="the rows file: one measurement per line")
    p.add_argument("--fields", required=True, help="the names of a row's fields, in order")
    p.add_argument("--where", action="append", help="keep the rows where this expression holds")
    p.add_argument("--fill", action="append", help="F=G: G's value where F is not a number")
    p.add_argument("--let", action="append", help="NAME=EXPR: a name the templates can use")
    p.add_argument("--series", help="the field that names what was measured (tool, side)")
    p.add_argument("--pair", help="the fields that pair measurements for ratio() (run, pair)")
    p.add_argument("--unify", action="append", help="within a pair, differing values become 'mixed'")
    p.add_argument("--complete", action="store_true", help="only pairs that hold every series")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("table", help="markdown table(s) of the rows")
    add_row_options(t)
    t.add_argument("--col", action="append", required=True, help="HEADER=TEMPLATE, one per column")
    t.add_argument("--rows", help="fields: one table row per value (F:seen: in order of appearance)")
    t.add_argument("--each", action="store_true", help="one table row per row")
    t.add_argument("--order", action="append", help="F=a,b,c: only these values of F, in this order")
    t.add_argument("--require", action="append", help="only table rows that hold this series")
    t.add_argument("--rollup", help="F=LABEL: a row over every value of F too (when several)")
    t.add_argument("--rollup-first", action="store_true", help="the --rollup row before the others")
    t.add_argument("--by", help="fields: one table per value")
    t.add_argument("--title", help="a line before each table")
    t.add_argument("--note", help="a last header cell, outside the columns")
    t.add_argument("--footer", action="append", help="a line after each table")
    t.add_argument("--no-header", action="store_true", help="no header: the rows go on with the table before")
    s = sub.add_parser("say", help="one line from all the rows")
    add_row_options(s)
    s.add_argument("template")
    j = sub.add_parser("json", help="fields of JSON lines on stdin")
    j.add_argument("fields", nargs="+")
    j.add_argument("--all", action="store_true")
    j.add_argument("--has")
    g = sub.add_parser("gbench", help="name and one column of a Google Benchmark CSV")
    g.add_argument("csv")
    g.add_argument("column")
    p = sub.add_parser("trace-phases", help="mean ms per step of named spans of a Chrome trace")
    p.add_argument("trace")
    p.add_argument("names", nargs="+")
    p.add_argument("--title")
    args = parser.parse_args(argv)
    {"table": cmd_table, "say": cmd_say, "json": cmd_json, "gbench": cmd_gbench,
     "trace-phases": cmd_trace_phases}[args.command](args)


if __name__ == "__main__":
    main()
