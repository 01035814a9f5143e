#!/usr/bin/env python3
"""Measure how late engines' completion semaphores land on silicon, and test the candidate
causes against the NTFF records (docs/timing.md, "Model layers", "PE's late completions: what
the records rule out").

Input: ntffdump's lines (words) and ntffevents' lines (semaphore updates, marks, DMA packets) of
one NTFF, sg00 only:

  cargo run --release -p neuron-devmodel --example ntffdump   -- F.ntff > words.tsv
  cargo run --release -p neuron-devmodel --example ntffevents -- F.ntff > events.tsv
  python3 late_completions.py words.tsv events.tsv

A word's completion is its `S[k]++@complete`; the semaphore records carry the value after the
update but are sparse (several increments can share one record), so the n-th increment of a
counter is paired with the n-th word that increments it (a counter that drops is taken as reset
and counted on; the reset record itself, value 0, is no completion). Delay = record time minus that word's record end.
"""
import bisect
import collections
import random
import re
import statistics as st
import sys

# GpSimd's own counters are set and reset by the runtime's handshake, which this pairing does
# not follow, so GpSimd is left out.
ENGINES = (("Pe", "Engine(Pe)"), ("Dve", "Engine(Dve)"), ("Act", "Engine(Act)"))


def load(words_path, events_path):
    words = [l.rstrip("\n").split("\t") for l in open(words_path)]
    words = [w for w in words if w[1] == "sg00"]
    ev = [l.rstrip("\n").split("\t") for l in open(events_path)]
    ev = [e for e in ev if e[1] == "sg00"]
    return words, ev


def completions(words, ev, eng, src):
    """(land, delay, word) per recorded update of every counter `eng` increments."""
    out = []
    sems = collections.Counter(m for w in words if w[2] == eng for m in re.findall(r"S\[(\d+)\]\+\+", w[12]))
    for sem in sems:
        inc = sorted((float(w[5]) + float(w[6]), w) for w in words
                     if w[2] == eng and f"S[{sem}]++" in w[12])
        recs = sorted((float(e[6]), int(e[5])) for e in ev
                      if e[0] == "sem" and e[2] == src and e[3] == sem)
        base = prev = 0
        for t, v in recs:
            if v < prev:
                base += prev
            prev = v
            k = base + v
            if v > 0 and k <= len(inc):
                out.append((t, t - inc[k - 1][0], inc[k - 1][1]))
    return sorted(out)


def near_after(arr, ts, window):
    """How many of ts lie within `window` ns after some element of sorted arr."""
    n = 0
    for t in ts:
        i = bisect.bisect_right(arr, t) - 1
        n += i >= 0 and 0 <= t - arr[i] <= window
    return n


def main(words_path, events_path):
    words, ev = load(words_path, events_path)
    late = {}
    for eng, src in ENGINES:
        c = completions(words, ev, eng, src)
        if not c:
            continue
        d = sorted(x[1] for x in c)
        late[eng] = [x for x in c if x[1] > 1000]
        print(f"{eng}: {len(c)} recorded completions, delay median {st.median(d):.0f} ns, "
              f"p90 {d[int(.9 * len(d))]:.0f}, max {d[-1]:.0f}; over 1 us: {len(late[eng])}")
    pe = late.get("Pe", [])
    # Exact periods: gaps between consecutive completion records that are whole multiples of
    # 100 ns to within 10 ps (a data-dependent process would not repeat to the picosecond).
    for eng, src in ENGINES:
        ts = sorted(float(e[6]) for e in ev if e[0] == "sem" and e[2] == src)
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        exact = collections.Counter(round(g) for g in gaps if g > 500 and abs(g - round(g / 100) * 100) < 0.01)
        burst = sum(1 for g in gaps if 34.0 <= g <= 34.3)
        print(f"{eng} records: gaps exactly k*100 ns: {dict(exact)}; gaps of 34.1-34.2 ns: {burst}")
    # GpSimd's DMA hand-off records (the DMA_DIRECT2D record start) and the lock.
    ho = sorted(float(w[5]) for w in words if w[2] == "Pool" and w[4] == "DMA_DIRECT2D")
    for eng in ("Pe", "Dve"):
        offs = []
        for t, _, _ in late.get(eng, []):
            i = bisect.bisect_right(ho, t) - 1
            if i >= 0:
                offs.append(t - ho[i])
        locked = sum(1 for o in offs if 838 <= o <= 847)
        print(f"{eng} late: {len(offs)}, landing 838-847 ns after a GpSimd hand-off: {locked}")
    # Coincidence with DMA packet ends (a semaphore write carried by a DMA queue would land at
    # a packet's end), against the same times shifted by 517.3 ns.
    lt = [x[0] for x in pe]
    random.seed(1)
    for q in sorted({e[3] for e in ev if e[0] == "dma"}, key=int):
        ends = sorted(float(e[5]) for e in ev if e[0] == "dma" and e[3] == q)
        print(f"queue {q}: {len(ends)} packets; late PE completions within 20 ns after a packet "
              f"end {near_after(ends, lt, 20)}, shifted {near_after(ends, [t + 517.3 for t in lt], 20)}")
    dsem = sorted(float(e[6]) for e in ev if e[0] == "sem" and e[2].startswith("Other"))
    print(f"DMA semaphore records: late PE completions within 15 ns after one "
          f"{near_after(dsem, lt, 15)}, random shift ±3 us "
          f"{st.mean(near_after(dsem, [t + random.uniform(-3e3, 3e3) for t in lt], 15) for _ in range(50)):.1f}")
    # Address hazards: a GpSimd DMA that rewrote an SBUF tile would show as a repeated
    # destination.
    dst = collections.Counter(m.group(1) for w in words if w[2] == "Pool" and w[4] == "DMA_DIRECT2D"
                              for m in [re.search(r"dst_addr_imm=(0x[0-9a-f]+)", w[12])] if m)
    waits_on_pe = sum(1 for w in words if w[2] == "Pool" and w[4] == "DMA_DIRECT2D" and "S[5]>=" in w[12])
    print(f"GpSimd DMA destinations: {len(dst)} distinct of {sum(dst.values())}; DMAs waiting on S[5]: {waits_on_pe}")
    # PSUM banks (2 KiB) of the late MATMULs against all recorded ones.
    bank = collections.Counter()
    for t, d, w in completions(words, ev, "Pe", "Engine(Pe)"):
        m = re.search(r"dst=0x([0-9a-f]+)", w[12])
        if m:
            bank[(int(m.group(1), 16) >> 11, d > 1000)] += 1
    print("PSUM bank: late / recorded",
          {hex(b << 11): (bank[(b, True)], bank[(b, True)] + bank[(b, False)]) for b in sorted({b for b, _ in bank})})
    # How far GpSimd's descriptor generation (marks) runs ahead of its hand-offs.
    mk = sorted(float(e[4]) for e in ev if e[0] == "mark" and e[2] == "Pool")
    q = mx = 0
    for _, d in sorted([(t, 1) for t in mk] + [(t, -1) for t in ho]):
        q += d
        mx = max(mx, q)
    print(f"GpSimd marks ahead of hand-offs: at most {mx}")

    if not mk:
        return  # no software-DGE marks (the akc NTFFs): no backlog to measure

    def backlog(t):
        return bisect.bisect_right(mk, t) - bisect.bisect_right(ho, t)

    # Lateness against the backlog when the word ended (bins of 4 DMAs).
    for eng, src in ENGINES:
        tab = collections.Counter()
        for _, d, w in completions(words, ev, eng, src):
            tab[(min(backlog(float(w[5]) + float(w[6])), 16) // 4 * 4, d > 1000)] += 1
        print(f"{eng} late / recorded by backlog bin:",
              {b: (tab[(b, True)], tab[(b, True)] + tab[(b, False)]) for b in sorted({b for b, _ in tab})})
    # Hand-off spacing by backlog, and in the slow (> 1.3 us) mode at a backlog of 15-16 the
    # hand-off's distance from the previous packet end of the busiest queue (the attention's KV
    # queue 1) and to its own first packet.
    by = collections.defaultdict(list)
    for a, b in zip(ho, ho[1:]):
        by[min(backlog(a) + 1, 16)].append(b - a)
    print("hand-off spacing by backlog (n, median ns):", {k: (len(v), round(st.median(v))) for k, v in sorted(by.items())})
    queue_bytes = collections.Counter()
    for e in ev:
        if e[0] == "dma":
            queue_bytes[e[3]] += int(e[6])
    busiest = queue_bytes.most_common(1)[0][0]
    pk = sorted((float(e[4]), float(e[5])) for e in ev if e[0] == "dma" and e[3] == busiest)
    ends = sorted(p[1] for p in pk)
    starts = [p[0] for p in pk]
    after_end, to_first = [], []
    for a, b in zip(ho, ho[1:]):
        if b - a > 1300 and backlog(a) + 1 >= 15:
            after_end.append(b - ends[bisect.bisect_right(ends, b) - 1])
            j = bisect.bisect_left(starts, b)
            if j < len(starts):
                to_first.append(starts[j] - b)
    if after_end:
        print(f"slow-mode hand-offs: {len(after_end)}, after the previous packet end median "
              f"{st.median(after_end):.0f} ns, first own packet after median {st.median(to_first):.0f} ns")
    gaps = [b - a for a, b in zip(mk, mk[1:]) if b - a < 1000]
    print(f"generation marks: median gap {st.median(gaps):.0f} ns ({len(gaps)} gaps under 1 us)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
