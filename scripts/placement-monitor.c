/* Where the host runs this VM's first two CPUs, sampled over time (docs/performance.md,
 * fourteenth and fifteenth sessions): a measuring aid for `bench real` runs, not part of the
 * emulator. Each sample bounces one cache line between threads pinned to CPU 0 and CPU 1
 * (3,000 round trips; under ~200 ns each: the two share a last-level cache, "near"; over
 * ~250: they do not, "far"), then times CPU 0 alone: a dependent walk over 16 MiB and four
 * 8 MiB memcpys (whether a lone thread is slower in one placement too).
 *
 *   cc -O2 -pthread -o /tmp/placement-monitor scripts/placement-monitor.c
 *   /tmp/placement-monitor SAMPLES INTERVAL_MS > mon.log &
 *   # one line a sample: unix_time round_trip_ns walk_ns_per_load memcpy_bytes_per_ns
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic long flag __attribute__((aligned(64)));

static void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

static double mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static double unix_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* The far end: answers odd values while a sample runs (flag > 0), naps between samples
 * (flag == 0), leaves at flag < 0. */
static void *far_end(void *unused) {
    (void)unused;
    pin(1);
    for (;;) {
        long v = atomic_load(&flag);
        if (v < 0)
            break;
        if (v & 1) {
            atomic_store(&flag, v + 1);
        } else if (v == 0) {
            struct timespec nap = {0, 100000};
            nanosleep(&nap, 0);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int samples = argc > 1 ? atoi(argv[1]) : 10;
    double interval_ms = argc > 2 ? atof(argv[2]) : 500;
    pin(0);
    pthread_t t;
    if (pthread_create(&t, 0, far_end, 0) != 0)
        return 1;

    /* A random cycle through 16 MiB of cache lines, and two 8 MiB buffers. */
    size_t bytes = 16u << 20, lines = bytes / 64, copy = 8u << 20;
    size_t *walk = aligned_alloc(64, bytes), *order = malloc(lines * sizeof *order);
    char *src = aligned_alloc(64, copy), *dst = aligned_alloc(64, copy);
    if (!walk || !order || !src || !dst)
        return 1;
    for (size_t i = 0; i < lines; i++)
        order[i] = i;
    srand(1);
    for (size_t i = lines - 1; i > 0; i--) {
        size_t j = (size_t)rand() % (i + 1), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    for (size_t i = 0; i < lines; i++)
        walk[order[i] * 8] = order[(i + 1) % lines] * 8;
    memset(src, 1, copy);
    memset(dst, 2, copy);

    for (int s = 0; s < samples; s++) {
        atomic_store(&flag, 2);
        double t0 = mono_ns();
        long trips = 3000;
        for (long i = 0; i < trips; i++) {
            long v = atomic_load(&flag);
            atomic_store(&flag, v + 1);
            while (atomic_load(&flag) == v + 1)
                ;
        }
        double round_trip = (mono_ns() - t0) / trips;
        atomic_store(&flag, 0);

        size_t at = 0;
        t0 = mono_ns();
        for (long i = 0; i < 200000; i++)
            at = walk[at];
        double per_load = (mono_ns() - t0) / 200000;
        t0 = mono_ns();
        for (int r = 0; r < 4; r++) {
            memcpy(dst, src, copy);
            src[r] = (char)at; /* keeps the walk and the copies live */
        }
        double per_ns = 4.0 * copy / (mono_ns() - t0);

        printf("%.3f %.0f %.1f %.1f\n", unix_s(), round_trip, per_load, per_ns);
        fflush(stdout);
        struct timespec nap = {0, (long)(interval_ms * 1e6)};
        nanosleep(&nap, 0);
    }
    atomic_store(&flag, -1);
    pthread_join(t, 0);
    return 0;
}
