// listing: run
// listing: stdout=io_uring: (8 reads submitted with 1 io_uring_enter call, 8 completions, data ok \(pread needs 8 calls\)|unavailable here \(.*\))
// 不用 liburing，直接用两个系统调用驱动 io_uring：io_uring_setup 建环，mmap 把提交队列（SQ）、完成队列（CQ）
// 和 SQE 数组映射进进程；一次往 SQ 里放 8 个读请求，一次 io_uring_enter 既提交又等全部完成，再从 CQ 收结果。
// 内核禁用了 io_uring（/proc/sys/kernel/io_uring_disabled 为 2，或容器的 seccomp 拦截）时说明原因并正常退出。
#define _GNU_SOURCE
#include <errno.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { QUEUE_DEPTH = 8, BLOCK = 4096 };

// --8<-- [start:ring]
struct ring {
    int fd;
    // 提交队列：应用写 tail，内核写 head；array[i] 是 SQE 数组的下标
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    struct io_uring_sqe *sqes;
    // 完成队列：内核写 tail，应用写 head
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
    void *sq_map, *cq_map;
    size_t sq_len, cq_len, sqes_len;
};

static int ring_init(struct ring *r, unsigned entries) {
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    r->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    if (r->fd < 0) return -errno;
    // 内核在 p.sq_off / p.cq_off 里告诉我们各字段在共享内存里的偏移
    r->sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    r->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    int single = (p.features & IORING_FEAT_SINGLE_MMAP) != 0;  // 5.4 起两个环可以一次映射
    if (single && r->cq_len > r->sq_len) r->sq_len = r->cq_len;
    r->sq_map = mmap(NULL, r->sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
    if (r->sq_map == MAP_FAILED) return -errno;
    r->cq_map = single ? r->sq_map
                       : mmap(NULL, r->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_CQ_RING);
    if (r->cq_map == MAP_FAILED) return -errno;
    r->sqes_len = p.sq_entries * sizeof(struct io_uring_sqe);
    r->sqes = mmap(NULL, r->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
    if (r->sqes == MAP_FAILED) return -errno;
    char *sq = r->sq_map, *cq = r->cq_map;
    r->sq_head = (unsigned *)(sq + p.sq_off.head);
    r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    r->sq_array = (unsigned *)(sq + p.sq_off.array);
    r->cq_head = (unsigned *)(cq + p.cq_off.head);
    r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    return 0;
}
// --8<-- [end:ring]

static void ring_free(struct ring *r) {
    munmap(r->sqes, r->sqes_len);
    if (r->cq_map != r->sq_map) munmap(r->cq_map, r->cq_len);
    munmap(r->sq_map, r->sq_len);
    close(r->fd);
}

// --8<-- [start:submit]
// 把一个读请求放进 SQ 的下一个空位；只有在全部放好之后才发布新的 tail
static void queue_read(struct ring *r, unsigned *tail, int fd, void *buf, unsigned len, uint64_t off, uint64_t tag) {
    unsigned idx = *tail & *r->sq_mask;
    struct io_uring_sqe *sqe = &r->sqes[idx];
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_READ;          // 相当于 pread(fd, buf, len, off)；Linux 5.6 起才有
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)buf;
    sqe->len = len;
    sqe->off = off;
    sqe->user_data = tag;                  // 原样出现在对应的 CQE 里：完成的顺序不一定是提交的顺序
    r->sq_array[idx] = idx;
    (*tail)++;
}

static int submit_and_wait(struct ring *r, unsigned tail, unsigned n) {
    // release：内核看到新 tail 时，SQE 的内容一定已经写好
    __atomic_store_n(r->sq_tail, tail, __ATOMIC_RELEASE);
    // 一次系统调用：提交 n 个请求，并等到至少 n 个完成
    return (int)syscall(__NR_io_uring_enter, r->fd, n, n, IORING_ENTER_GETEVENTS, NULL, 0);
}

// 收割完成事件：acquire 读 tail，处理 [head, tail)，再 release 写回 head，把空位还给内核
static unsigned reap(struct ring *r, int *results, unsigned n) {
    unsigned head = *r->cq_head, seen = 0;
    while (head != __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE)) {
        struct io_uring_cqe *cqe = &r->cqes[head & *r->cq_mask];
        if (cqe->user_data < n) results[cqe->user_data] = cqe->res;  // res：读到的字节数，或 -errno
        head++;
        seen++;
    }
    __atomic_store_n(r->cq_head, head, __ATOMIC_RELEASE);
    return seen;
}
// --8<-- [end:submit]

int main(void) {
    const char *dir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/uring-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) { perror("mkstemp"); return 1; }
    unlink(path);
    static unsigned char file[QUEUE_DEPTH][BLOCK], got[QUEUE_DEPTH][BLOCK], ref[QUEUE_DEPTH][BLOCK];
    for (int b = 0; b < QUEUE_DEPTH; b++)
        for (int i = 0; i < BLOCK; i++) file[b][i] = (unsigned char)(b * 31 + i * 7);
    if (write(fd, file, sizeof file) != (ssize_t)sizeof file) { perror("write"); return 1; }

    struct ring r;
    int rc = ring_init(&r, QUEUE_DEPTH);
    if (rc < 0) {
        printf("io_uring: unavailable here (%s)\n", strerror(-rc));
        close(fd);
        return 0;
    }
    // --8<-- [start:use]
    unsigned tail = *r.sq_tail;
    for (unsigned b = 0; b < QUEUE_DEPTH; b++)    // 倒序提交 8 个 4 KiB 的读：第 b 个请求读第 7-b 块
        queue_read(&r, &tail, fd, got[b], BLOCK, (uint64_t)(QUEUE_DEPTH - 1 - b) * BLOCK, b);
    int submitted = submit_and_wait(&r, tail, QUEUE_DEPTH);
    int results[QUEUE_DEPTH] = {0};               // 没收到完成事件的请求保持 0，下面的比较会发现
    unsigned completed = reap(&r, results, QUEUE_DEPTH);
    // --8<-- [end:use]

    // 对照：同样的 8 次读用 pread 要 8 次系统调用
    int ok = submitted == QUEUE_DEPTH && completed == QUEUE_DEPTH, preads = 0;
    for (unsigned b = 0; b < QUEUE_DEPTH; b++) {
        preads++;
        if (pread(fd, ref[b], BLOCK, (off_t)(QUEUE_DEPTH - 1 - b) * BLOCK) != BLOCK) ok = 0;
        if (results[b] != BLOCK || memcmp(got[b], ref[b], BLOCK) != 0 || memcmp(got[b], file[QUEUE_DEPTH - 1 - b], BLOCK) != 0)
            ok = 0;
    }
    ring_free(&r);
    close(fd);
    if (!ok) {
        printf("io_uring: MISMATCH (submitted %d, completed %u)\n", submitted, completed);
        return 1;
    }
    printf("io_uring: %d reads submitted with 1 io_uring_enter call, %u completions, data ok (pread needs %d calls)\n",
           submitted, completed, preads);
    return 0;
}
