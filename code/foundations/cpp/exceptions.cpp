// listing: run
// listing: stdout=unwind ok: ~c ~b ~a\n.*strong ok\n.*basic ok\n.*terminate ok: signal 6
// listing: reject=DIRECT_THROW error=will always call .terminate.
// 异常的三件可观测的事：栈展开按构造的逆序调用析构函数；vector::push_back 的强异常保证；
// noexcept 函数里逃出的异常直接调用 std::terminate（在子进程里演示，父进程看到 SIGABRT）。
#include <cassert>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

// --8<-- [start:unwind]
std::string trail;

struct Noisy {
    const char* name;
    explicit Noisy(const char* n) : name(n) {}
    ~Noisy() { trail += std::string(" ~") + name; }  // 栈展开时被调用
};

void inner() {
    Noisy c("c");
    throw std::runtime_error("from inner");  // 从这里开始展开：先析构 c
}

void middle() {
    Noisy b("b");
    inner();                                 // 异常穿过 middle：析构 b
}

void unwind() {
    try {
        Noisy a("a");
        middle();
    } catch (const std::runtime_error& e) {  // 找到处理器之前，a 也已析构
        assert(std::string(e.what()) == "from inner");
    }
    assert(trail == " ~c ~b ~a");
    std::printf("unwind ok:%s\n", trail.c_str());
}
// --8<-- [end:unwind]

// --8<-- [start:strong]
struct Fragile {  // 拷贝第 N 次时抛异常；移动构造没有 noexcept，所以 vector 扩容时只敢拷贝
    static inline int copies_left = 1 << 30;
    int v;
    explicit Fragile(int x) : v(x) {}
    Fragile(const Fragile& o) : v(o.v) {
        if (--copies_left < 0) throw std::runtime_error("copy failed");
    }
    Fragile(Fragile&& o) : v(o.v) {}        // 可能抛（未声明 noexcept）
    Fragile& operator=(const Fragile&) = default;
};

void strong() {
    std::vector<Fragile> v;
    for (int i = 0; i < 4; ++i) v.emplace_back(i);
    v.shrink_to_fit();
    assert(v.size() == v.capacity());        // 下一次 push_back 必然扩容
    Fragile::copies_left = 2;                // 扩容时搬到第 3 个元素就抛
    bool threw = false;
    try {
        v.push_back(Fragile(99));
    } catch (const std::runtime_error&) {
        threw = true;
    }
    // 强保证：操作失败，容器与调用前完全一样（大小、容量、内容）
    assert(threw && v.size() == 4 && v.capacity() == 4);
    for (int i = 0; i < 4; ++i) assert(v[i].v == i);
    std::puts("strong ok");
}
// --8<-- [end:strong]

// --8<-- [start:basic]
// 两个字段要一起更新。naive 版本先改一个再做可能失败的事：失败时对象处于“一半新一半旧”的状态，
// 只满足基本保证（不泄漏、对象仍可析构与赋值）；safe 版本先在副本上做完所有可能失败的事，再 noexcept 地交换。
struct Config {
    std::string name;
    std::vector<int> shape;

    void set_naive(const std::string& n, const std::vector<int>& s, bool fail) {
        name = n;
        if (fail) throw std::runtime_error("bad shape");
        shape = s;
    }

    void set_safe(const std::string& n, const std::vector<int>& s, bool fail) {
        Config tmp{n, s};                    // 所有可能抛异常的工作都在副本上完成
        if (fail) throw std::runtime_error("bad shape");
        std::swap(name, tmp.name);           // 交换不抛异常：提交
        std::swap(shape, tmp.shape);
    }
};

void basic() {
    Config c{"old", {1, 2}};
    try { c.set_naive("new", {3, 4}, true); } catch (const std::runtime_error&) {}
    assert(c.name == "new" && c.shape == std::vector<int>({1, 2}));  // 不一致：名字新、形状旧
    Config d{"old", {1, 2}};
    try { d.set_safe("new", {3, 4}, true); } catch (const std::runtime_error&) {}
    assert(d.name == "old" && d.shape == std::vector<int>({1, 2}));  // 强保证：原样
    std::puts("basic ok");
}
// --8<-- [end:basic]

// --8<-- [start:noexcept]
void may_throw(bool really) {
    if (really) throw std::runtime_error("escapes a noexcept function");
}

void promised() noexcept {
#ifdef DIRECT_THROW
    throw std::runtime_error("direct");      // 编译器看得出来：GCC 警告 -Wterminate，在 -Werror 下编译失败
#else
    may_throw(true);                         // 编译器看不出来：照常编译，运行时到达 noexcept 边界就 terminate
#endif
}

static_assert(noexcept(promised()));                          // noexcept 运算符只看声明
static_assert(!std::is_nothrow_move_constructible_v<Fragile>);

void terminate_in_child() {
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        try { promised(); } catch (...) {}   // 接不住：异常到达 noexcept 边界时直接 std::terminate
        _exit(0);                            // 不会执行到这里
    }
    int status = 0;
    waitpid(pid, &status, 0);
    assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);  // terminate 默认调用 abort
    std::printf("terminate ok: signal %d\n", WTERMSIG(status));
}
// --8<-- [end:noexcept]

int main() {
    unwind();
    strong();
    basic();
    terminate_in_child();
    return 0;
}
