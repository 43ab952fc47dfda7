#!/usr/bin/env python3
"""scripts/timeline_report.py — how much communication a ParallelExecutor
timeline hides behind compute, and the timeline as an SVG picture.

    scripts/timeline_report.py run.rank*.json [--skip 3] [--svg timeline.svg] [--svg-steps 2] [--merge all.json]
                               [--starts]

Reads the Chrome trace-event files PE writes with ExecutionStrategy.timeline_path
or PE_TIMELINE (one per rank: pid = trainer rank; tracks "steps", "place N",
"comm place N"; docs/guide.md, Timeline) and prints, per rank and over all:

  comm      total time of the collectives (cat "comm": allreduce, reduce,
            broadcast, gradient buckets, and the sharded optimizer's updates,
            which sum their range of the gradient), each collective counted
            once even when it is drawn on every place's comm track;
  hidden    the part of that time during which at least one op of the same
            rank was running (cat "op", any place, any thread):
            hidden = |comm spans  intersected with  union of op spans| / |comm spans|;
  hidden by backward
            the same with only the backward pass's ops (type *_grad);
  exposed   comm time during which no op ran: what communication adds to a step.

With --starts it also prints, per rank, when each place's first op of a
step started (median over the kept steps, ms after the step's start), and
for how much of the step two places or more were running an op at once:
whether the places really run side by side (docs/benchmarks.md, the
scheduler's hand-offs).

The first --skip steps of each rank (default 1: the first run allocates
and warms caches) are left out. With --svg the steps after the skipped ones
(--svg-steps of them, default 2) are drawn: one row per track, ops of the
forward pass blue, backward orange, optimizer green, collectives red; hover
a box for its name, var and duration. Pure Python: no plotting library.
With --merge the ranks' files are written as one trace (the viewers open
one file at a time; the ranks of one machine share CLOCK_MONOTONIC, so their
spans line up).
"""
import argparse
import collections
import glob
import html
import json
import re
import sys

OPTIMIZERS = ("sgd", "momentum", "adam", "merged_sgd", "merged_momentum", "merged_adam", "lars_momentum")


def load(paths):
    events, threads, procs, everything = [], {}, {}, []
    for path in paths:
        with open(path) as f:
            trace = json.load(f)
        everything.extend(trace["traceEvents"])
        for e in trace["traceEvents"]:
            if e.get("ph") == "M":
                if e["name"] == "thread_name":
                    threads[(e["pid"], e["tid"])] = e["args"]["name"]
                elif e["name"] == "process_name":
                    procs[e["pid"]] = e["args"]["name"]
            elif e.get("ph") == "X":
                events.append(e)
    return events, threads, procs, everything


def union(intervals):
    """Sorted disjoint union of (start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def covered(span, merged):
    """Length of span (start, end) inside the disjoint sorted intervals merged."""
    s, e = span
    total = 0.0
    for a, b in merged:
        if b <= s:
            continue
        if a >= e:
            break
        total += min(b, e) - max(a, s)
    return total


def kind(e):
    if e["cat"] == "comm":
        return "comm"
    if e["cat"] == "step":
        return "step"
    if e["name"].endswith("_grad"):
        return "backward"
    if e["name"] in OPTIMIZERS:
        return "optimizer"
    return "forward"


def kept_steps(events, skip):
    """Per pid, the step numbers after the first `skip`."""
    steps = collections.defaultdict(set)
    for e in events:
        if e["cat"] == "step":
            steps[e["pid"]].add(e["args"]["step"])
    return {pid: sorted(s)[skip:] for pid, s in steps.items()}


def overlap_report(events, skip):
    keep = kept_steps(events, skip)
    rows = []
    totals = collections.Counter()
    for pid in sorted(keep):
        steps = set(keep[pid])
        mine = [e for e in events if e["pid"] == pid and e["cat"] != "step" and e["args"].get("step") in steps]
        ops = union((e["ts"], e["ts"] + e["dur"]) for e in mine if e["cat"] == "op")
        bwd = union((e["ts"], e["ts"] + e["dur"]) for e in mine if kind(e) == "backward")
        # a collective spanning the places is drawn once per place: count it once
        comm = {(e["name"], e["args"].get("var"), e["args"].get("shard"), e["ts"], e["dur"])
                for e in mine if e["cat"] == "comm"}
        c_total = sum(c[4] for c in comm)
        c_hidden = sum(covered((c[3], c[3] + c[4]), ops) for c in comm)
        c_bwd = sum(covered((c[3], c[3] + c[4]), bwd) for c in comm)
        step_us = [e["dur"] for e in events if e["pid"] == pid and e["cat"] == "step" and e["args"]["step"] in steps]
        row = dict(pid=pid, steps=len(steps), comm=c_total, hidden=c_hidden, hidden_bwd=c_bwd,
                   n_comm=len(comm), step_us=sorted(step_us))
        rows.append(row)
        for k in ("comm", "hidden", "hidden_bwd", "steps"):
            totals[k] += row[k]
    return rows, totals


def pct(a, b):
    return 100.0 * a / b if b > 0 else 0.0


def print_report(rows, totals, procs, skip):
    print("steps after the first %d of each rank; times in ms per step" % skip)
    for r in rows:
        n = max(r["steps"], 1)
        med = r["step_us"][len(r["step_us"]) // 2] / 1000.0 if r["step_us"] else 0.0
        print("%s: %d steps, median step %.3f ms, %d collectives per step, comm %.3f ms, hidden %.3f ms "
              "(%.1f%%), hidden by backward %.3f ms (%.1f%%), exposed %.3f ms"
              % (procs.get(r["pid"], "pid %d" % r["pid"]), r["steps"], med, r["n_comm"] // n,
                 r["comm"] / n / 1000.0, r["hidden"] / n / 1000.0, pct(r["hidden"], r["comm"]),
                 r["hidden_bwd"] / n / 1000.0, pct(r["hidden_bwd"], r["comm"]),
                 (r["comm"] - r["hidden"]) / n / 1000.0))
    print("hidden %.1f%% of communication time behind compute (any op of the same rank)"
          % pct(totals["hidden"], totals["comm"]))
    print("hidden_by_backward %.1f%%" % pct(totals["hidden_bwd"], totals["comm"]))


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if v else 0.0


def starts_report(events, threads, procs, skip):
    """Per rank: each place's first op of a step (ms after the step's start,
    median) and the share of the step time during which >= 2 places ran."""
    keep = kept_steps(events, skip)
    for pid in sorted(keep):
        steps = set(keep[pid])
        t_step = {e["args"]["step"]: (e["ts"], e["ts"] + e["dur"]) for e in events
                  if e["pid"] == pid and e["cat"] == "step" and e["args"]["step"] in steps}
        first = collections.defaultdict(dict)  # place track -> step -> first op start
        spans = collections.defaultdict(lambda: collections.defaultdict(list))  # step -> track -> spans
        for e in events:
            if e["pid"] != pid or e["cat"] != "op" or e["args"].get("step") not in steps:
                continue
            # one place's ops may be drawn on several rows ("place 0 (cpu:0) #2")
            track = re.sub(r" #\d+$", "", threads.get((pid, e["tid"]), str(e["tid"])))
            st = e["args"]["step"]
            first[track][st] = min(first[track].get(st, e["ts"]), e["ts"])
            spans[st][track].append((e["ts"], e["ts"] + e["dur"]))
        both = total = 0.0
        for st, (b, e) in t_step.items():
            total += e - b
            # time covered by at least two tracks' unions
            marks = []
            for track, sp in spans[st].items():
                for u in union(sp):
                    marks += [(u[0], 1), (u[1], -1)]
            marks.sort()
            depth, last = 0, None
            for t, d in marks:
                if depth >= 2:
                    both += t - last
                depth += d
                last = t
        parts = ["%s +%.3f ms" % (track, median([first[track][st] - t_step[st][0] for st in first[track]]) / 1000.0)
                 for track in sorted(first)]
        skew = median([max(first[t][st] for t in first if st in first[t]) -
                       min(first[t][st] for t in first if st in first[t]) for st in t_step])
        print("%s: first op after the step's start (median): %s; start skew %.3f ms; >= 2 places running "
              "%.1f%% of the step time" % (procs.get(pid, "pid %d" % pid), ", ".join(parts), skew / 1000.0,
                                           pct(both, total)))


COLORS = {"forward": "#4e79a7", "backward": "#f28e2b", "optimizer": "#59a14f", "comm": "#e15759", "step": "#bab0ac"}


def render_svg(events, threads, procs, skip, n_steps, path, width=1400):
    keep = kept_steps(events, skip)
    wanted = {pid: set(s[:n_steps]) for pid, s in keep.items()}
    shown = [e for e in events if e["args"].get("step") in wanted.get(e["pid"], ())]
    if not shown:
        raise SystemExit("timeline_report: no steps left to draw after --skip %d" % skip)
    t0 = min(e["ts"] for e in shown)
    t1 = max(e["ts"] + e["dur"] for e in shown)
    span = max(t1 - t0, 1e-3)
    tracks = sorted({(e["pid"], e["tid"]) for e in shown})
    label_w, row_h, top, pad = 210, 22, 46, 3
    plot_w = width - label_w - 20
    height = top + row_h * len(tracks) + 40
    x = lambda ts: label_w + (ts - t0) / span * plot_w  # noqa: E731
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="18" font-size="14">PE timeline: %s, steps %s (%.2f ms)</text>'
           % (html.escape(", ".join(procs.get(p, str(p)) for p in sorted(wanted))),
              html.escape(", ".join(str(s) for s in sorted(set().union(*wanted.values())))), span / 1000.0)]
    legend_x = 520
    for name, color in COLORS.items():
        out.append('<rect x="%d" y="8" width="12" height="12" fill="%s"/><text x="%d" y="18">%s</text>'
                   % (legend_x, color, legend_x + 16, name))
        legend_x += 100
    # time axis: about 10 ticks at a round step
    step = 10 ** len(str(int(span / 10))) / 10.0 if span >= 10 else 1.0
    while span / step > 12:
        step *= 2
    tick = 0.0
    axis_y = top + row_h * len(tracks) + 4
    while tick <= span:
        px = x(t0 + tick)
        out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>' % (px, top - 4, px, axis_y))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%.2f ms</text>' % (px, axis_y + 14, tick / 1000.0))
        tick += step
    row_of = {}
    for i, key in enumerate(tracks):
        y = top + i * row_h
        row_of[key] = y
        if i % 2:
            out.append('<rect x="0" y="%d" width="%d" height="%d" fill="#f6f6f6"/>' % (y, width, row_h))
        name = "%s / %s" % (procs.get(key[0], key[0]), threads.get(key, key[1]))
        out.append('<text x="6" y="%d">%s</text>' % (y + row_h - 7, html.escape(name)))
    for e in sorted(shown, key=lambda e: e["ts"]):
        y = row_of[(e["pid"], e["tid"])]
        x0, x1 = x(e["ts"]), x(e["ts"] + e["dur"])
        w = max(x1 - x0, 0.6)
        k = kind(e)
        what = e["name"]
        var = e["args"].get("out") or e["args"].get("var")
        tip = "%s%s, %.1f us" % (what, " -> %s" % var if var else "", e["dur"])
        out.append('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s" stroke="white" stroke-width="0.3">'
                   '<title>%s</title></rect>' % (x0, y + pad, w, row_h - 2 * pad, COLORS[k], html.escape(tip)))
        if w > 6 * len(what) + 4:
            out.append('<text x="%.1f" y="%d" fill="white" font-size="10">%s</text>'
                       % (x0 + 2, y + row_h - 8, html.escape(what)))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", help="trace files (one per rank; globs are expanded)")
    ap.add_argument("--skip", type=int, default=1, help="leave out the first N steps of each rank (default 1)")
    ap.add_argument("--svg", help="write the timeline of the steps after the skipped ones as an SVG picture")
    ap.add_argument("--svg-steps", type=int, default=2, help="steps drawn in the SVG (default 2)")
    ap.add_argument("--width", type=int, default=1400, help="SVG width in pixels")
    ap.add_argument("--merge", help="write all the given ranks' events as one trace file")
    ap.add_argument("--starts", action="store_true",
                    help="print when each place's first op started and how long places ran at once")
    a = ap.parse_args(argv)
    paths = sorted({p for t in a.traces for p in (glob.glob(t) or [t])})
    events, threads, procs, everything = load(paths)
    if a.merge:
        with open(a.merge, "w") as f:
            json.dump({"traceEvents": everything, "displayTimeUnit": "ms"}, f)
    rows, totals = overlap_report(events, a.skip)
    if not rows or totals["steps"] == 0:
        print("timeline_report: no steps after --skip %d in %s" % (a.skip, ", ".join(paths)), file=sys.stderr)
        return 1
    print_report(rows, totals, procs, a.skip)
    if a.starts:
        starts_report(events, threads, procs, a.skip)
    if a.svg:
        render_svg(events, threads, procs, a.skip, a.svg_steps, a.svg, a.width)
        print("wrote %s" % a.svg)
    if a.merge:
        print("wrote %s (%d ranks)" % (a.merge, len(paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
