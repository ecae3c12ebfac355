// listing: run
// listing: stdout=(syscall trace ok: getppid 100 of 100, clock_gettime [0-9]+ of 100, [0-9]+ syscalls in all|ptrace unavailable here: .*)
// 一个最小的 strace：父进程用 ptrace(PTRACE_SYSCALL) 让子进程每次进出系统调用都停下，
// 读出系统调用号并计数。子进程调用 100 次 getppid（每次都进内核）和 100 次 clock_gettime：
// 后者由 vDSO 在用户态完成，时钟源支持时（x86 上的 tsc）一次系统调用也看不到。
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#define SYSCALL_NR(regs) ((long)(regs).orig_rax)
#elif defined(__aarch64__)
#include <elf.h>
#include <sys/uio.h>
#define SYSCALL_NR(regs) ((long)(regs).regs[8])
#else
#error "this listing reads the syscall number on x86-64 and aarch64 only"
#endif

enum { CALLS = 100 };

// --8<-- [start:child]
static void traced_child(void) {
    if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0) _exit(3);
    raise(SIGSTOP);  // 等父进程设置好选项
    struct timespec ts;
    for (int i = 0; i < CALLS; i++) syscall(SYS_getppid);                  // 真正的系统调用
    for (int i = 0; i < CALLS; i++) clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO：通常不进内核
    syscall(SYS_exit_group, 0);  // 直接退出，不运行 atexit 处理函数（包括 LeakSanitizer）
}
// --8<-- [end:child]

static int get_regs(pid_t pid, struct user_regs_struct *regs) {
#if defined(__x86_64__)
    return (int)ptrace(PTRACE_GETREGS, pid, NULL, regs);
#else
    struct iovec iov = {regs, sizeof *regs};
    return (int)ptrace(PTRACE_GETREGSET, pid, (void *)NT_PRSTATUS, &iov);
#endif
}

int main(void) {
    // --8<-- [start:tracer]
    pid_t pid = fork();
    if (pid == 0) traced_child();
    int status;
    waitpid(pid, &status, 0);
    if (!WIFSTOPPED(status)) {  // PTRACE_TRACEME 失败（容器禁止 ptrace 时），子进程以 3 退出
        printf("ptrace unavailable here: child exited with %d\n", WEXITSTATUS(status));
        return 0;
    }
    // TRACESYSGOOD：系统调用停止的信号号是 SIGTRAP|0x80，可与真正的 SIGTRAP 区分
    ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *)(long)(PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL));
    long total = 0, getppid_calls = 0, clock_calls = 0;
    int entering = 1;  // 每个系统调用停两次：进入时一次，返回时一次
    for (;;) {
        if (ptrace(PTRACE_SYSCALL, pid, NULL, NULL) != 0) break;
        if (waitpid(pid, &status, 0) < 0 || WIFEXITED(status) || WIFSIGNALED(status)) break;
        if (!(WIFSTOPPED(status) && WSTOPSIG(status) == (SIGTRAP | 0x80))) continue;
        if (entering) {
            struct user_regs_struct regs;
            if (get_regs(pid, &regs) == 0) {
                long nr = SYSCALL_NR(regs);
                total++;
                getppid_calls += nr == SYS_getppid;
                clock_calls += nr == SYS_clock_gettime;
            }
        }
        entering = !entering;
    }
    // --8<-- [end:tracer]
    int ok = getppid_calls == CALLS;
    printf("syscall trace %s: getppid %ld of %d, clock_gettime %ld of %d, %ld syscalls in all\n",
           ok ? "ok" : "UNEXPECTED", getppid_calls, CALLS, clock_calls, CALLS, total);
    return ok ? 0 : 1;
}
