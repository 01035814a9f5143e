#!/usr/bin/env python3
"""Fit calib::TRN2_SERVICE (docs/timing.md, "Vector and Scalar word service time").

Input: ntffdump's lines for the six akc NTFFs, the attention layer's and the MoE layer's
(held out). A word's service time is its end minus the later of its start and the previous
word's end on the same (file, subgraph, engine). Per class, least squares on the akc and
attention words; with fewer than three sizes the slope is the table's one element per cycle.

  python3 service_fit.py words.tsv
"""
import collections
import sys

MHZ = {"Dve": 960, "Act": 1200}
CLASSES = [("Dve", "TENSOR_TENSOR", True), ("Dve", "COPY", True), ("Dve", "CAST", True),
           ("Dve", "TENSOR_REDUCE", True), ("Act", "ACTIVATE", True)]


def group(f):
    return "attn" if "attn" in f else ("moe" if "moe" in f else "akc")


def main(path):
    by = collections.defaultdict(list)
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        by[(f[0], f[1], f[2])].append((float(f[5]), float(f[6]), f[4], int(f[8]), f[9] == "true"))
    samples = collections.defaultdict(list)
    for (file, _, eng), words in by.items():
        words.sort()
        prev = None
        for ts, dur, op, el, wide in words:
            end = ts + dur
            if prev is not None and end - max(prev, ts) > 0:
                samples[(eng, op, wide)].append((group(file), file, el, end - max(prev, ts)))
            prev = end if prev is None else max(prev, end)
    for c in CLASSES:
        v = samples[c]
        fit = [(e, s) for g, _, e, s in v if g != "moe"]
        n = len(fit)
        mx = sum(x for x, _ in fit) / n
        my = sum(y for _, y in fit) / n
        sxx = sum((x - mx) ** 2 for x, _ in fit)
        b = sum((x - mx) * (y - my) for x, y in fit) / sxx if sxx > 0 else 0.0
        if len({x for x, _ in fit}) < 3 or b <= 0:
            b = 1000.0 / MHZ[c[0]]
        a = my - b * mx
        kernels = len({k for g, k, _, _ in v if g != "moe"})
        row = [f"{c}: {n} words, {kernels} kernels, ({a * 1000:.0f} ps, {b * 1e6:.0f} fs/elem)"]
        for g in ("akc", "attn", "moe"):
            w = [(e, s) for gg, _, e, s in v if gg == g]
            if w:
                real = sum(s for _, s in w)
                pred = sum(a + b * e for e, _ in w)
                row.append(f"{g} {len(w)}: {real / 1e3:.1f} -> {pred / 1e3:.1f} us ({100 * (pred / real - 1):+.0f}%)")
        print(" | ".join(row))


if __name__ == "__main__":
    main(sys.argv[1])
