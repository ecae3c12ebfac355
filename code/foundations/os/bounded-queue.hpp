// 有界阻塞队列（bounded blocking queue）：生产者在队满时睡眠，消费者在队空时睡眠。
// 由 bounded-queue.cpp（ASan + UBSan）与 bounded-queue-tsan.cpp（ThreadSanitizer）测试。
#pragma once

#include <cassert>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

// --8<-- [start:queue]
template <typename T>
class BoundedQueue {
public:
    explicit BoundedQueue(std::size_t capacity) : cap_(capacity) { assert(capacity > 0); }

    // 队满时阻塞；队列已关闭时返回 false（元素没有放进去）。
    bool push(T value) {
        std::unique_lock<std::mutex> lk(mu_);
        // 谓词版 wait 展开就是 while (!pred()) not_full_.wait(lk);
        // 醒来后在持锁状态下重新检查条件，虚假唤醒和“被别人抢先”都只会让它再睡一次。
        not_full_.wait(lk, [&] { return q_.size() < cap_ || closed_; });
        if (closed_) return false;
        q_.push_back(std::move(value));
        assert(q_.size() <= cap_);
        lk.unlock();              // 先解锁再通知：被唤醒的消费者不必立刻撞上仍被持有的锁
        not_empty_.notify_one();
        return true;
    }

    // 队空时阻塞；关闭且取空后返回 std::nullopt，消费者据此退出。
    std::optional<T> pop() {
        std::unique_lock<std::mutex> lk(mu_);
        not_empty_.wait(lk, [&] { return !q_.empty() || closed_; });
        if (q_.empty()) return std::nullopt;
        T value = std::move(q_.front());
        q_.pop_front();
        lk.unlock();
        not_full_.notify_one();
        return value;
    }

    // 关闭：谓词依赖的 closed_ 必须在锁内修改，否则等待者可能在“检查谓词”与“睡下”之间
    // 错过这次通知（丢失唤醒，lost wake-up），并且对 closed_ 的读写构成数据竞争。
    void close() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            closed_ = true;
        }
        not_full_.notify_all();
        not_empty_.notify_all();
    }

    std::size_t size() const {
        std::lock_guard<std::mutex> lk(mu_);
        return q_.size();
    }

    // 测试用：在不改变任何状态的情况下唤醒所有等待者，模拟虚假唤醒。
    void spurious_wakeup() {
        not_full_.notify_all();
        not_empty_.notify_all();
    }

private:
    mutable std::mutex mu_;
    std::condition_variable not_full_, not_empty_;
    std::deque<T> q_;
    const std::size_t cap_;
    bool closed_ = false;
};
// --8<-- [end:queue]
