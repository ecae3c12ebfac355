// 定长内存池与伙伴系统的实现；测试见 memory-pool.cpp 与 pool-use-after-free.cpp。
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <set>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

// --8<-- [start:pool]
// 定长内存池：所有块一样大，空闲块自己存放“下一个空闲块”的指针（侵入式空闲链表），
// 分配与释放都是 O(1)，没有外部碎片。空闲块对 AddressSanitizer 标记为不可访问，
// 这样池内的释放后使用（use-after-free）也能被查出来，否则 ASan 只看得到整块大内存。
class FixedPool {
public:
    FixedPool(std::size_t block, std::size_t count)
        : block_(round_up(block)), count_(count),
          base_(static_cast<std::byte*>(::operator new(block_ * count, std::align_val_t{kAlign}))) {
        for (std::size_t i = 0; i < count_; ++i) push(base_ + i * block_);
    }
    ~FixedPool() { UNPOISON(base_, block_ * count_); ::operator delete(base_, std::align_val_t{kAlign}); }
    FixedPool(const FixedPool&) = delete;
    FixedPool& operator=(const FixedPool&) = delete;

    void* allocate() {
        if (head_ == nullptr) return nullptr;  // 池耗尽：调用方决定回退到 malloc 还是报错
        std::byte* b = head_;
        UNPOISON(b, block_);
        std::memcpy(&head_, b, sizeof head_);  // 取出存放在块内的 next 指针
        --free_;
        return b;
    }

    void deallocate(void* p) {
        auto* b = static_cast<std::byte*>(p);
        assert(b >= base_ && b < base_ + block_ * count_ && (b - base_) % block_ == 0);
        push(b);
    }

    std::size_t free_blocks() const { return free_; }
    std::size_t block_size() const { return block_; }

private:
    static constexpr std::size_t kAlign = alignof(std::max_align_t);
    static std::size_t round_up(std::size_t n) {
        n = n < sizeof(void*) ? sizeof(void*) : n;
        return (n + kAlign - 1) / kAlign * kAlign;
    }
    void push(std::byte* b) {
        std::memcpy(b, &head_, sizeof head_);  // 块内前 8 字节存 next
        head_ = b;
        ++free_;
        POISON(b, block_);
    }

    std::size_t block_, count_;
    std::byte* base_;
    std::byte* head_ = nullptr;
    std::size_t free_ = 0;
};
// --8<-- [end:pool]

// --8<-- [start:buddy]
// 伙伴系统：区域大小为 min_block * 2^max_order；k 阶块的大小是 min_block * 2^k，且按自身大小对齐。
// 以最小块为单位，偏移为 off 的 k 阶块，其伙伴的偏移是 off ^ 2^k（只差第 k 位）。
// 分配：取不小于请求的最小阶；该阶没有空闲块就拆更高阶的块，每拆一次多出一个空闲伙伴。
// 释放：伙伴也空闲且同阶就合并成高一阶的块，一直合并到伙伴不空闲或到达最高阶。
class Buddy {
public:
    Buddy(std::size_t min_block, int max_order)
        : min_(min_block), max_order_(max_order), free_(max_order + 1),
          order_of_(std::size_t{1} << max_order, -1),
          base_(static_cast<std::byte*>(::operator new(bytes(), std::align_val_t{bytes()}))) {
        free_[max_order].insert(0);  // 开始时整个区域是一个最高阶的空闲块；区域按自身大小对齐
    }
    ~Buddy() { ::operator delete(base_, std::align_val_t{bytes()}); }
    Buddy(const Buddy&) = delete;
    Buddy& operator=(const Buddy&) = delete;

    std::size_t bytes() const { return min_ << max_order_; }

    static int order_for(std::size_t n, std::size_t min_block) {
        int k = 0;
        while ((min_block << k) < n) ++k;  // 向上取到 2 的幂：最多浪费将近一半（内部碎片）
        return k;
    }

    void* allocate(std::size_t n) {
        int k = order_for(n, min_);
        int j = k;
        while (j <= max_order_ && free_[j].empty()) ++j;  // 找到有空闲块的最低阶
        if (j > max_order_) return nullptr;               // 总空闲量也许够，但没有足够大的连续块
        std::size_t off = *free_[j].begin();
        free_[j].erase(free_[j].begin());
        while (j > k) {                                   // 逐级对半拆分，右半边成为空闲的伙伴
            --j;
            free_[j].insert(off + (std::size_t{1} << j));
        }
        order_of_[off] = static_cast<std::int8_t>(k);
        return base_ + off * min_;
    }

    void deallocate(void* p) {
        std::size_t off = static_cast<std::size_t>(static_cast<std::byte*>(p) - base_) / min_;
        int k = order_of_[off];
        assert(k >= 0 && "double free or not a block start");
        order_of_[off] = -1;
        while (k < max_order_) {
            std::size_t buddy = off ^ (std::size_t{1} << k);
            auto it = free_[k].find(buddy);
            if (it == free_[k].end()) break;  // 伙伴在用（或已被拆小）：停止合并
            free_[k].erase(it);
            off &= ~(std::size_t{1} << k);    // 合并后的块从两者中较低的地址开始
            ++k;
        }
        free_[k].insert(off);
    }

    std::size_t free_bytes() const {
        std::size_t s = 0;
        for (int k = 0; k <= max_order_; ++k) s += free_[k].size() * (min_ << k);
        return s;
    }
    std::size_t largest_free_block() const {
        for (int k = max_order_; k >= 0; --k)
            if (!free_[k].empty()) return min_ << k;
        return 0;
    }
    // 不变式：任何空闲块的伙伴都不在同阶的空闲集合里（否则它们早该合并）；空闲块按自身大小对齐
    void check_invariants() const {
        for (int k = 0; k < max_order_; ++k)
            for (std::size_t off : free_[k]) {
                assert(off % (std::size_t{1} << k) == 0);
                assert(free_[k].count(off ^ (std::size_t{1} << k)) == 0);
            }
    }

private:
    std::size_t min_;
    int max_order_;
    std::vector<std::set<std::size_t>> free_;  // 每阶一个空闲集合（内核用链表加页标志，这里求简单）
    std::vector<std::int8_t> order_of_;        // 已分配块的阶，按起始偏移索引
    std::byte* base_;
};
// --8<-- [end:buddy]
