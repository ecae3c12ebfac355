// listing: run
// listing: stdout=self-check ok: sum [0-9]+ equals the reference
// listing: flags=-O1
// Branch prediction: the same loop over the same bytes, sorted or not.
//   branch-predict                    self-check (what the listing test runs)
//   branch-predict N REPS             prints "sorted <ns/elem> unsorted <ns/elem> sum <s>"
// Build with -O1 (no vectoriser) and keep the volatile accumulator (see the lab): otherwise the
// compiler may turn the branch into a conditional move or a vector blend, and there is nothing
// left to predict. -DMASK builds a branch-free version of the same loop, -DPLAIN the ordinary
// one without the guard, for comparison.
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

#define ROUNDS 21

static int cmp_u8(const void *a, const void *b) { return *(const uint8_t *)a - *(const uint8_t *)b; }

// --8<-- [start:branch]
// The accumulator is volatile: a store the compiler must perform exactly when the source says,
// so it can neither if-convert the branch into a conditional move nor vectorise the loop.
static volatile uint64_t sink;

// Add the bytes that are >= 128. With random bytes the condition is a coin toss and the
// predictor is wrong about half the time; sorted, it is false then true, almost always right.
__attribute__((noinline)) static void conditional_sum(const uint8_t *data, size_t n, int reps) {
    for (int r = 0; r < reps; r++) {
#ifdef PLAIN  // ordinary C: gcc -O1 already turns the if into cmov, nothing left to predict
        uint64_t s = 0;
        for (size_t i = 0; i < n; i++)
            if (data[i] >= 128) s += data[i];
        sink += s;
#else
        for (size_t i = 0; i < n; i++) {
#ifdef MASK  // branch-free by hand: the condition becomes an all-ones or all-zeros mask
            uint64_t keep = -(uint64_t)(data[i] >= 128);
            sink += data[i] & keep;
#else  // the branch we want to measure
            if (data[i] >= 128) sink += data[i];
#endif
        }
#endif
    }
}
// --8<-- [end:branch]

static double time_once(const uint8_t *data, size_t n, int reps) {
    double t0 = now_ns();
    conditional_sum(data, n, reps);
    return (now_ns() - t0) / ((double)n * reps);
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
    int reps = argc > 2 ? atoi(argv[2]) : 1;
    uint8_t *data = malloc(n), *sorted = malloc(n);
    if (!data || !sorted) return 1;
    uint64_t x = 12345, expect = 0;
    for (size_t i = 0; i < n; i++) {  // 64-bit LCG (Knuth's MMIX constants), top byte
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        data[i] = (uint8_t)(x >> 56);
        if (data[i] >= 128) expect += data[i];
    }
    memcpy(sorted, data, n);
    qsort(sorted, n, 1, cmp_u8);
    sink = 0;
    // Interleave short runs of both and keep the fastest of each: on a shared machine a run can
    // be preempted, but it cannot be made faster than the hardware allows.
    double t_sorted = 1e30, t_random = 1e30;
    for (int k = 0; k < ROUNDS; k++) {
        double t = time_once(sorted, n, reps);
        if (t < t_sorted) t_sorted = t;
        t = time_once(data, n, reps);
        if (t < t_random) t_random = t;
    }
    uint64_t got = sink, want = expect * (uint64_t)reps * 2 * ROUNDS;
    if (got != want) {
        fprintf(stderr, "sum %llu != %llu\n", (unsigned long long)got, (unsigned long long)want);
        return 1;
    }
    if (argc > 1)
        printf("sorted %.4f unsorted %.4f sum %llu\n", t_sorted, t_random, (unsigned long long)expect);
    else
        printf("self-check ok: sum %llu equals the reference\n", (unsigned long long)expect);
    free(data);
    free(sorted);
    return 0;
}
