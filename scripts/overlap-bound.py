#!/usr/bin/env python3
"""Bound what running engines' words on separate host threads could gain (issue 16).

Reads a word trace written by `neuron-emu bench real --word-trace DIR` (best taken with
NEURON_EMU_THREADS=1, so each word's time is one thread's) and replays one execution's words
on host threads: each word starts when its thread is free and when every earlier-issued word
on another thread that touches the same SBUF/PSUM bytes (one of the two writing) has ended;
a DMA_DIRECT2D (its bytes move outside the word) waits for everything before it and
everything after waits for it. Words keep their measured time (median over the timed
executions), so cross-CPU cache traffic, which would slow the words down, is not counted:
the result is an upper bound. The time outside words (`wall - sum of words`: scheduling,
DMA rings, polling) stays on the thread that schedules, the one running non-PE words.

Schedules: `one` (everything on one thread, the measured total), `pe+rest` (each core's
Tensor-engine words on one thread, the rest of that core's words on another: two threads
per core, two CPUs for a single-core kernel), `per-engine` (each core's five engines on
threads of their own).

usage: scripts/overlap-bound.py TRACE.words.jsonl...
"""
import json
import statistics
import sys

DMA_WORDS = {"DMA_DIRECT2D"}
STRIDE = {"S": 256 * 1024, "P": 16 * 1024}


def load(path):
    with open(path) as f:
        header = json.loads(f.readline())
        words = [json.loads(line) for line in f if line.strip()]
    rep = header["repeat"]
    if header.get("dropped"):
        sys.exit(f"{path}: {header['dropped']} words were dropped; trace fewer executions")
    if rep <= 0 or len(words) % rep:
        sys.exit(f"{path}: {len(words)} words do not split into {rep} executions")
    n = len(words) // rep
    execs = [words[i * n:(i + 1) * n] for i in range(rep)]
    key = lambda w: (w["nc"], w["engine"], w["pc"], w["op"])
    for e in execs[1:]:
        if [key(w) for w in e] != [key(w) for w in execs[0]]:
            sys.exit(f"{path}: the executions issued different words")
    one = []
    for i, w in enumerate(execs[0]):
        w = dict(w)
        w["ns"] = statistics.median(e[i]["ns"] for e in execs)
        one.append(w)
    return header, one


def regions(w):
    """Each operand as (space, write, first partition, last partition, in-lo, in-hi)."""
    out = []
    for sp, write, ch, lo, hi in w["ops"]:
        s = STRIDE[sp]
        first = lo // s
        out.append((sp, write, first, first + max(ch, 1) - 1, lo - first * s, hi - first * s))
    return out


def conflict(a, b):
    for sa, wa, fa, la, loa, hia in a:
        for sb, wb, fb, lb, lob, hib in b:
            if sa == sb and (wa or wb) and fa <= lb and fb <= la and loa < hib and lob < hia:
                return True
    return False


def schedule(words, thread_of, other_ns, sched_thread):
    regs = [regions(w) for w in words]
    load = {}
    for w in words:
        load[thread_of(w)] = load.get(thread_of(w), 0) + 1
    share = other_ns / max(load.get(sched_thread, 0), 1)
    free, end, last_dma = {}, [], 0.0
    for i, w in enumerate(words):
        t = thread_of(w)
        start = max(free.get(t, 0.0), last_dma)
        if w["op"] in DMA_WORDS:
            start = max([start] + end)
        else:
            for j in range(i):
                if thread_of(words[j]) != t and regs[i] and regs[j] and conflict(regs[i], regs[j]):
                    start = max(start, end[j])
        cost = w["ns"] + (share if t == sched_thread else 0.0)
        end.append(start + cost)
        free[t] = start + cost
        if w["op"] in DMA_WORDS:
            last_dma = start + cost
    return max(end) if end else 0.0


def main(paths):
    print(f"{'neff':28} {'wall us':>9} {'words us':>9} {'other us':>9}"
          f" {'pe+rest us':>11} {'gain':>6} {'per-engine us':>14} {'gain':>6}")
    for path in paths:
        header, words = load(path)
        wall = header["wall_ns_per_exec"]
        total = sum(w["ns"] for w in words)
        other = max(wall - total, 0)
        pe_rest = schedule(
            words,
            lambda w: (w["nc"], "pe" if w["engine"] == "Tensor" else "rest"),
            other,
            (0, "rest"),
        )
        per_engine = schedule(words, lambda w: (w["nc"], w["engine"]), other, (0, "Sync"))
        serial = total + other
        print(f"{header['neff']:28} {wall / 1e3:9.1f} {total / 1e3:9.1f} {other / 1e3:9.1f}"
              f" {pe_rest / 1e3:11.1f} {serial / pe_rest:5.2f}x"
              f" {per_engine / 1e3:14.1f} {serial / per_engine:5.2f}x")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
