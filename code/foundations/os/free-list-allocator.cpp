// listing: run
// listing: stdout=free-list allocator ok: 20000 operations, peak [0-9]+ live blocks, all memory coalesced back into one block of 1048560 bytes
// 一个通用分配器的最小实现（CS:APP 9.9 的隐式空闲链表）：每块有头部与尾部（边界标记，boundary tag），
// 首次适配（first fit）找空闲块，块太大就切分，释放时与前后相邻的空闲块立即合并（coalescing）。
// 随机的分配与释放与一份参考记录对照：块对齐、互不重叠、内容不被破坏、相邻空闲块不存在，全部释放后合并回一整块。
#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <vector>

// --8<-- [start:allocator]
class FreeListAllocator {
    // 块布局：[头部 8 字节][载荷 ...][尾部 8 字节]；头部与尾部都存 “块大小 | 已分配位”，块大小是 16 的倍数
    static constexpr size_t kAlign = 16, kTag = 8, kMin = 32;
    std::vector<std::byte> heap_;
    std::byte* lo_;
    std::byte* hi_;

    static size_t& tag(std::byte* p) { return *reinterpret_cast<size_t*>(p); }
    static size_t size_of(std::byte* block) { return tag(block) & ~size_t{1}; }
    static bool used(std::byte* block) { return tag(block) & 1; }
    static void mark(std::byte* block, size_t size, bool in_use) {
        tag(block) = size | in_use;                      // 头部
        tag(block + size - kTag) = size | in_use;        // 尾部：让后一块能在 O(1) 找到前一块
    }

public:
    explicit FreeListAllocator(size_t bytes) : heap_(bytes + kAlign) {
        auto addr = reinterpret_cast<uintptr_t>(heap_.data());
        lo_ = heap_.data() + ((kAlign - (addr + kTag) % kAlign) % kAlign);  // 让载荷 16 字节对齐
        size_t usable = (bytes - kAlign) / kAlign * kAlign;
        hi_ = lo_ + usable;
        mark(lo_, usable, false);                        // 一开始只有一整块空闲
    }

    void* allocate(size_t n) {
        size_t need = std::max(kMin, (n + 2 * kTag + kAlign - 1) / kAlign * kAlign);
        for (std::byte* b = lo_; b < hi_; b += size_of(b)) {      // 首次适配：线性扫描所有块
            if (used(b) || size_of(b) < need) continue;
            size_t rest = size_of(b) - need;
            if (rest >= kMin) {                          // 切分：剩下的部分成为新的空闲块
                mark(b, need, true);
                mark(b + need, rest, false);
            } else {
                mark(b, size_of(b), true);               // 剩余太小，整块给出（内部碎片）
            }
            return b + kTag;
        }
        return nullptr;                                  // 外部碎片或真的不够
    }

    void deallocate(void* p) {
        std::byte* b = static_cast<std::byte*>(p) - kTag;
        size_t size = size_of(b);
        std::byte* next = b + size;
        if (next < hi_ && !used(next)) size += size_of(next);     // 与后一块合并
        if (b > lo_) {
            std::byte* prev_footer = b - kTag;
            if (!(tag(prev_footer) & 1)) {               // 与前一块合并：前块的尾部就在本块头部之前
                size_t prev_size = tag(prev_footer) & ~size_t{1};
                b -= prev_size;
                size += prev_size;
            }
        }
        mark(b, size, false);
    }

    // 检查不变式，返回 (空闲块数, 最大空闲块)；相邻的两个空闲块说明漏了合并
    std::pair<int, size_t> check() {
        int free_blocks = 0;
        size_t largest = 0;
        bool prev_free = false;
        for (std::byte* b = lo_; b < hi_; b += size_of(b)) {
            assert(size_of(b) % kAlign == 0 && size_of(b) >= kMin);
            assert(tag(b) == tag(b + size_of(b) - kTag));
            assert(!(prev_free && !used(b)));
            prev_free = !used(b);
            if (prev_free) { free_blocks++; largest = std::max(largest, size_of(b)); }
        }
        return {free_blocks, largest};
    }
};
// --8<-- [end:allocator]

int main() {
    FreeListAllocator a(1 << 20);
    auto [blocks0, whole] = a.check();
    assert(blocks0 == 1);
    std::mt19937 rng(7);
    std::map<std::byte*, std::pair<size_t, unsigned char>> live;  // 载荷地址 -> (大小, 填充字节)
    size_t peak = 0;
    const int ops = 20000;
    for (int i = 0; i < ops; i++) {
        if (live.empty() || rng() % 100 < 55) {
            size_t n = 1 + rng() % (rng() % 8 == 0 ? 8192 : 256);
            auto* p = static_cast<std::byte*>(a.allocate(n));
            if (!p) continue;  // 堆满了：下一轮多半会释放
            assert(reinterpret_cast<uintptr_t>(p) % 16 == 0);
            auto it = live.lower_bound(p);  // 与前后已分配块都不重叠
            if (it != live.end()) assert(p + n <= it->first);
            if (it != live.begin()) { auto prev = std::prev(it); assert(prev->first + prev->second.first <= p); }
            unsigned char fill = static_cast<unsigned char>(i);
            std::memset(p, fill, n);
            live[p] = {n, fill};
            peak = std::max(peak, live.size());
        } else {
            auto it = live.begin();
            std::advance(it, rng() % live.size());
            for (size_t k = 0; k < it->second.first; k++)  // 别人的分配、切分与合并都没有碰过这块内容
                assert(static_cast<unsigned char>(it->first[k]) == it->second.second);
            a.deallocate(it->first);
            live.erase(it);
        }
        if (i % 500 == 0) a.check();
    }
    for (auto& [p, info] : live) a.deallocate(p);
    auto [blocks, largest] = a.check();
    bool ok = blocks == 1 && largest == whole;
    std::printf("free-list allocator %s: %d operations, peak %zu live blocks, all memory coalesced back into one block of %zu bytes\n",
                ok ? "ok" : "FAILED", ops, peak, largest);
    return ok ? 0 : 1;
}
