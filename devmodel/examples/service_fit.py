#!/usr/bin/env python3
"""Fit calib::TRN2_SERVICE and calib::TRN2_WAKE (docs/timing.md, "Vector and Scalar word
service time and wake-up").

Input: ntffdump's lines for the six akc NTFFs, the attention layer's and the MoE layer's (held
out). A word's service time is its end minus the later of its start and the previous word's end
on the same (file, subgraph, engine); it *blocked* when it has a header wait and started after
the previous word ended. Excess = service time minus the table's 64 cycles + one element per
cycle. Prints, per (engine, opcode, blocked or not), the median excess; the wake-ups (Vector:
TENSOR_TENSOR/COPY/CAST/TENSOR_REDUCE blocked; Scalar: ACTIVATE blocked minus not blocked); and
ACTIVATE's fixed part (service minus elements at 1.2 GHz, not blocked).

  python3 service_fit.py words.tsv
"""
import collections
import statistics as st
import sys

GHZ = {"Dve": 0.96, "Act": 1.2}
DVE_WAKE = ("TENSOR_TENSOR", "COPY", "CAST", "TENSOR_REDUCE")


def main(path):
    by = collections.defaultdict(list)
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if f[2] in GHZ:
            by[(f[0], f[1], f[2])].append((float(f[5]), float(f[6]), f[4], int(f[8]), int(f[7])))
    words = []  # (held out, engine, opcode, elements, blocked, service ns)
    for (file, _, eng), ws in by.items():
        ws.sort()
        prev = None
        for ts, dur, op, el, wait in ws:
            end = ts + dur
            if prev is not None and end - max(prev, ts) > 0:
                blocked = wait != 0 and ts - prev > 3
                words.append(("moe" in file, eng, op, el, blocked, end - max(prev, ts)))
            prev = end if prev is None else max(prev, end)

    def excess(w):
        return w[5] - (64 + w[3]) / GHZ[w[1]]

    groups = collections.defaultdict(list)
    for w in words:
        groups[(w[0], w[1], w[2], w[4])].append(excess(w))
    for (moe, eng, op, blocked), v in sorted(groups.items()):
        if len(v) >= 5:
            tag = "MoE (held out)" if moe else "akc+attention"
            print(f"{tag:15} {eng} {op:14} {'blocked' if blocked else 'not blocked':12} "
                  f"{len(v):4} words, excess over the table: median {st.median(v):6.1f} ns")
    for moe in (False, True):
        tag = "MoE (held out)" if moe else "akc+attention"
        d = [excess(w) for w in words if w[0] == moe and w[1] == "Dve" and w[2] in DVE_WAKE and w[4]]
        a = [w[5] - w[3] / 1.2 for w in words if w[0] == moe and w[2] == "ACTIVATE" and not w[4]]
        ab = [w[5] - w[3] / 1.2 for w in words if w[0] == moe and w[2] == "ACTIVATE" and w[4]]
        print(f"{tag}: Vector wake {st.median(d):.3f} ns ({len(d)} words)", end="")
        if a and ab:
            print(f"; ACTIVATE fixed {st.median(a):.3f} ns ({len(a)}), blocked {st.median(ab):.3f}"
                  f" ({len(ab)}): Scalar wake {st.median(ab) - st.median(a):.3f} ns", end="")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
