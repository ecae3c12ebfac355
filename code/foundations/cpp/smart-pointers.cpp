// listing: stdout=unique_ptr: 8 bytes\nshared_ptr: 16 bytes\nweak_ptr expired after scope
// unique_ptr、shared_ptr、weak_ptr 的大小、计数与所有权转移。
#include <cassert>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

struct Node {
    std::string name;
    std::shared_ptr<Node> next;  // 强引用：拥有后继节点
    std::weak_ptr<Node> prev;    // 弱引用：只观察，不增加强计数
    explicit Node(std::string n) : name(std::move(n)) {}
};

int main() {
    // unique_ptr 使用默认删除器时与裸指针一样大；shared_ptr 是两个指针：对象 + 控制块
    static_assert(sizeof(std::unique_ptr<int>) == sizeof(int*));
    static_assert(sizeof(std::shared_ptr<int>) == 2 * sizeof(int*));
    std::printf("unique_ptr: %zu bytes\nshared_ptr: %zu bytes\n",
                sizeof(std::unique_ptr<int>), sizeof(std::shared_ptr<int>));

    auto u = std::make_unique<int>(1);
    auto u2 = std::move(u);                    // 只能移动：所有权转移，源变为空
    assert(!u && *u2 == 1);
    std::shared_ptr<int> from_unique = std::move(u2);  // unique_ptr 可以升级为 shared_ptr
    assert(from_unique.use_count() == 1);

    std::weak_ptr<Node> watch;
    {
        auto a = std::make_shared<Node>("a");  // 一次分配：对象与控制块相邻
        auto b = std::make_shared<Node>("b");
        a->next = b;                           // b 的强计数变为 2
        b->prev = a;                           // a 的强计数仍为 1
        assert(a.use_count() == 1 && b.use_count() == 2);
        watch = a;
        assert(watch.use_count() == 1);        // weak_ptr 不计入强计数
        if (auto p = watch.lock()) {           // 临时提升为强引用
            assert(p->name == "a" && a.use_count() == 2);
        }
    }  // 没有强引用环：a 先析构，随后 b 析构
    assert(watch.expired() && watch.lock() == nullptr);
    std::puts("weak_ptr expired after scope");
    return 0;
}
