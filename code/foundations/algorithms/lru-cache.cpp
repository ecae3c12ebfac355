// listing: run
// listing: stdout=lru ok: 200000 random operations agree with the reference, hits [0-9]+
// LRU 缓存：哈希表 + 双向链表，get 与 put 都是 O(1)。
// 与一个 O(n) 的参考实现（按最近使用时间线性找最旧项）做 20 万次随机操作对照。
#include <cstdio>
#include <list>
#include <optional>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

// --8<-- [start:lru]
template <class K, class V>
class LRUCache {
public:
    explicit LRUCache(size_t capacity) : cap_(capacity) {}

    std::optional<V> get(const K& key) {
        auto it = index_.find(key);
        if (it == index_.end()) return std::nullopt;
        order_.splice(order_.begin(), order_, it->second);  // 移到表头：O(1)，迭代器仍然有效
        return it->second->second;
    }

    void put(const K& key, V value) {
        if (auto it = index_.find(key); it != index_.end()) {
            it->second->second = std::move(value);
            order_.splice(order_.begin(), order_, it->second);
            return;
        }
        if (order_.size() == cap_) {                        // 淘汰表尾：最久未使用
            index_.erase(order_.back().first);
            order_.pop_back();
        }
        order_.emplace_front(key, std::move(value));
        index_[key] = order_.begin();
    }

    size_t size() const { return order_.size(); }

private:
    size_t cap_;
    std::list<std::pair<K, V>> order_;                      // 表头最近使用
    std::unordered_map<K, typename std::list<std::pair<K, V>>::iterator> index_;
};
// --8<-- [end:lru]

struct Reference {  // 每项记最近一次使用的时间戳，淘汰时线性找最小者
    size_t cap = 0;
    long clock = 0;
    std::vector<std::pair<int, std::pair<int, long>>> items;
    std::optional<int> get(int k) {
        for (auto& [key, vt] : items)
            if (key == k) { vt.second = ++clock; return vt.first; }
        return std::nullopt;
    }
    void put(int k, int v) {
        for (auto& [key, vt] : items)
            if (key == k) { vt = {v, ++clock}; return; }
        if (items.size() == cap) {
            size_t oldest = 0;
            for (size_t i = 1; i < items.size(); i++)
                if (items[i].second.second < items[oldest].second.second) oldest = i;
            items.erase(items.begin() + static_cast<long>(oldest));
        }
        items.push_back({k, {v, ++clock}});
    }
};

int main() {
    std::mt19937 rng(1);
    LRUCache<int, int> lru(16);
    Reference ref;
    ref.cap = 16;
    long hits = 0;
    for (int i = 0; i < 200000; i++) {
        int key = static_cast<int>(rng() % 40);
        if (rng() % 2) {
            auto a = lru.get(key), b = ref.get(key);
            if (a != b) { std::printf("mismatch at op %d\n", i); return 1; }
            hits += a.has_value();
        } else {
            lru.put(key, i);
            ref.put(key, i);
        }
        if (lru.size() != ref.items.size()) { std::printf("size mismatch at op %d\n", i); return 1; }
    }
    std::printf("lru ok: 200000 random operations agree with the reference, hits %ld\n", hits);
}
