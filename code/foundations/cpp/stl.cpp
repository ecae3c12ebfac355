// listing: run
// listing: stdout=growth ok: 11 reallocations, 1023 moves for 1024 push_backs\n.*stability ok\n.*algorithms ok\n.*pmr ok\n.*vocabulary ok
// 标准库容器与算法的几条可断言的事实：vector 的几何增长与均摊 O(1)、哪些操作保持引用有效、
// nth_element 与 sort 的结果一致、pmr 内存资源、optional/variant 的大小与访问。
// 增长因子是实现细节：libstdc++（GCC）与 libc++ 为 2，MSVC 为 1.5；这里断言的是 libstdc++ 的行为。
#include <algorithm>
#include <any>
#include <cassert>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <list>
#include <memory_resource>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

// --8<-- [start:growth]
struct Counted {
    static inline int moves = 0;
    int v;
    Counted(int x) : v(x) {}
    Counted(const Counted&) = default;
    Counted(Counted&& o) noexcept : v(o.v) { ++moves; }
};

void growth() {
    std::vector<Counted> v;
    int reallocations = 0;
    const Counted* last = nullptr;
    for (int i = 0; i < 1024; ++i) {
        v.emplace_back(i);
        if (v.data() != last) { ++reallocations; last = v.data(); }
    }
    // 容量 1, 2, 4, …, 1024：共 11 次分配；搬运 1 + 2 + … + 512 = 1023 次，少于 n，均摊每次 push_back O(1)
    assert(v.capacity() == 1024 && reallocations == 11 && Counted::moves == 1023);
    std::printf("growth ok: %d reallocations, %d moves for 1024 push_backs\n", reallocations, Counted::moves);
}
// --8<-- [end:growth]

// --8<-- [start:stability]
void stability() {
    // deque 在两端插入：迭代器失效，但已有元素的引用与指针保持有效（元素不搬家，只是中控数组可能重分配）
    std::deque<int> d{42};
    const int* p = &d.front();
    for (int i = 0; i < 10000; ++i) d.push_back(i);
    assert(p == &d.front() && *p == 42);

    // unordered_map 重散列：迭代器失效，但元素的引用与指针有效（节点不搬家，只重挂到新的桶数组）
    std::unordered_map<int, std::string> m{{0, "zero"}};
    const std::string* q = &m.at(0);
    auto buckets = m.bucket_count();
    for (int i = 1; i < 10000; ++i) m.emplace(i, "x");
    assert(m.bucket_count() > buckets && q == &m.at(0) && *q == "zero");

    // list 的 splice：O(1) 地把节点挪到另一个链表，被挪动元素的迭代器仍然有效，只是改属新链表
    std::list<int> a{1, 2, 3}, b{10};
    auto it = std::next(a.begin());  // 指向 2
    b.splice(b.end(), a, it);
    assert(*it == 2 && a.size() == 2 && b.back() == 2 && &*std::prev(b.end()) == &*it);
    std::puts("stability ok");
}
// --8<-- [end:stability]

// --8<-- [start:algorithms]
void algorithms() {
    std::mt19937 rng(0);
    std::vector<int> xs(10001);
    for (auto& x : xs) x = static_cast<int>(rng() % 100000);
    auto sorted = xs;
    std::sort(sorted.begin(), sorted.end());  // introsort：快排 + 递归过深时转堆排序 + 小段插入排序，最坏 O(n log n)

    // 中位数与 top-k：nth_element 平均 O(n)，只保证第 k 个元素就位、左边都不大于它、右边都不小于它
    auto med = xs;
    std::nth_element(med.begin(), med.begin() + 5000, med.end());
    assert(med[5000] == sorted[5000]);
    assert(std::all_of(med.begin(), med.begin() + 5000, [&](int x) { return x <= med[5000]; }));

    // 删除满足条件的元素：remove_if 只把保留的元素前移并返回新结尾，erase 才真正缩短（C++20 可直接 std::erase_if）
    auto ys = xs;
    ys.erase(std::remove_if(ys.begin(), ys.end(), [](int x) { return x % 2; }), ys.end());
    auto zs = xs;
    auto removed = std::erase_if(zs, [](int x) { return x % 2; });
    assert(ys == zs && removed == xs.size() - ys.size() && std::all_of(ys.begin(), ys.end(), [](int x) { return x % 2 == 0; }));

    // stable_sort 保持相等键的原有相对顺序，sort 不保证
    std::vector<std::pair<int, int>> kv;
    for (int i = 0; i < 1000; ++i) kv.emplace_back(static_cast<int>(rng() % 10), i);
    std::stable_sort(kv.begin(), kv.end(), [](auto& l, auto& r) { return l.first < r.first; });
    for (std::size_t i = 1; i < kv.size(); ++i)
        assert(kv[i - 1].first < kv[i].first || kv[i - 1].second < kv[i].second);

    // 有序区间上的二分：lower_bound 第一个 >= x，upper_bound 第一个 > x
    auto [lo, hi] = std::equal_range(sorted.begin(), sorted.end(), sorted[777]);
    assert(*lo == sorted[777] && (hi == sorted.end() || *hi > sorted[777]));
    std::puts("algorithms ok");
}
// --8<-- [end:algorithms]

// --8<-- [start:pmr]
// 统计向上游要了几次内存的资源：用来证明缓冲区够用时一次系统分配也没有
struct CountingResource : std::pmr::memory_resource {
    int allocations = 0;
    void* do_allocate(std::size_t n, std::size_t align) override {
        ++allocations;
        return std::pmr::new_delete_resource()->allocate(n, align);
    }
    void do_deallocate(void* p, std::size_t n, std::size_t align) override {
        std::pmr::new_delete_resource()->deallocate(p, n, align);
    }
    bool do_is_equal(const memory_resource& o) const noexcept override { return this == &o; }
};

void pmr() {
    CountingResource upstream;
    alignas(std::max_align_t) std::byte buffer[4096];
    {
        // 单调缓冲资源：从 buffer 里顺序切块，deallocate 什么也不做，整体在资源析构时释放
        std::pmr::monotonic_buffer_resource arena(buffer, sizeof buffer, &upstream);
        std::pmr::vector<int> v(&arena);
        v.reserve(512);  // 2 KiB：buffer 放得下
        for (int i = 0; i < 512; ++i) v.push_back(i);
        assert(upstream.allocations == 0);
        std::pmr::vector<int> big(&arena);
        big.reserve(4096);  // 16 KiB：buffer 剩余不够，向上游要
        assert(upstream.allocations == 1);
    }
    std::puts("pmr ok");
}
// --8<-- [end:pmr]

// --8<-- [start:vocabulary]
void vocabulary() {
    std::optional<int> none, some = 3;
    static_assert(sizeof(std::optional<int>) == 8);  // 值 + 一个“是否有值”的标志，按 int 对齐
    assert(none.value_or(-1) == -1 && *some == 3);

    std::variant<int, double, std::string> v = 2.5;  // 带标签的联合：大小 = 最大成员 + 标签（按对齐取整）
    static_assert(sizeof(v) == sizeof(std::string) + 8);
    assert(v.index() == 1 && std::holds_alternative<double>(v));
    bool threw = false;
    try { (void)std::get<int>(v); } catch (const std::bad_variant_access&) { threw = true; }
    assert(threw);
    auto describe = [](const auto& x) -> std::string {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>) return "string";
        else return "number";
    };
    assert(std::visit(describe, v) == "number");

    std::any a = std::string("any");  // 类型擦除：可能堆分配，取值要写对类型
    assert(std::any_cast<std::string>(a) == "any" && std::any_cast<int>(&a) == nullptr);
    std::puts("vocabulary ok");
}
// --8<-- [end:vocabulary]

int main() {
    growth();
    stability();
    algorithms();
    pmr();
    vocabulary();
    return 0;
}
