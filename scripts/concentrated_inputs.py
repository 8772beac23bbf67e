#!/usr/bin/env python3
"""Writes the inputs of docs/tree.md's concentration-rule table as CSV files for `kfmm forces`
(header x,y,z,m; plain Python, fixed seeds):

  coincident.csv  1500 particles of mass 1/1500: a third at (0.25, 0.25, 0.25), a third at
                  (0.75, 0.75, 0.75), a third uniform in the unit cube (the solver test's input)
  blob.csv        3000 particles: 2000 uniform in the unit cube holding 2/3 of the mass, 1000 in
                  4 Gaussian blobs of width 1e-6 at random points holding 1/3
  plummer.csv     20000 equal masses, a Plummer sphere of scale radius 1 cut at 20

usage: scripts/concentrated_inputs.py [OUTPUT_FOLDER]   (default: the current folder)
"""
import math
import os
import random
import sys


def write(path, rows):
    with open(path, "w") as f:
        f.write("x,y,z,m\n")
        for x, y, z, m in rows:
            f.write(f"{x!r},{y!r},{z!r},{m!r}\n")


def coincident(rng, n=1500):
    rows = []
    for i in range(n):
        g = i % 3
        p = [0.25] * 3 if g == 0 else [0.75] * 3 if g == 1 else [rng.random() for _ in range(3)]
        rows.append((*p, 1.0 / n))
    return rows


def blob(rng, n_uniform=2000, n_blob=1000, blobs=4, width=1e-6):
    rows = [(rng.random(), rng.random(), rng.random(), (2.0 / 3.0) / n_uniform) for _ in range(n_uniform)]
    centres = [[0.2 + 0.6 * rng.random() for _ in range(3)] for _ in range(blobs)]
    for i in range(n_blob):
        c = centres[i % blobs]
        rows.append((*(c[d] + rng.gauss(0.0, width) for d in range(3)), (1.0 / 3.0) / n_blob))
    return rows


def plummer(rng, n=20000, cut=20.0):
    rows = []
    while len(rows) < n:
        u = rng.random()
        if u <= 0.0:
            continue
        r = 1.0 / math.sqrt(u ** (-2.0 / 3.0) - 1.0)  # inverse of the cumulative mass r^3 / (1 + r^2)^(3/2)
        if r > cut:
            continue
        cos_t = 2.0 * rng.random() - 1.0
        sin_t = math.sqrt(1.0 - cos_t * cos_t)
        phi = 2.0 * math.pi * rng.random()
        rows.append((r * sin_t * math.cos(phi), r * sin_t * math.sin(phi), r * cos_t, 1.0 / n))
    return rows


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "coincident.csv"), coincident(random.Random(1)))
    write(os.path.join(out, "blob.csv"), blob(random.Random(2)))
    write(os.path.join(out, "plummer.csv"), plummer(random.Random(3)))


if __name__ == "__main__":
    main()
