// listing: run
// listing: stdout=self-check ok: chain of [0-9]+ lines visits each once, sum [0-9]+
// listing: flags=-O2
// Memory-hierarchy microbenchmark: pointer-chasing latency and streaming read bandwidth
// over a range of working-set sizes.
//   cache-sweep                       self-check on small sizes (what the listing test runs)
//   cache-sweep lat  BYTES [STEPS]    average latency of one dependent load, in ns
//   cache-sweep lath BYTES [STEPS]    the same on 2 MiB transparent huge pages (madvise)
//   cache-sweep bw   BYTES [BYTES_TO_READ]  read bandwidth, in GB/s
// Output lines: "lat <bytes> <ns>" or "bw <bytes> <GB/s>".
#define _DEFAULT_SOURCE  // madvise, clock_gettime
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

// --8<-- [start:chase]
#define LINE 64  // bytes per cache line on x86-64 and most Arm cores
typedef struct node {
    struct node *next;
    char pad[LINE - sizeof(struct node *)];  // one node per cache line
} node;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {  // xorshift64*: deterministic, good enough to shuffle
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

// Link the n lines of buf into ONE random cycle (Sattolo's algorithm), so each load
// depends on the previous one and the hardware prefetcher cannot guess the next address.
static node *build_chain(node *buf, size_t n) {
    size_t *order = malloc(n * sizeof *order);
    if (!order) return NULL;
    for (size_t i = 0; i < n; i++) order[i] = i;
    for (size_t i = n - 1; i > 0; i--) {  // j < i (not <= i): a single cycle of length n
        size_t j = rng() % i, t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < n; i++) buf[order[i]].next = &buf[order[(i + 1) % n]];
    node *start = &buf[order[0]];
    free(order);
    return start;
}

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

// Average time of one load whose address comes from the previous load.
static double chase_ns(node *start, size_t steps, node **end) {
    node *p = start;
    double t0 = now_ns();
    for (size_t i = 0; i < steps; i++) p = p->next;
    double t1 = now_ns();
    *end = p;  // keep the result alive so the loop is not removed
    return (t1 - t0) / (double)steps;
}
// --8<-- [end:chase]

// --8<-- [start:stream]
// Sum 64-bit words sequentially: independent loads, so many misses are in flight at once
// and the prefetcher streams lines ahead: this measures bandwidth, not latency.
static uint64_t sum_words(const uint64_t *a, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += a[i];
        s1 += a[i + 1];
        s2 += a[i + 2];
        s3 += a[i + 3];
    }
    return s0 + s1 + s2 + s3;
}
// --8<-- [end:stream]

static int latency(size_t bytes, size_t steps, int huge) {
    size_t n = bytes / LINE;
    if (n < 2) n = 2;
    size_t align = huge ? (size_t)2 << 20 : 4096, len = ((n * sizeof(node) + align - 1) / align) * align;
    node *buf = aligned_alloc(align, len);
    if (!buf) return 1;
    // "lath": ask for 2 MiB transparent huge pages, so one TLB entry covers 512x more memory
    if (huge && madvise(buf, len, MADV_HUGEPAGE) != 0) perror("madvise");
    node *start = build_chain(buf, n), *end = NULL;
    if (!start) return 1;
    chase_ns(start, n, &end);  // warm-up: touch every line once
    double best = 1e30;
    for (int r = 0; r < 3; r++) {  // best of 3: the machine may be shared
        double t = chase_ns(start, steps, &end);
        if (t < best) best = t;
    }
    printf("%s %zu %.3f %p\n", huge ? "lath" : "lat", n * LINE, best, (void *)end);
    free(buf);
    return 0;
}

static int bandwidth(size_t bytes, size_t total) {
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *a = aligned_alloc(4096, ((n * sizeof(uint64_t) + 4095) / 4096) * 4096);
    if (!a) return 1;
    for (size_t i = 0; i < n; i++) a[i] = i;
    size_t reps = total / bytes ? total / bytes : 1;
    uint64_t check = 0, expect = (uint64_t)n * (n - 1) / 2;
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now_ns();
        for (size_t k = 0; k < reps; k++) check += sum_words(a, n);
        double t = (now_ns() - t0) / (double)reps;
        if (t < best) best = t;
    }
    if (check != expect * reps * 3) {
        fprintf(stderr, "wrong sum\n");
        return 1;
    }
    printf("bw %zu %.3f\n", n * sizeof(uint64_t), (double)(n * sizeof(uint64_t)) / best);  // bytes/ns = GB/s
    free(a);
    return 0;
}

static int self_check(void) {
    // The chain must be one cycle through all n lines: following it n times returns to the
    // start and visits each line exactly once.
    size_t n = 1000;
    node *buf = calloc(n, sizeof(node));
    if (!buf) return 1;
    node *start = build_chain(buf, n), *p = start;
    char *seen = calloc(n, 1);
    if (!start || !seen) return 1;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        size_t idx = (size_t)(p - buf);
        if (seen[idx]) {
            fprintf(stderr, "line %zu visited twice\n", idx);
            return 1;
        }
        seen[idx] = 1;
        sum += idx;
        p = p->next;
    }
    if (p != start || sum != (uint64_t)n * (n - 1) / 2) return 1;
    printf("self-check ok: chain of %zu lines visits each once, sum %llu\n", n, (unsigned long long)sum);
    free(seen);
    free(buf);
    return latency(16 * 1024, 10000, 0) || bandwidth(16 * 1024, 1 << 20);
}

int main(int argc, char **argv) {
    if (argc < 3) return self_check();
    size_t bytes = strtoull(argv[2], NULL, 10);
    size_t steps = argc > 3 ? strtoull(argv[3], NULL, 10) : 1000000;
    if (strcmp(argv[1], "lat") == 0) return latency(bytes, steps, 0);
    if (strcmp(argv[1], "lath") == 0) return latency(bytes, steps, 1);
    if (strcmp(argv[1], "bw") == 0) return bandwidth(bytes, argc > 3 ? strtoull(argv[3], NULL, 10) : (size_t)1 << 28);
    fprintf(stderr, "usage: %s [lat|lath|bw BYTES [N]]\n", argv[0]);
    return 2;
}
