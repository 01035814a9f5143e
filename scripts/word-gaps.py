#!/usr/bin/env python3
"""Where the device thread's time outside words goes, from a word trace's issue times.

Reads a word trace written by `neuron-emu bench real --word-trace DIR` (words in issue
order, each with `at`, ns from the first word's issue, and `ns`, its host time) and prints,
per execution (median over the timed executions): the words' own time, the gaps between one
word's end and the next one's issue inside an execution (the event loop, DMA rings,
semaphores), and the gap between one execution's last word and the next one's first (the
end-of-execution notifications, the runtime noticing them, copying outputs and inputs and
starting the next). Then the largest gaps by the pair of words around them.

usage: scripts/word-gaps.py TRACE.words.jsonl... [--top N]
"""
import collections
import json
import statistics
import sys


def main(argv):
    top = 10
    paths = []
    it = iter(argv)
    for a in it:
        if a == "--top":
            top = int(next(it))
        else:
            paths.append(a)
    if not paths:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    for path in paths:
        with open(path) as f:
            lines = f.read().splitlines()
        head = json.loads(lines[0])
        words = [json.loads(l) for l in lines[1:]]
        rep = head["repeat"]
        if rep < 1 or not words or len(words) % rep or any("at" not in w for w in words):
            print(f"{path}: not a whole trace with issue times", file=sys.stderr)
            return 1
        per = len(words) // rep
        own, inside, between = [], [], []
        by_pair = collections.defaultdict(list)
        for e in range(rep):
            ws = words[e * per:(e + 1) * per]
            own.append(sum(w["ns"] for w in ws))
            g = 0
            for a, b in zip(ws, ws[1:]):
                d = max(b["at"] - (a["at"] + a["ns"]), 0)
                g += d
                by_pair[(a["op"], a["nc"], a["pc"], b["op"], b["nc"], b["pc"])].append(d)
            inside.append(g)
            if e + 1 < rep:
                end = max(w["at"] + w["ns"] for w in ws)
                between.append(words[(e + 1) * per]["at"] - end)
        med = statistics.median
        print(f"{head['neff']}: {per} words an execution, wall {head['wall_ns_per_exec'] / 1e3:.1f} us; "
              f"words {med(own) / 1e3:.1f} us, gaps between them {med(inside) / 1e3:.1f} us, "
              f"between executions {med(between) / 1e3 if between else float('nan'):.1f} us")
        for t, k in sorted(((med(v), k) for k, v in by_pair.items()), reverse=True)[:top]:
            print(f"  {t / 1e3:7.2f} us  {k[0]} nc{k[1]} pc{k[2]} -> {k[3]} nc{k[4]} pc{k[5]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
