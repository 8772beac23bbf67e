#!/usr/bin/env python3
"""Per-kernel GPU time of one solver evaluation, from an Nsight Compute duration trace.

Usage: ncu_kernel_sums.py TRACE.txt

TRACE.txt is the text output of
  ncu --kernel-name-base demangled --launch-skip N --launch-count 140 \
      --metrics gpu__time_duration.sum bench_solver --sweep ONE_CASE.yaml --benchmark_min_time=0.01
with N past the first evaluations (the steady state). An evaluation starts at the bounding-box kernel
(BoxTeams); the kernels from the first such launch to the last kernel of a known kind before the next
are summed by kind (a trace without a second start may end inside the evaluation: said so). ncu
serialises the kernels and runs them at its own clocks (docs/benchmarks.md, "Twenty-fifth session").
"""
import re
import sys
from collections import OrderedDict

KINDS = ['WalkRound', 'WalkPack', 'WalkRowBounds', 'WalkCompactRows', 'M2LFused', 'P2PTeam', 'CountP2P',
         'DeviceRadixSort', 'DeviceScan', 'Topology', 'BoxTeams', 'Morton', 'Window', 'BottomUpMoments',
         'ChildCounts', 'Permutation', 'M2M', 'L2L', 'P2M', 'L2P', 'combine', 'Chunk', 'Gather', 'Zero',
         'ViewFill']


def kind(name):
    for k in KINDS:
        if k in name:
            return k
    return name[:100]


def main(path):
    rows, name = [], None
    for line in open(path).read().split('\n'):
        m = re.match(r'\s\s(\S.*?)\s\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)', line)
        if m:
            name = m.group(1)
        m = re.search(r'gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)', line)
        if m and name:
            value, unit = float(m.group(2).replace(',', '')), m.group(1)
            us = value / 1000 if unit.startswith('n') else value if unit.startswith('u') else value * 1000
            rows.append((name, us))
            name = None
    starts = [i for i, (n, _) in enumerate(rows) if 'BoxTeams' in n]
    if not starts:
        sys.exit('no evaluation start (BoxTeams) in ' + path)
    first, last = starts[0], starts[1] if len(starts) > 1 else len(rows)
    if len(starts) == 1:
        print('(one evaluation start in the trace: the sums may stop inside that evaluation)')
    # The evaluation ends with its last kernel of a known kind; what follows before the next box kernel
    # (View fills and architecture queries of the next benchmark run's solver) is reported, not summed.
    end = max(i for i in range(first, last) if kind(rows[i][0]) in KINDS) + 1
    if end < last:
        print(f'(after the evaluation, not summed: {last - end} kernels, '
              f'{sum(us for _, us in rows[end:last]):.1f} us)')
    last = end
    sums = OrderedDict()
    for n, us in rows[first:last]:
        count, total = sums.get(kind(n), (0, 0.0))
        sums[kind(n)] = (count + 1, total + us)
    for k, (count, total) in sums.items():
        print(f'{k:20s} {count:3d} {total:10.1f} us')
    print(f'total {sum(t for _, t in sums.values()):.1f} us in {last - first} kernels')


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
