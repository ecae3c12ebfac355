// listing: run
// listing: stdout=asm examples ok
// 机器级程序的小例子。tests/test_foundations_machine_level.py 用
//   gcc -O1 -S -fno-asynchronous-unwind-tables -fno-stack-protector -fcf-protection=none -fpie -DASM_ONLY
// 把它编成汇编，逐条断言页面上说的事实（参数在哪个寄存器、哪个寄存器被压栈、switch 变成跳转表……），
// 并在 gcc 12 上检查 asm-examples.s 与编译器的输出逐字相同。-DASM_ONLY 去掉 main 与两个辅助函数，
// 于是 twice 与 fill4 在汇编里是外部函数，和真实项目里调用别的文件中的函数一样。

// --8<-- [start:args]
// 前六个整数参数依次在 rdi、rsi、rdx、rcx、r8、r9，第七个在栈上；返回值在 rax
long args7(long a, long b, long c, long d, long e, long f, long g) {
    return a + 2 * b + 3 * c + d * e - f + g;
}

// 浮点参数与整数参数各排各的：x 在 xmm0，n 在 rdi；返回值在 xmm0
double scale(double x, long n) { return x * n; }
// --8<-- [end:args]

// --8<-- [start:saved]
long twice(long x);

// x 在调用 twice 之后还要用，必须放在被调用者保存（callee-saved）的寄存器里，
// 所以函数先把 rbx 原来的值压栈，返回前恢复
long keep_across_call(long x) { return x * twice(x); }

// 递归：每一层都有自己的栈帧，n 同样保存在 rbx 里跨过递归调用
long rfact(long n) { return n <= 1 ? 1 : n * rfact(n - 1); }
// --8<-- [end:saved]

// --8<-- [start:frame]
void fill4(long *buf, long n);

// 局部数组的地址要传给别的函数，它只能放在栈上（寄存器没有地址）：函数在栈上分配一块空间
long local_array(long n) {
    long buf[4];
    fill4(buf, n);
    return buf[0] + buf[3];
}
// --8<-- [end:frame]

// --8<-- [start:control]
// 两个分支都没有副作用、算起来都很便宜：编译成条件传送（cmov），没有跳转
long absdiff(long x, long y) { return x < y ? y - x : x - y; }

// for 循环：先判断一次条件（n <= 0 就跳过），再进入 do-while 形式的循环体
long sum_array(const long *a, long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += a[i];
    return s;
}
// --8<-- [end:control]

// --8<-- [start:switch]
// 分支值密集（100..106）：编译成跳转表，一次比较 + 一次间接跳转，与分支数无关
long switch_dense(long x, long n) {
    long val = x;
    switch (n) {
    case 100: val *= 13; break;
    case 102: val += 10; __attribute__((fallthrough));  // 没有 break：贯穿到 103
    case 103: val += 11; break;
    case 104:
    case 106: val *= val; break;
    default: val = 0;
    }
    return val;
}

// 分支值稀疏：跳转表会有十万项，编译器改用比较构成的判定树
long switch_sparse(long x, long n) {
    switch (n) {
    case 1: return x + 1;
    case 100: return x * 3;
    case 1000: return x - 7;
    case 10000: return x ^ 5;
    case 100000: return x << 2;
    default: return 0;
    }
}
// --8<-- [end:switch]

#ifndef ASM_ONLY
#include <stdio.h>

long twice(long x) { return 2 * x; }

void fill4(long *buf, long n) {
    for (int i = 0; i < 4; i++) buf[i] = n + i;
}

int main(void) {
    long a[5] = {1, 2, 3, 4, 5};
    int ok = args7(1, 2, 3, 4, 5, 6, 7) == 1 + 4 + 9 + 20 - 6 + 7 && scale(1.5, 4) == 6.0 &&
             keep_across_call(5) == 50 && rfact(10) == 3628800 && absdiff(3, 10) == 7 && absdiff(10, 3) == 7 &&
             sum_array(a, 5) == 15 && sum_array(a, 0) == 0 && local_array(10) == 10 + 13 &&
             switch_dense(2, 100) == 26 && switch_dense(2, 102) == 23 && switch_dense(2, 103) == 13 &&
             switch_dense(3, 106) == 9 && switch_dense(2, 101) == 0 && switch_dense(2, 99) == 0 &&
             switch_sparse(2, 1000) == -5 && switch_sparse(2, 100000) == 8 && switch_sparse(2, 5) == 0;
    if (!ok) return 1;
    printf("asm examples ok\n");
    return 0;
}
#endif
