#!/usr/bin/env python3
"""Where the GPU waits inside a solver evaluation, from a GPU trace (Nsight Systems or bench_solver).

Usage: nsys_gaps.py TRACE_cuda_gpu_trace.csv [SKIP]

The CSV is what
  nsys profile --trace=cuda --sample=none --cpuctxsw=none -o TRACE bench_solver --sweep ONE_CASE.yaml ...
  nsys stats --report cuda_gpu_trace --format csv --output TRACE TRACE.nsys-rep
writes (one row per kernel or copy: start, duration, stream, name), or what
  bench_solver --sweep ONE_CASE.yaml ... --gpu_trace TRACE.csv
writes on a CUDA build where Nsight Systems is not installed (CUPTI's activity records in the same
columns: perf_tests/gpu_trace.hpp). An evaluation starts at the
bounding-box kernel (BoxTeams) and ends with the last activity before the next one; the first SKIP
evaluations (default 5: the first allocates, later ones are steady) are left out. Per evaluation: the
span, the time some kernel or copy ran (the union of their intervals over all streams), and the idle rest,
which is what launch latency and host round trips cost, then that idle time by the activities on either
side of each gap (kernels by kind, copies by direction), and the time of each kind of kernel or copy.
"""
import csv
import statistics
import sys

from ncu_kernel_sums import kind


def column(header, *words):
    for i, h in enumerate(header):
        if all(w in h for w in words):
            return i
    sys.exit(f'no column with {words} in {header}')


def read(path):
    with open(path, newline='') as f:
        rows = list(csv.reader(f))
    header = rows[0]
    start, duration = column(header, 'Start'), column(header, 'Duration')
    name = column(header, 'Name')
    if '(ns)' not in header[start] or '(ns)' not in header[duration]:
        sys.exit(f'{path}: times not in ns ({header[start]!r}, {header[duration]!r}); '
                 'write the report with nsys stats\'s default time unit')
    events = []
    for r in rows[1:]:
        if len(r) <= name or not r[start]:
            continue
        t0 = float(r[start]) / 1000.0  # us
        events.append((t0, t0 + float(r[duration]) / 1000.0, r[name]))
    events.sort()
    return events


def short(name):
    """The kernel's kind as scripts/ncu_kernel_sums.py names it; a copy by its direction, a fill as such."""
    for key, label in (('Device-to-Host', 'copy DtoH'), ('Host-to-Device', 'copy HtoD'),
                       ('Device-to-Device', 'copy DtoD'), ('[CUDA memcpy', 'copy'),
                       ('[CUDA memset', 'memset')):
        if key in name:
            return label
    return kind(name)


def evaluations(events):
    starts = [i for i, e in enumerate(events) if 'BoxTeams' in e[2]]
    for a, b in zip(starts, starts[1:]):
        yield events[a:b]


def analyse(evaluation):
    busy, gaps = 0.0, []
    lo, hi = evaluation[0][0], evaluation[0][1]
    prev = evaluation[0][2]
    for t0, t1, name in evaluation[1:]:
        if t0 > hi:
            busy += hi - lo
            gaps.append((t0 - hi, short(prev), short(name)))
            lo, hi = t0, t1
        else:
            hi = max(hi, t1)
        if t1 >= hi:
            prev = name
    busy += hi - lo
    span = hi - evaluation[0][0]
    return span, busy, gaps


def main(path, skip):
    kept = list(evaluations(read(path)))[skip:]
    results = [analyse(e) for e in kept]
    if not results:
        sys.exit(f'fewer than {skip + 2} evaluations (BoxTeams kernels) in {path}')
    spans = [r[0] for r in results]
    busys = [r[1] for r in results]
    idles = [s - b for s, b, _ in results]
    print(f'{len(results)} evaluations: span {statistics.median(spans):.1f} us, busy '
          f'{statistics.median(busys):.1f} us, idle {statistics.median(idles):.1f} us (medians)')
    # Idle time by the activities on either side (the layout of an evaluation repeats, but a gap near a
    # threshold would move a by-position table): per evaluation the gaps summed per (before -> after)
    # pair, then the median of each sum over the evaluations (absent counts as 0).
    sums = []
    for r in results:
        d = {}
        for us, before, after in r[2]:
            d[(before, after)] = d.get((before, after), 0.0) + us
        sums.append(d)
    pairs = {k for d in sums for k in d}
    rows = sorted(((statistics.median(d.get(k, 0.0) for d in sums), k) for k in pairs), reverse=True)
    shown = [(us, k) for us, k in rows if us >= 3.0]
    print('idle time by neighbours (median us per evaluation, where >= 3 us):')
    for us, (before, after) in shown:
        print(f'  {us:7.1f}  {before} -> {after}')
    shown_pairs = {k for _, k in shown}
    rest = statistics.median(sum(v for k, v in d.items() if k not in shown_pairs) for d in sums)
    print(f'  {rest:7.1f}  between other neighbours (launch to launch)')
    # Time by kind at the GPU's own clocks (kernels on two streams overlap: the sum exceeds the busy time).
    per = [dict() for _ in kept]
    for d, e in zip(per, kept):
        for t0, t1, name in e:
            k = short(name)
            n, us = d.get(k, (0, 0.0))
            d[k] = (n + 1, us + t1 - t0)
    medians = {k: tuple(statistics.median(d.get(k, (0, 0.0))[i] for d in per) for i in (0, 1))
               for k in {k for d in per for k in d}}
    print('by kind (median per evaluation; absent counts as 0): count, us')
    for k, (n, us) in sorted(medians.items(), key=lambda item: (-item[1][1], item[0])):  # (ties by name)
        if us > 0:
            print(f'  {k[:40]:40s} {n:4.0f} {us:9.1f}')


if __name__ == '__main__':
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 5)
