// listing: stdout=map: sorted, worst lookup [0-9]+ comparisons <= bound 20\nunordered_map: rehashed [0-9]+ times, references kept\nreserve: no rehash
// std::map（红黑树）与 std::unordered_map（拉链法哈希表）：顺序、复杂度与迭代器失效规则。
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

static long g_compares = 0;
struct CountingLess {  // 数一数查找时做了几次比较
    bool operator()(int a, int b) const { ++g_compares; return a < b; }
};

int main() {
    // --8<-- [start:map]
    constexpr int n = 1000;
    std::map<int, int, CountingLess> tree;
    for (int i = n - 1; i >= 0; --i) tree[(i * 7919) % n] = i;  // 乱序插入
    int prev = -1;
    for (const auto& [k, v] : tree) { assert(k > prev); prev = k; }  // 中序遍历：按键有序

    // 红黑树高度 h <= 2 log2(n+1)，查找最多比较 h+1 次（沿路径每层一次，最后判等一次）
    const long bound = static_cast<long>(2 * std::log2(n + 1.0)) + 1;
    long worst = 0;
    for (int k = 0; k < n; ++k) {
        g_compares = 0;
        assert(tree.find(k) != tree.end());
        worst = std::max(worst, g_compares);
    }
    assert(worst <= bound);

    // 节点容器：插入不会让任何已有迭代器、指针失效；erase 只让被删元素的迭代器失效
    auto it = tree.find(500);
    const int* addr = &it->second;
    for (int k = n; k < 2 * n; ++k) tree[k] = k;
    assert(&it->second == addr && it->first == 500);
    for (auto e = tree.begin(); e != tree.end();) {  // 边遍历边删除：用 erase 的返回值继续
        e = (e->first % 2 == 1) ? tree.erase(e) : std::next(e);
    }
    assert(tree.size() == static_cast<std::size_t>(n) && it->first == 500);
    std::printf("map: sorted, worst lookup %ld comparisons <= bound %ld\n", worst, bound);
    // --8<-- [end:map]

    // --8<-- [start:unordered]
    std::unordered_map<int, std::string> hash;
    assert(hash.max_load_factor() == 1.0f);  // 默认最大负载因子 1.0：平均每个桶至多一个元素
    hash[0] = "zero";
    const std::string* ref = &hash[0];
    std::size_t buckets = hash.bucket_count();
    int rehashes = 0;
    for (int k = 1; k < 10000; ++k) {
        hash[k] = "v";
        assert(hash.load_factor() <= hash.max_load_factor());  // 超过就立刻重散列
        if (hash.bucket_count() != buckets) { ++rehashes; buckets = hash.bucket_count(); }
    }
    // 重散列让所有迭代器失效（桶数组换了，遍历顺序也变了），但元素节点没有搬家：
    // 指向元素的指针和引用仍然有效
    assert(rehashes > 0 && ref == &hash[0] && *ref == "zero");
    std::printf("unordered_map: rehashed %d times, references kept\n", rehashes);

    // 预先知道元素个数就 reserve：桶数一次到位，插入过程中不再重散列
    std::unordered_map<int, int> sized;
    sized.reserve(10000);
    std::size_t fixed = sized.bucket_count();
    assert(fixed >= 10000);
    for (int k = 0; k < 10000; ++k) sized[k] = k;
    assert(sized.bucket_count() == fixed);
    std::puts("reserve: no rehash");
    // --8<-- [end:unordered]

    // 对照：vector 扩容时整块搬家，旧的指针、引用、迭代器全部失效
    std::vector<int> vec(4);
    vec.shrink_to_fit();
    const int* before = vec.data();
    vec.push_back(1);  // 新块先分配、元素搬过去、旧块才释放，所以地址一定不同
    assert(vec.data() != before);
    return 0;
}
