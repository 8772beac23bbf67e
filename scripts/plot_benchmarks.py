#!/usr/bin/env python3
"""Time per force evaluation against the relative L2 acceleration error, kfmm against the anchors.

Reads bench_solver JSON files (Google Benchmark output, counters `ms` and `error`) and writes a
log-log PNG. Needs python3-matplotlib (Debian).

    scripts/plot_benchmarks.py OUT.png docs/data/h200_solver_*.json
"""
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# A100, fp32, Plummer, one force including the tree build (../shared/reference/anchors.md).
ANCHORS = [
    ("seed (jaccpot), N=2e5", 14.46, 9.7e-5),
    ("jz-fmm, N=2e5", 24.1, 7.8e-5),
    ("jz-fmm, N=1e6", 17.9, 3.8e-4),
    ("seed at its M2L PR, N=2e5, leaf 64", 120.0, 1e-3),
    ("seed at its M2L PR, N=2e5, leaf 256", 177.0, 1e-3),
]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, files = sys.argv[1], sys.argv[2:]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    markers = {200000: "o", 1000000: "s", 10000000: "^", 100000000: "v"}
    seen = set()
    for path in files:
        with open(path) as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            m = re.match(r"solver/(\w+)/n:(\d+)/(.*)/(fp32|fp64)", b["name"])
            if not m or "ms" not in b or "error" not in b:
                continue
            n, prec = int(m.group(2)), m.group(4)
            label = f"kfmm N={n:.0e} {prec}"
            ax.scatter(b["error"], b["ms"], marker=markers.get(n, "D"),
                       color="tab:blue" if prec == "fp32" else "tab:green", zorder=3,
                       label=None if label in seen else label)
            seen.add(label)
    for label, ms, err in ANCHORS:
        ax.scatter(err, ms, marker="x", color="tab:red", zorder=3)
        ax.annotate(label, (err, ms), fontsize=7, color="tab:red", xytext=(5, 2),
                    textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("relative L2 error of the accelerations (vs fp64 direct sum)")
    ax.set_ylabel("ms per force evaluation (tree build included)")
    ax.set_title("kfmm on one H200 (blue fp32, green fp64) vs A100 anchors (red)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    main()
