#!/usr/bin/env python3
"""Where the GPU waits inside a solver evaluation, from an Nsight Systems GPU trace.

Usage: nsys_gaps.py TRACE_cuda_gpu_trace.csv [SKIP]

The CSV is what
  nsys profile --trace=cuda --sample=none --cpuctxsw=none -o TRACE bench_solver --sweep ONE_CASE.yaml ...
  nsys stats --report cuda_gpu_trace --format csv --output TRACE TRACE.nsys-rep
writes (one row per kernel or copy: start, duration, stream, name). An evaluation starts at the
bounding-box kernel (BoxTeams) and ends with the last activity before the next one; the first SKIP
evaluations (default 5: the first allocates, later ones are steady) are left out. Per evaluation: the
span, the time some kernel or copy ran (the union of their intervals over all streams), and the idle rest,
which is what launch latency and host round trips cost; the idle gaps of 5 us or more are listed with the
activity on either side, as the median over evaluations of the gap at that position.
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
    """The kernel's kind as scripts/ncu_kernel_sums.py names it; a copy or fill by its nsys prefix."""
    for key in ('[CUDA memcpy', '[CUDA memset'):
        if key in name:
            return key
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
    results = [analyse(e) for e in evaluations(read(path))][skip:]
    if not results:
        sys.exit(f'fewer than {skip + 2} evaluations (BoxTeams kernels) in {path}')
    spans = [r[0] for r in results]
    busys = [r[1] for r in results]
    idles = [s - b for s, b, _ in results]
    print(f'{len(results)} evaluations: span {statistics.median(spans):.1f} us, busy '
          f'{statistics.median(busys):.1f} us, idle {statistics.median(idles):.1f} us (medians)')
    # Gaps of 5 us or more, by position in the evaluation (the layout of an evaluation repeats).
    layout = [[g for g in r[2] if g[0] >= 5.0] for r in results]
    common = statistics.mode(len(g) for g in layout)
    same = [g for g in layout if len(g) == common]
    print(f'gaps >= 5 us: {common} in {len(same)} of {len(layout)} evaluations; median us, between:')
    for k in range(common):
        us = statistics.median(g[k][0] for g in same)
        print(f'  {us:7.1f}  {same[0][k][1]} -> {same[0][k][2]}')
    small = statistics.median(sum(g[0] for g in r[2] if g[0] < 5.0) for r in results)
    print(f'  {small:7.1f}  in gaps under 5 us (launch to launch)')


if __name__ == '__main__':
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) == 3 else 5)
