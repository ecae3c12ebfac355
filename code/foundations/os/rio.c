// listing: run
// listing: stdout=short count: read returned 1000 of 3000, rio_readn returned 2000 more\nEOF: rio_readn returned 100 of 4096, then 0\nreadline: unbuffered 8891 read calls, buffered 3 read calls for 1000 lines
// 短计数（short count）与健壮 I/O（robust I/O，仿 CS:APP 10.5 的 RIO 包）：
// 1. 管道里只有 1000 字节时，read(fd, buf, 3000) 返回 1000：这不是错误，调用者要循环；
// 2. 读到文件末尾时返回的字节数少于请求，再读返回 0（EOF）；
// 3. 逐字节读一行要为每个字节进一次内核；带用户态缓冲区的 readline 每 8 KiB 才调用一次 read。
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static long read_calls;  // 统计真正的 read 系统调用次数

static ssize_t counted_read(int fd, void *buf, size_t n) {
    read_calls++;
    return read(fd, buf, n);
}

// --8<-- [start:unbuffered]
// 读满 n 字节才返回，除非遇到 EOF；被信号打断（EINTR）就重试。返回读到的字节数，出错返回 -1。
static ssize_t rio_readn(int fd, void *usrbuf, size_t n) {
    char *p = usrbuf;
    size_t left = n;
    while (left > 0) {
        ssize_t got = counted_read(fd, p, left);
        if (got < 0) {
            if (errno == EINTR) continue;  // 信号处理函数返回后重新调用 read
            return -1;
        }
        if (got == 0) break;               // EOF：返回已读到的部分（短计数）
        left -= (size_t)got;
        p += got;
    }
    return (ssize_t)(n - left);
}

// 写满 n 字节：对管道、socket，write 也可能只写进一部分。
static ssize_t rio_writen(int fd, const void *usrbuf, size_t n) {
    const char *p = usrbuf;
    size_t left = n;
    while (left > 0) {
        ssize_t put = write(fd, p, left);
        if (put < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        left -= (size_t)put;
        p += put;
    }
    return (ssize_t)n;
}
// --8<-- [end:unbuffered]

// --8<-- [start:buffered]
enum { RIO_BUFSIZE = 8192 };
typedef struct {
    int fd;
    ssize_t cnt;              // 缓冲区里还没交给调用者的字节数
    char *next;               // 下一个未读字节
    char buf[RIO_BUFSIZE];
} rio_t;

static void rio_init(rio_t *rp, int fd) { rp->fd = fd; rp->cnt = 0; rp->next = rp->buf; }

// 缓冲区空了才调用 read，一次尽量填满；之后从缓冲区里给出 min(n, cnt) 字节。
static ssize_t rio_read(rio_t *rp, char *usrbuf, size_t n) {
    while (rp->cnt <= 0) {
        rp->cnt = counted_read(rp->fd, rp->buf, sizeof rp->buf);
        if (rp->cnt < 0 && errno != EINTR) return -1;
        if (rp->cnt == 0) return 0;        // EOF
        if (rp->cnt > 0) rp->next = rp->buf;
    }
    size_t take = (size_t)rp->cnt < n ? (size_t)rp->cnt : n;
    memcpy(usrbuf, rp->next, take);
    rp->next += take;
    rp->cnt -= (ssize_t)take;
    return (ssize_t)take;
}

// 读一行（含 '\n'），最多 maxlen-1 字节，末尾补 '\0'；返回字节数，EOF 返回 0。
static ssize_t rio_readlineb(rio_t *rp, char *usrbuf, size_t maxlen) {
    size_t n = 0;
    while (n + 1 < maxlen) {
        char c;
        ssize_t rc = rio_read(rp, &c, 1);
        if (rc < 0) return -1;
        if (rc == 0) break;
        usrbuf[n++] = c;
        if (c == '\n') break;
    }
    usrbuf[n] = '\0';
    return (ssize_t)n;
}
// --8<-- [end:buffered]

// 不带缓冲的 readline：每个字节一次 read 系统调用
static ssize_t readline_unbuffered(int fd, char *usrbuf, size_t maxlen) {
    size_t n = 0;
    while (n + 1 < maxlen) {
        char c;
        ssize_t rc = counted_read(fd, &c, 1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) break;
        usrbuf[n++] = c;
        if (c == '\n') break;
    }
    usrbuf[n] = '\0';
    return (ssize_t)n;
}

static int temp_file(void) {
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/rio-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) { perror("mkstemp"); exit(1); }
    unlink(path);  // 名字删掉了，打开的描述符仍然可用，关闭时空间才释放
    return fd;
}

// --8<-- [start:short]
// 子进程分三次各写 1000 字节；写完第一块要等父进程回一个字节才继续，所以父进程第一次 read 时管道里恰好只有 1000 字节。
static void short_count_on_a_pipe(void) {
    int data[2], ack[2];
    if (pipe(data) != 0 || pipe(ack) != 0) { perror("pipe"); exit(1); }
    pid_t pid = fork();
    if (pid == 0) {
        char chunk[1000];
        memset(chunk, 'x', sizeof chunk);
        char c;
        close(data[0]);
        close(ack[1]);
        if (rio_writen(data[1], chunk, sizeof chunk) < 0) _exit(1);
        if (read(ack[0], &c, 1) != 1) _exit(1);    // 等父进程读完第一块
        if (rio_writen(data[1], chunk, sizeof chunk) < 0) _exit(1);
        if (rio_writen(data[1], chunk, sizeof chunk) < 0) _exit(1);
        _exit(0);
    }
    close(data[1]);
    close(ack[0]);
    char buf[3000];
    ssize_t first = read(data[0], buf, sizeof buf);   // 只拿到管道里现有的 1000 字节
    if (write(ack[1], "k", 1) != 1) exit(1);
    ssize_t rest = rio_readn(data[0], buf + first, sizeof buf - (size_t)first);
    int status;
    waitpid(pid, &status, 0);
    close(data[0]);
    close(ack[1]);
    printf("short count: read returned %zd of %zu, rio_readn returned %zd more\n", first, sizeof buf, rest);
}
// --8<-- [end:short]

int main(void) {
    short_count_on_a_pipe();

    // 文件末尾的短计数：文件只有 100 字节，请求 4096
    int fd = temp_file();
    char small[100];
    memset(small, 'a', sizeof small);
    if (rio_writen(fd, small, sizeof small) != (ssize_t)sizeof small) return 1;
    lseek(fd, 0, SEEK_SET);
    char big[4096];
    ssize_t got = rio_readn(fd, big, sizeof big);
    ssize_t again = rio_readn(fd, big, sizeof big);
    printf("EOF: rio_readn returned %zd of %zu, then %zd\n", got, sizeof big, again);
    close(fd);

    // --8<-- [start:count]
    // 1000 行文本，分别用逐字节的 readline 和带缓冲的 rio_readlineb 读完，比较 read 系统调用的次数
    fd = temp_file();
    char line[64];
    for (int i = 0; i < 1000; i++) {
        int len = snprintf(line, sizeof line, "line %d\n", i);
        if (rio_writen(fd, line, (size_t)len) < 0) return 1;
    }
    lseek(fd, 0, SEEK_SET);
    read_calls = 0;
    int lines = 0;
    while (readline_unbuffered(fd, line, sizeof line) > 0) lines++;
    long unbuffered = read_calls;

    lseek(fd, 0, SEEK_SET);
    static rio_t rio;  // 8 KiB 的缓冲区放在静态区
    rio_init(&rio, fd);
    read_calls = 0;
    int lines_b = 0;
    while (rio_readlineb(&rio, line, sizeof line) > 0) lines_b++;
    long buffered = read_calls;
    // --8<-- [end:count]
    close(fd);
    if (lines != 1000 || lines_b != 1000) return 1;
    printf("readline: unbuffered %ld read calls, buffered %ld read calls for %d lines\n", unbuffered, buffered, lines);
    return 0;
}
