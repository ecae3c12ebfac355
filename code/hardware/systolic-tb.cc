// Verilator harness for systolic-array.v: reads N, K, A (N x K) and B (K x N) from stdin,
// feeds the skewed operands for CYCLES clock cycles (default K + 2(N - 1)) and prints
// "cycles <n>" followed by the N x N result, one row per line.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "Vsystolic_array.h"
#include "verilated.h"

int main(int argc, char **argv) {
    Verilated::commandArgs(argc, argv);
    int n = 0, k = 0;
    if (std::scanf("%d %d", &n, &k) != 2 || n != SA_N) return 2;  // SA_N: the N the model was built with
    std::vector<int> a(n * k), b(k * n);
    for (int &x : a) std::scanf("%d", &x);
    for (int &x : b) std::scanf("%d", &x);
    long cycles = k + 2 * (n - 1);
    for (int i = 1; i < argc; i++)
        if (std::sscanf(argv[i], "+cycles=%ld", &cycles) == 1) break;

    Vsystolic_array top;
    top.clk = 0;
    top.rst = 1;
    top.a_left = 0;
    top.b_top = 0;
    top.eval();
    top.clk = 1;  // one clock edge in reset clears every register
    top.eval();
    top.clk = 0;
    top.rst = 0;
    top.eval();
    for (long t = 0; t < cycles; t++) {
        uint64_t left = 0, up = 0;  // N * 8 bits fit in 64 bits for N <= 8
        for (int i = 0; i < n; i++) {
            long kk = t - i;  // row i is delayed by i cycles
            int av = (kk >= 0 && kk < k) ? a[i * k + kk] : 0;
            left |= (uint64_t)(uint8_t)av << (8 * i);
        }
        for (int j = 0; j < n; j++) {
            long kk = t - j;  // column j is delayed by j cycles
            int bv = (kk >= 0 && kk < k) ? b[kk * n + j] : 0;
            up |= (uint64_t)(uint8_t)bv << (8 * j);
        }
        top.a_left = left;
        top.b_top = up;
        top.eval();
        top.clk = 1;  // rising edge: every PE does one multiply-accumulate
        top.eval();
        top.clk = 0;
        top.eval();
    }
    std::printf("cycles %ld\n", cycles);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) std::printf("%d ", (int32_t)top.c_flat[i * n + j]);
        std::printf("\n");
    }
    top.final();
    return 0;
}
