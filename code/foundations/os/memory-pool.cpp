// listing: run
// listing: stdout=fixed pool ok.*\nbuddy ok: .*external fragmentation: 2048 KiB free, largest block 4 KiB
// 两种自己管理的内存：定长内存池（fixed-size pool）与伙伴系统（buddy system）。
// 两者都从一大块预先申请的内存里切块，分配与释放不经过 malloc。
#include "memory-pool.hpp"

#include <cstdio>
#include <random>
#include <utility>
#include <vector>

static void test_pool() {
    FixedPool pool(24, 1000);  // 24 字节向上取整到对齐粒度（x86-64 上 alignof(max_align_t) = 16）
    assert(pool.block_size() % alignof(std::max_align_t) == 0 && pool.block_size() >= 24);
    std::vector<void*> live;
    for (int i = 0; i < 1000; ++i) {
        void* p = pool.allocate();
        assert(p != nullptr && reinterpret_cast<std::uintptr_t>(p) % alignof(std::max_align_t) == 0);
        std::memset(p, i & 0xff, 24);
        live.push_back(p);
    }
    assert(pool.allocate() == nullptr && pool.free_blocks() == 0);
    for (int i = 0; i < 1000; ++i)  // 各块内容互不覆盖
        assert(static_cast<unsigned char*>(live[i])[23] == (i & 0xff));
    for (void* p : live) pool.deallocate(p);
    assert(pool.free_blocks() == 1000);
    void* again = pool.allocate();  // 后进先出：刚释放的最后一块最先被复用，缓存里还是热的
    assert(again == live.back());
    pool.deallocate(again);
    std::printf("fixed pool ok: 1000 blocks of %zu bytes\n", pool.block_size());
}

static void test_buddy() {
    constexpr std::size_t kPage = 4096;
    constexpr int kMaxOrder = 10;  // 与 Linux 页分配器的默认最高阶相同：2^10 页 = 4 MiB
    Buddy b(kPage, kMaxOrder);
    assert(b.bytes() == 4u << 20);

    // 内部碎片：请求 4097 字节得到 8 KiB 的块，浪费 4095 字节
    assert(Buddy::order_for(4097, kPage) == 1);
    void* p = b.allocate(4097);
    assert(p != nullptr && b.free_bytes() == b.bytes() - 2 * kPage);
    b.deallocate(p);
    assert(b.free_bytes() == b.bytes() && b.largest_free_block() == b.bytes());  // 合并回一整块

    // 随机分配与释放：检查对齐、内容不重叠、不变式，最后全部释放后应合并回一整块
    std::mt19937 rng(12345);
    std::vector<std::pair<unsigned char*, std::size_t>> live;
    for (int step = 0; step < 3000; ++step) {
        if (live.empty() || rng() % 3 != 0) {
            std::size_t n = 1 + rng() % (64 * 1024);
            auto* q = static_cast<unsigned char*>(b.allocate(n));
            if (q == nullptr) continue;
            std::size_t block = kPage << Buddy::order_for(n, kPage);
            assert(reinterpret_cast<std::uintptr_t>(q) % block == 0);  // 块按自身大小对齐
            std::memset(q, static_cast<int>(live.size() & 0xff), n);
            live.emplace_back(q, n);
        } else {
            std::size_t i = rng() % live.size();
            auto [q, n] = live[i];
            for (std::size_t t = 0; t < n; t += 997) assert(q[t] == q[0]);  // 没有被别的分配覆盖
            b.deallocate(q);
            live[i] = live.back();
            live.pop_back();
        }
        b.check_invariants();
    }
    for (auto [q, n] : live) b.deallocate(q);
    b.check_invariants();
    assert(b.free_bytes() == b.bytes() && b.largest_free_block() == b.bytes());

    // --8<-- [start:fragmentation]
    // 外部碎片：把 1024 个页全部分出去，再隔一个释放一个。一半内存空闲，
    // 但空闲页两两不相邻，伙伴都在用，无法合并：连 8 KiB 的请求也满足不了。
    std::vector<void*> pages;
    for (int i = 0; i < 1 << kMaxOrder; ++i) pages.push_back(b.allocate(kPage));
    for (std::size_t i = 0; i < pages.size(); i += 2) b.deallocate(pages[i]);
    assert(b.free_bytes() == b.bytes() / 2 && b.largest_free_block() == kPage);
    assert(b.allocate(2 * kPage) == nullptr);
    std::printf("buddy ok: 4 MiB arena, 3000 random ops; external fragmentation: %zu KiB free, largest block %zu KiB\n",
                b.free_bytes() / 1024, b.largest_free_block() / 1024);
    // --8<-- [end:fragmentation]
    for (std::size_t i = 1; i < pages.size(); i += 2) b.deallocate(pages[i]);
    assert(b.largest_free_block() == b.bytes());
}

int main() {
    test_pool();
    test_buddy();
    return 0;
}
