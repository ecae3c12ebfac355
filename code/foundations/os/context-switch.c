// listing: run
// listing: stdout=context switch ok: 20000 round trips, [0-9]+ context switches in parent \([0-9]+ voluntary\), [0-9.]+ us per round trip
// 用管道乒乓（pipe ping-pong）让上下文切换真实发生并计数：
// 父子进程各持一对管道，轮流写 1 字节、再阻塞在 read 上等对方回复。
// 每次阻塞的 read 都让出 CPU，记作一次自愿上下文切换（voluntary context switch，ru_nvcsw）；
// 两个进程挤在一个核上时，被唤醒的一方还可能抢占写者，记作非自愿切换（ru_nivcsw）。
// 往返时间包括两次写、两次读、两次唤醒与两次切换；计时只打印，测试只断言计数。
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// --8<-- [start:pingpong]
enum { ROUNDS = 20000 };

static void switches(long *voluntary, long *involuntary) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *voluntary = ru.ru_nvcsw;
    *involuntary = ru.ru_nivcsw;
}

int main(void) {
    int to_child[2], to_parent[2];
    if (pipe(to_child) != 0 || pipe(to_parent) != 0) { perror("pipe"); return 1; }
    pid_t pid = fork();
    if (pid == 0) {  // 子进程：收到 1 字节就回 1 字节
        close(to_child[1]);
        close(to_parent[0]);
        char c;
        while (read(to_child[0], &c, 1) == 1)
            if (write(to_parent[1], &c, 1) != 1) _exit(1);
        _exit(0);  // 父进程关闭写端后 read 返回 0
    }
    close(to_child[0]);
    close(to_parent[1]);

    struct timespec t0, t1;
    long v0, i0, v1, i1;
    switches(&v0, &i0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < ROUNDS; i++) {
        char c = (char)i, r = 0;
        if (write(to_child[1], &c, 1) != 1 || read(to_parent[0], &r, 1) != 1 || r != c) {
            fprintf(stderr, "ping-pong broke at round %d\n", i);
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    switches(&v1, &i1);
    long total = (v1 - v0) + (i1 - i0);
    // --8<-- [end:pingpong]
    close(to_child[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / ROUNDS;
    // 父进程每轮几乎都要让出 CPU 一次；对方恰好已经回复时不必阻塞，所以只要求过半
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && total >= ROUNDS / 2;
    printf("context switch %s: %d round trips, %ld context switches in parent (%ld voluntary), %.2f us per round trip\n",
           ok ? "ok" : "UNEXPECTED", ROUNDS, total, v1 - v0, us);
    return ok ? 0 : 1;
}
