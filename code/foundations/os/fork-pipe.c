// listing: run
// listing: stdout=pipe ok: 100000 numbers, sum of squares [0-9]+, capacity [0-9]+ bytes, PIPE_BUF [0-9]+
// 父进程经管道把 10 万个整数发给 fork 出的子进程，子进程算平方和并经另一条管道送回。
// 要点：关闭不用的一端（否则读端永远等不到 EOF）；read/write 可能只完成一部分，要循环；
// 写端全部关闭后 read 返回 0；读端全部关闭后 write 得到 EPIPE（或被 SIGPIPE 杀死）。
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

enum { N = 100000 };

// 写满 len 字节：管道满时 write 阻塞，被信号打断时返回 -1/EINTR，也可能只写进一部分
static int write_full(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

// 读满 len 字节；返回实际读到的字节数，小于 len 说明对端已关闭写端（EOF）
static size_t read_full(int fd, void *buf, size_t len) {
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t k = read(fd, p + got, len - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    return got;
}

// --8<-- [start:child]
static void child(int in, int out) {
    uint64_t sum = 0;
    uint32_t x;
    while (read_full(in, &x, sizeof x) == sizeof x) sum += (uint64_t)x * x;
    // 到这里说明父进程关闭了写端：read 返回 0 就是 EOF
    int rc = write_full(out, &sum, sizeof sum) == 0 ? 0 : 1;
    close(in);
    close(out);
    _exit(rc);  // 用 _exit：不执行父进程复制过来的 atexit 处理器，也不重复刷出 stdio 缓冲
}
// --8<-- [end:child]

int main(void) {
    int down[2], up[2];  // down: 父 -> 子；up: 子 -> 父。[0] 是读端，[1] 是写端
    if (pipe(down) != 0 || pipe(up) != 0) return perror("pipe"), 1;
    int capacity = fcntl(down[1], F_GETPIPE_SZ);  // Linux 特有：管道缓冲区容量
    assert(capacity >= PIPE_BUF);

    fflush(stdout);  // fork 前清空 stdio 缓冲，避免同一段输出在父子进程中各打印一次
    pid_t pid = fork();
    if (pid < 0) return perror("fork"), 1;
    // --8<-- [start:parent]
    if (pid == 0) {
        close(down[1]);  // 子进程不写 down、不读 up
        close(up[0]);
        child(down[0], up[1]);
    }
    close(down[0]);  // 父进程不读 down、不写 up
    close(up[1]);

    uint32_t *xs = malloc(N * sizeof *xs);
    assert(xs != NULL);
    uint64_t expect = 0;
    for (uint32_t i = 0; i < N; ++i) {
        xs[i] = i;
        expect += (uint64_t)i * i;
    }
    // 40 万字节远大于管道容量：写满后父进程阻塞，直到子进程读走一部分（天然的背压）
    if (write_full(down[1], xs, N * sizeof *xs) != 0) return perror("write"), 1;
    close(down[1]);  // 关闭写端，子进程的 read 才会返回 0

    uint64_t sum = 0;
    size_t got = read_full(up[0], &sum, sizeof sum);
    close(up[0]);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return perror("waitpid"), 1;  // 回收子进程，避免僵尸
    assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert(got == sizeof sum && sum == expect);
    (void)got;
    (void)expect;
    free(xs);
    // --8<-- [end:parent]

    // 读端全部关闭后再写：忽略 SIGPIPE 时 write 返回 -1 且 errno 为 EPIPE
    int p[2];
    if (pipe(p) != 0) return perror("pipe"), 1;
    signal(SIGPIPE, SIG_IGN);
    close(p[0]);
    char byte = 'x';
    ssize_t w = write(p[1], &byte, 1);
    assert(w == -1 && errno == EPIPE);
    (void)w;
    close(p[1]);

    printf("pipe ok: %d numbers, sum of squares %llu, capacity %d bytes, PIPE_BUF %d\n", N,
           (unsigned long long)sum, capacity, PIPE_BUF);
    return 0;
}
