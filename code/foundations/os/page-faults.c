// listing: run
// listing: stdout=page faults ok: 4096 pages, first touch [0-9]+ minor faults, second touch [0-9]+, child read [0-9]+, child write [0-9]+
// 缺页（page fault）与写时复制（copy-on-write）发生的现场：用 getrusage 的 ru_minflt 计数。
// 1. mmap 只保留虚拟地址；第一次写每一页才触发缺页、分配物理页，第二次写不再缺页。
// 2. fork 之后子进程只读这些页不缺页（页表项被复制，指向同一批物理页）；
//    子进程写每一页都缺页一次：内核此时才复制这一页（写时复制）。
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

// --8<-- [start:faults]
enum { PAGES = 4096 };

static long minor_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

// 每页写一个字节；返回这次遍历新增的缺页数
static long touch(volatile char *p, size_t page, char value) {
    long before = minor_faults();
    for (size_t i = 0; i < PAGES; i++) p[i * page] = value;
    return minor_faults() - before;
}

static long read_all(volatile char *p, size_t page, long *sum) {
    long before = minor_faults();
    for (size_t i = 0; i < PAGES; i++) *sum += p[i * page];
    return minor_faults() - before;
}
// --8<-- [end:faults]

int main(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = PAGES * page;  // 4096 个 4 KiB 页 = 16 MiB
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(p, len, MADV_NOHUGEPAGE);  // 关掉透明大页，否则一次缺页就映射 2 MiB（512 页）

    // --8<-- [start:cow]
    long first = touch(p, page, 1);    // 每页一次缺页：分配并清零物理页
    long second = touch(p, page, 2);   // 页表项已存在：不再缺页

    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); return 1; }
    pid_t pid = fork();
    if (pid == 0) {
        long sum = 0;
        long counts[2];
        counts[0] = read_all(p, page, &sum);  // 只读：与父进程共享物理页，几乎不缺页
        counts[1] = touch(p, page, 3);        // 写：每页触发一次写时复制
        if (write(fds[1], counts, sizeof counts) != (ssize_t)sizeof counts) _exit(1);
        _exit(sum == 2L * PAGES ? 0 : 2);
    }
    long counts[2] = {0, 0};
    if (read(fds[0], counts, sizeof counts) != (ssize_t)sizeof counts) { perror("read"); return 1; }
    int status = 0;
    waitpid(pid, &status, 0);
    // --8<-- [end:cow]
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { fprintf(stderr, "child failed\n"); return 1; }
    if (p[0] != 2) { fprintf(stderr, "parent saw the child's write\n"); return 1; }  // 私有映射：子进程的写对父进程不可见

    int ok = first >= PAGES && second < PAGES / 16 && counts[0] < PAGES / 4 && counts[1] >= PAGES;
    printf("page faults %s: %d pages, first touch %ld minor faults, second touch %ld, child read %ld, child write %ld\n",
           ok ? "ok" : "UNEXPECTED", PAGES, first, second, counts[0], counts[1]);
    munmap(p, len);
    return ok ? 0 : 1;
}
