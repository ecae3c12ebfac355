// listing: run
// listing: stdout=lock order checker: potential deadlock accounts -> ledger -> accounts \(2 edges\)\nfixed order: no cycle
// 死锁不必真的发生才能被发现：记录“持有 A 时去拿 B”这样的加锁顺序边，图里一出现环就报告。
// Linux 内核的 lockdep 和 ThreadSanitizer 的死锁检测都是这个思路。两个线程先后运行（不会真的卡住），
// 一个按 accounts -> ledger 加锁，另一个按 ledger -> accounts：检查器报告潜在死锁。
// tests/test_foundations_os.py 还用 -fsanitize=thread 编译本文件，断言 TSan 报告 lock-order-inversion。
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

// --8<-- [start:checker]
class LockOrderChecker {
public:
    // 线程持有 held 中的锁时又去拿 next：为每个已持有的锁加一条边 held -> next
    void on_acquire(const std::vector<std::string>& held, const std::string& next) {
        std::lock_guard<std::mutex> g(m_);
        for (const auto& h : held) {
            if (reachable(next, h)) {  // 已有 next ->...-> h，再加 h -> next 就成环
                if (report_.empty()) report_ = next + " -> " + h + " -> " + next;
            }
            edges_[h].insert(next);
        }
    }
    std::string report() const { std::lock_guard<std::mutex> g(m_); return report_; }
    size_t edge_count() const {
        std::lock_guard<std::mutex> g(m_);
        size_t n = 0;
        for (const auto& [from, to] : edges_) n += to.size();
        return n;
    }

private:
    bool reachable(const std::string& from, const std::string& to) const {  // 深度优先搜索
        std::set<std::string> seen;
        std::vector<std::string> stack{from};
        while (!stack.empty()) {
            std::string v = stack.back();
            stack.pop_back();
            if (v == to) return true;
            if (!seen.insert(v).second) continue;
            auto it = edges_.find(v);
            if (it != edges_.end()) stack.insert(stack.end(), it->second.begin(), it->second.end());
        }
        return false;
    }
    mutable std::mutex m_;
    std::map<std::string, std::set<std::string>> edges_;
    std::string report_;
};

// 带名字的互斥锁：加锁前把“当前线程已持有的锁”报告给检查器
class CheckedMutex {
public:
    CheckedMutex(std::string name, LockOrderChecker& c) : name_(std::move(name)), checker_(c) {}
    void lock() {
        checker_.on_acquire(held_, name_);
        m_.lock();
        held_.push_back(name_);
    }
    void unlock() {
        held_.pop_back();  // 只支持后进先出的释放顺序，足够演示
        m_.unlock();
    }

private:
    static thread_local std::vector<std::string> held_;
    std::string name_;
    LockOrderChecker& checker_;
    std::mutex m_;
};
thread_local std::vector<std::string> CheckedMutex::held_;
// --8<-- [end:checker]

// --8<-- [start:transfer]
struct Bank {
    LockOrderChecker checker;
    CheckedMutex accounts{"accounts", checker}, ledger{"ledger", checker};
    int balance = 100, entries = 0;
};

void debit(Bank& b) {  // accounts -> ledger
    std::scoped_lock a(b.accounts);
    std::scoped_lock l(b.ledger);
    b.balance -= 1;
    b.entries += 1;
}

void audit(Bank& b, bool fixed) {
    if (fixed) {  // 与 debit 相同的全局顺序
        std::scoped_lock a(b.accounts);
        std::scoped_lock l(b.ledger);
        b.entries += 1;
    } else {      // 反序：两线程若同时运行，可能各持一把、互等对方
        std::scoped_lock l(b.ledger);
        std::scoped_lock a(b.accounts);
        b.entries += 1;
    }
}

std::string run(bool fixed) {
    Bank b;
    std::thread t1(debit, std::ref(b));
    t1.join();  // 先后运行，这次不会真的死锁；检查器仍能从加锁顺序看出风险
    std::thread t2(audit, std::ref(b), fixed);
    t2.join();
    std::string r = b.checker.report();
    return r.empty() ? "no cycle" : "potential deadlock " + r + " (" + std::to_string(b.checker.edge_count()) + " edges)";
}
// --8<-- [end:transfer]

int main() {
    std::string bad = run(false), good = run(true);
    std::printf("lock order checker: %s\nfixed order: %s\n", bad.c_str(), good.c_str());
    return bad.rfind("potential deadlock", 0) == 0 && good == "no cycle" ? 0 : 1;
}
