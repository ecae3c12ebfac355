// 一个最小的 C++20 生成器：协程每 co_yield 一个值就挂起，调用者每次 ++ 迭代器就恢复它一次。
// C++23 的 std::generator 做的是同一件事（GCC 14 起提供；本仓库的 GCC 12 没有 <generator>）。
// 由 coroutines.cpp 与 coroutine-dangling.cpp 使用。
#pragma once

#include <coroutine>
#include <cstddef>
#include <exception>
#include <iterator>
#include <new>
#include <utility>

// 统计协程帧的堆分配：promise_type 定义了 operator new，编译器就用它为协程帧分配内存。
struct FrameStats {
    inline static std::size_t allocations = 0, frees = 0, bytes = 0;
};

// --8<-- [start:generator]
template <typename T>
class Generator {
public:
    struct promise_type {
        const T* current = nullptr;
        std::exception_ptr error;

        Generator get_return_object() { return Generator(Handle::from_promise(*this)); }
        std::suspend_always initial_suspend() noexcept { return {}; }  // 惰性：创建后先不执行函数体
        std::suspend_always final_suspend() noexcept { return {}; }    // 结束后停在终点，帧由 Generator 销毁
        std::suspend_always yield_value(const T& v) noexcept {         // co_yield v 等价于 co_await yield_value(v)
            current = std::addressof(v);  // v 活在协程帧里，挂起期间一直有效
            return {};
        }
        void return_void() noexcept {}
        void unhandled_exception() { error = std::current_exception(); }  // 留到调用者恢复它时再抛

        static void* operator new(std::size_t n) {
            ++FrameStats::allocations;
            FrameStats::bytes += n;
            return ::operator new(n);
        }
        static void operator delete(void* p) noexcept {
            ++FrameStats::frees;
            ::operator delete(p);
        }
    };
    using Handle = std::coroutine_handle<promise_type>;

    class iterator {
    public:
        using value_type = T;
        using difference_type = std::ptrdiff_t;
        iterator() = default;
        explicit iterator(Handle h) : h_(h) {}
        const T& operator*() const { return *h_.promise().current; }
        iterator& operator++() {
            resume(h_);
            return *this;
        }
        void operator++(int) { ++*this; }
        bool operator==(std::default_sentinel_t) const { return !h_ || h_.done(); }

    private:
        Handle h_{};
    };

    explicit Generator(Handle h) : h_(h) {}
    Generator(Generator&& o) noexcept : h_(std::exchange(o.h_, {})) {}
    Generator& operator=(Generator&&) = delete;
    ~Generator() {
        if (h_) h_.destroy();  // 销毁帧：析构帧里所有还活着的局部变量，再调用 operator delete
    }

    iterator begin() {
        resume(h_);  // 第一次恢复：执行到第一个 co_yield（或结束）
        return iterator(h_);
    }
    std::default_sentinel_t end() const noexcept { return {}; }

private:
    static void resume(Handle h) {
        h.resume();
        if (h.done() && h.promise().error) std::rethrow_exception(h.promise().error);
    }
    Handle h_;
};
// --8<-- [end:generator]
