#!/usr/bin/env python3
"""Markdown table of a bench_tree JSON file (docs/benchmarks.md, "tree build and dual-tree walk").

Usage: scripts/tree_table.py bench_tree.json

One row per (distribution, N, leaf): build, walk and tree + lists milliseconds (the medians of the fenced
evaluations that bench_tree reports as median_s), rounds, and far / near leaf pairs per particle.
"""
import json
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    data = json.load(open(sys.argv[1]))
    rows = {}
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        parts = b["name"].split("/")
        kind = parts[0].replace("BM_", "")
        fields = dict(p.split(":") for p in parts[1:] if ":" in p)
        key = (b.get("label", ""), int(fields["n"]), int(fields["leaf"]))
        rows.setdefault(key, {})[kind] = b
    print("| input | N | leaf | build ms | walk ms | tree + lists ms | rounds | far pairs / particle "
          "| near leaf pairs / particle |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (label, n, leaf) in sorted(rows, key=lambda k: (k[0] != "plummer", k[1], k[2])):
        r = rows[(label, n, leaf)]
        ms = {k: 1e3 * r[k]["median_s"] for k in ("build", "walk", "tree_and_lists") if k in r}
        walk = r.get("walk", r.get("tree_and_lists", {}))
        print("| %s | %.0e | %d | %s | %s | %s | %s | %s | %s |" % (
            "Plummer" if label == "plummer" else label, n, leaf,
            *("%.3f" % ms[k] if k in ms else "-" for k in ("build", "walk", "tree_and_lists")),
            "%.0f" % walk["rounds"] if "rounds" in walk else "-",
            "%.1f" % walk["far_pairs_per_particle"] if "far_pairs_per_particle" in walk else "-",
            "%.2f" % walk["near_pairs_per_particle"] if "near_pairs_per_particle" in walk else "-"))
    ctx = data.get("context", {})
    print("\n(%s, %s)" % (ctx.get("date", "?"), ctx.get("host_name", "?")))


if __name__ == "__main__":
    main()
