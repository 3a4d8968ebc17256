#!/usr/bin/env python3
"""Markdown tables from bench/run.sh's results.tsv.

Each line of results.tsv: runtime, workers, round, workload, value, unit, check, note. A figure is
the median over the rounds of each round's median over MXBENCH_REPEATS repeats. Ratios say how
many times better mxrt is (> 1: mxrt better; for s, us/call and MiB lower is better).

Tables: libmxnet.so against libmxrt.so for every workload run; the engine workloads across every
runtime (StarPU with its best scheduler per row); the share of ops each runtime ran on the pushing
thread; StarPU per scheduler.
"""
import re
import statistics
import sys
from collections import OrderedDict, defaultdict

LOWER_IS_BETTER = {"s", "us/call", "MiB"}
PEER_COLUMNS = [("libgomp", "libgomp (gcc -fopenmp)"), ("libomp", "libomp (clang -fopenmp)")]


def fmt(v):
    return "n/a" if v is None else "%.4g" % v


def ratio(unit, mxrt, other):
    """how many times better mxrt is than `other`"""
    if mxrt is None or other is None or mxrt <= 0 or other <= 0:
        return None
    return other / mxrt if unit in LOWER_IS_BETTER else mxrt / other


def better(unit, a, b):
    return a < b if unit in LOWER_IS_BETTER else a > b


def main(path):
    rows = OrderedDict()  # (workload, workers) -> unit
    values = defaultdict(list)  # (runtime, workload, workers) -> valid per-round values
    checks = defaultdict(list)  # (runtime, workload, workers) -> per-round check texts
    shares = defaultdict(list)  # (runtime, workload, workers) -> % of ops on the pushing thread
    runtimes = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 7:
                continue
            rt, nt, _round, name, value, unit, check = parts[:7]
            note = parts[7] if len(parts) > 7 else ""
            key = (name, nt)
            if key not in rows or rows[key] == "-":
                rows[key] = unit
            if rt not in runtimes:
                runtimes.append(rt)
            checks[(rt, name, nt)].append(check)
            try:
                v = float(value)
            except ValueError:
                v = float("nan")
            if v == v and check == "ok":
                values[(rt, name, nt)].append(v)
            m = re.search(r"(\d+)% of ops on the pushing thread", note)
            if m:
                shares[(rt, name, nt)].append(float(m.group(1)))

    def med(rt, name, nt):
        v = values.get((rt, name, nt))
        return statistics.median(v) if v else None

    def check_text(rt, name, nt):
        bad = [c for c in checks.get((rt, name, nt), []) if c != "ok"]
        if not checks.get((rt, name, nt)):
            return None
        if not bad:
            return "ok"
        text = bad[0] if len(bad[0]) <= 100 else bad[0][:97] + "..."
        return "%s (%d of %d rounds)" % (text, len(bad), len(checks[(rt, name, nt)]))

    # 1. libmxnet.so against libmxrt.so
    print("| workload | threads | unit | libmxnet.so | libmxrt.so | speedup (mxrt) | checks |")
    print("|---|---|---|---|---|---|---|")
    for (name, nt), unit in rows.items():
        if not any((rt, name, nt) in checks for rt in ("mxrt", "mxnet")):
            continue
        a, b = med("mxnet", name, nt), med("mxrt", name, nt)
        r = ratio(unit, b, a)
        c = "mxnet: %s" % check_text("mxnet", name, nt)
        if check_text("mxrt", name, nt) is not None:
            c += "; mxrt: %s" % check_text("mxrt", name, nt)
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            name, nt, unit, fmt(a), fmt(b), "n/a" if r is None else "%.2fx" % r, c.replace("|", "/")))

    starpu = [rt for rt in runtimes if rt.startswith("starpu:")]
    peers = [p for p, _ in PEER_COLUMNS if p in runtimes]
    if not peers and not starpu:
        return

    def best_starpu(name, nt, unit):
        best = None
        for rt in starpu:
            v = med(rt, name, nt)
            if v is not None and check_text(rt, name, nt) == "ok" and (best is None or better(unit, v, best[0])):
                best = (v, rt.split(":", 1)[1])
        return best

    def cell(name, nt, unit, v, extra=""):
        if v is None:
            return "n/a"
        r = ratio(unit, med("mxrt", name, nt), v)
        inner = ", ".join(x for x in ("" if r is None else "%.2fx" % r, extra) if x)
        return "%s (%s)" % (fmt(v), inner) if inner else fmt(v)

    engine_rows = [(k, u) for k, u in rows.items() if any((p, k[0], k[1]) in checks for p in peers + starpu)]
    print()
    head = ["libmxrt.so", "libmxnet.so"] + [t for p, t in PEER_COLUMNS if p in peers]
    if starpu:
        head.append("StarPU (best scheduler)")
    print("| workload | workers | unit | " + " | ".join(head) + " | checks |")
    print("|---|---|---|" + "---|" * (len(head) + 1))
    for (name, nt), unit in engine_rows:
        cells = [fmt(med("mxrt", name, nt)), cell(name, nt, unit, med("mxnet", name, nt))]
        cells += [cell(name, nt, unit, med(p, name, nt)) for p in peers]
        failed = []
        for rt in ["mxrt", "mxnet"] + peers + starpu:
            t = check_text(rt, name, nt)
            if t not in (None, "ok"):
                failed.append("%s: %s" % (rt, t))
        if starpu:
            b = best_starpu(name, nt, unit)
            cells.append("n/a" if b is None else cell(name, nt, unit, b[0], b[1]))
        print("| %s | %s | %s | %s | %s |" % (name, nt, unit, " | ".join(cells),
                                              ("; ".join(failed) or "all ok").replace("|", "/")))

    print()
    print("In parentheses: how many times better mxrt is. mxrt, MXNet and StarPU use N workers beside")
    print("the pushing thread; OpenMP runs a team of N threads that includes the pushing thread (N = 1:")
    print("every op runs on it).")
    print()
    names = ["mxrt", "mxnet"] + peers + (["starpu"] if starpu else [])
    print("Share of the ops run on the pushing thread:")
    print()
    print("| workload | workers | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for (name, nt), _unit in engine_rows:
        out = []
        for rt in names:
            sh = [x for r in (starpu if rt == "starpu" else [rt]) for x in shares.get((r, name, nt), [])]
            out.append("n/a" if not sh else "%.0f%%" % statistics.median(sh))
        print("| %s | %s | %s |" % (name, nt, " | ".join(out)))

    if starpu:
        print()
        print("StarPU per scheduler (ratio: how many times better mxrt is):")
        print()
        print("| workload | workers | unit | " + " | ".join(rt.split(":", 1)[1] for rt in starpu) + " |")
        print("|---|---|---|" + "---|" * len(starpu))
        for (name, nt), unit in engine_rows:
            out = []
            for rt in starpu:
                t = check_text(rt, name, nt)
                v = med(rt, name, nt)
                s = cell(name, nt, unit, v)
                if t not in (None, "ok"):
                    s = (s + "; " if v is not None else "") + t.replace("|", "/")
                out.append(s)
            print("| %s | %s | %s | %s |" % (name, nt, unit, " | ".join(out)))


if __name__ == "__main__":
    main(sys.argv[1])
