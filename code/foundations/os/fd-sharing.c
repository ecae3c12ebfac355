// listing: run
// listing: stdout=two opens: f f\ndup: f o\nfork: child f, parent o\ndup2: file holds "to the file"\nwithout O_APPEND: "B"\nwith O_APPEND: "AB"\nstdio buffer copied by fork: "hello hello "
// 描述符表、打开文件表与 v-node/inode 表（CS:APP 10.8）：文件偏移量存在“打开文件表”的表项里，
// 所以两次 open 各有各的偏移量，而 dup 出来的描述符、fork 之后父子进程的描述符共享同一个偏移量。
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char path[4096];

static char read1(int fd) {
    char c = '?';
    if (read(fd, &c, 1) != 1) return '!';
    return c;
}

static void slurp(char *out, size_t cap) {
    int fd = open(path, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, out, cap - 1);
    out[n > 0 ? n : 0] = '\0';
    if (fd >= 0) close(fd);
}

static void reset(const char *content) {
    int fd = open(path, O_WRONLY | O_TRUNC);
    if (fd < 0 || write(fd, content, strlen(content)) != (ssize_t)strlen(content)) { perror("reset"); exit(1); }
    close(fd);
}

int main(void) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/foobar-XXXXXX", dir && *dir ? dir : "/tmp");
    int tmp = mkstemp(path);
    if (tmp < 0) { perror("mkstemp"); return 1; }
    close(tmp);
    reset("foobar");

    // --8<-- [start:offsets]
    // 两次 open：两个打开文件表项，各有自己的偏移量，都从 0 开始
    int fd1 = open(path, O_RDONLY), fd2 = open(path, O_RDONLY);
    char a = read1(fd1), b = read1(fd2);
    printf("two opens: %c %c\n", a, b);                 // f f
    close(fd1);
    close(fd2);

    // dup：两个描述符指向同一个打开文件表项，共享偏移量
    int fd = open(path, O_RDONLY);
    int copy = dup(fd);
    a = read1(fd);
    b = read1(copy);
    printf("dup: %c %c\n", a, b);                       // f o
    close(fd);
    close(copy);

    // fork：子进程复制了描述符表，表项指向同一个打开文件表项
    fd = open(path, O_RDONLY);
    pid_t pid = fork();
    if (pid == 0) {
        char c = read1(fd);
        _exit(c == 'f' ? 0 : 1);                       // 子进程读走第一个字节
    }
    int status;
    waitpid(pid, &status, 0);
    printf("fork: child %c, parent %c\n", WEXITSTATUS(status) == 0 ? 'f' : '?', read1(fd));  // parent o
    close(fd);
    // --8<-- [end:offsets]

    // --8<-- [start:redirect]
    // dup2(fd, 1)：让描述符 1 指向文件，这就是 shell 的 `> file`
    reset("");
    fflush(stdout);                                     // 先把 stdio 缓冲区里的东西写到原来的 stdout
    int saved = dup(STDOUT_FILENO);
    fd = open(path, O_WRONLY);
    dup2(fd, STDOUT_FILENO);
    close(fd);
    printf("to the file");
    fflush(stdout);                                     // 不 fflush，这行会在恢复 stdout 之后才写出、写错地方
    dup2(saved, STDOUT_FILENO);
    close(saved);
    char buf[64];
    slurp(buf, sizeof buf);
    printf("dup2: file holds \"%s\"\n", buf);
    // --8<-- [end:redirect]

    // --8<-- [start:append]
    // 两个进程（这里用两次 open 模拟）往同一个日志文件写：没有 O_APPEND 时都写在偏移量 0，互相覆盖
    for (int append = 0; append <= 1; append++) {
        reset("");
        int flags = O_WRONLY | (append ? O_APPEND : 0);  // O_APPEND：每次 write 前原子地把偏移量移到文件末尾
        int w1 = open(path, flags), w2 = open(path, flags);
        if (write(w1, "A", 1) != 1 || write(w2, "B", 1) != 1) return 1;
        close(w1);
        close(w2);
        slurp(buf, sizeof buf);
        printf("%s O_APPEND: \"%s\"\n", append ? "with" : "without", buf);
    }
    // --8<-- [end:append]

    // --8<-- [start:stdio-fork]
    // stdio 的缓冲区在用户态，fork 会把还没写出的内容复制一份：两个进程各写一遍
    reset("");
    FILE *f = fopen(path, "w");                         // 普通文件上的 FILE 是全缓冲的
    fprintf(f, "hello ");                               // 还在缓冲区里，没有调用 write
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        fclose(f);                                      // 子进程冲刷它那份缓冲区
        _exit(0);
    }
    waitpid(pid, &status, 0);
    fclose(f);                                          // 父进程再冲刷一次
    slurp(buf, sizeof buf);
    printf("stdio buffer copied by fork: \"%s\"\n", buf);
    // --8<-- [end:stdio-fork]
    unlink(path);
    return 0;
}
