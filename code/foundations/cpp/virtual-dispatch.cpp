// listing: stdout=sizeof\(Plain\)=4 sizeof\(Poly\)=16\nctor sees Base\nvirtual call sees Derived\nvirtual dtor: Derived then Base
// 多态的代价与规则：虚表指针占的空间、构造期间的分派、虚析构函数。
#include <cassert>
#include <cstdio>
#include <memory>
#include <string>

struct Plain { int x; void f() {} };               // 普通成员函数不占对象空间
struct Poly { int x; virtual ~Poly() = default; };  // 有虚函数：对象开头多一个 vptr

static std::string g_log;

struct Base {
    Base() { g_log = name(); }        // 构造 Base 子对象时，vptr 指向 Base 的虚表
    virtual ~Base() { g_log += " then Base"; }
    virtual const char* name() const { return "Base"; }
};

struct Derived : Base {
    ~Derived() override { g_log = "Derived"; }
    const char* name() const override { return "Derived"; }
};

int main() {
    // x86-64：vptr 8 字节，int 4 字节，按 8 字节对齐补齐到 16
    static_assert(sizeof(Plain) == sizeof(int));
    static_assert(sizeof(Poly) == 2 * sizeof(void*));
    std::printf("sizeof(Plain)=%zu sizeof(Poly)=%zu\n", sizeof(Plain), sizeof(Poly));

    std::unique_ptr<Base> p = std::make_unique<Derived>();
    std::printf("ctor sees %s\n", g_log.c_str());   // 构造函数里的虚调用不会分派到派生类
    assert(g_log == "Base");
    std::printf("virtual call sees %s\n", p->name());  // 构造完成后：读 vptr，查表，间接调用
    p.reset();                                      // 经基类指针析构：先 ~Derived 再 ~Base
    std::printf("virtual dtor: %s\n", g_log.c_str());
    assert(g_log == "Derived then Base");
    return 0;
}
