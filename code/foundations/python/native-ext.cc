// pybind11 扩展模块 native_ext：缓冲区协议、DLPack、释放 GIL 与引用计数。
// 由 code/foundations/python/native-build.py 在测试时用 g++ 直接编译成 native_ext*.so；
// 扩展名用 .cc 而不是 .cpp，因为 tests/test_listings.py 会把 .cpp 当作独立程序在 sanitizer 下运行。
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

// --8<-- [start:buffer]
// 消费任何实现了缓冲区协议（PEP 3118）的对象：bytes、bytearray、memoryview、array.array、NumPy 数组……
// request() 向导出方要一个 Py_buffer 视图（指针、元素格式、形状、步长），不复制数据；
// buffer_info 析构时调用 PyBuffer_Release，视图存在期间导出方不能移动这块内存（bytearray 不能改大小）。
double sum_float64(py::buffer obj) {
    py::buffer_info info = obj.request();  // 只读请求
    if (info.format != py::format_descriptor<double>::format() || info.itemsize != sizeof(double))
        throw py::type_error("expected a float64 buffer, got format '" + info.format + "'");
    double total = 0.0;
    std::vector<py::ssize_t> idx(info.ndim, 0);
    const py::ssize_t n = info.size;  // 元素总数
    for (py::ssize_t k = 0; k < n; ++k) {
        // 按步长（字节）寻址，所以转置、切片得到的非连续视图也能正确求和
        const char *p = static_cast<const char *>(info.ptr);
        for (py::ssize_t d = 0; d < info.ndim; ++d) p += idx[d] * info.strides[d];
        total += *reinterpret_cast<const double *>(p);
        for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {  // 多维下标加一（末维最快）
            if (++idx[d] < info.shape[d]) break;
            idx[d] = 0;
        }
    }
    return total;
}

// 可写请求：只读的导出方（bytes、只读的 memoryview）在这里就被拒绝，抛 BufferError。
std::uintptr_t fill_bytes(py::buffer obj, int value) {
    py::buffer_info info = obj.request(/*writable=*/true);
    if (info.ndim != 1 || info.strides[0] != info.itemsize)
        throw std::invalid_argument("expected a contiguous 1-D buffer");  // 翻译成 ValueError
    std::memset(info.ptr, value, static_cast<size_t>(info.size * info.itemsize));
    return reinterpret_cast<std::uintptr_t>(info.ptr);
}

// 持有一个视图对象：它活着，导出方就被“锁住”。
struct HeldView {
    py::buffer_info info;
    explicit HeldView(py::buffer obj) : info(obj.request()) {}
    std::uintptr_t address() const { return reinterpret_cast<std::uintptr_t>(info.ptr); }
};
// --8<-- [end:buffer]

// --8<-- [start:dlpack-abi]
// DLPack 的 C ABI（dlpack.h 1.x 的布局）：各框架只要对这几个结构体的内存布局达成一致，就能互相借用内存。
extern "C" {
struct DLDevice { int32_t device_type; int32_t device_id; };  // kDLCPU = 1，kDLCUDA = 2
struct DLDataType { uint8_t code; uint8_t bits; uint16_t lanes; };  // code: 0 int，1 uint，2 float，4 bfloat
struct DLTensor {
    void *data;            // 数据起点（加上 byte_offset）
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;      // 以元素计；1.2 之前允许 NULL（紧凑的行主序），1.2 起 ndim != 0 时必须给出
    uint64_t byte_offset;
};
struct DLManagedTensor {  // 0.x 的“无版本”形式，胶囊名 "dltensor"
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(DLManagedTensor *self);
};
struct DLPackVersion { uint32_t major; uint32_t minor; };
struct DLManagedTensorVersioned {  // 1.0 起的带版本形式，胶囊名 "dltensor_versioned"
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(DLManagedTensorVersioned *self);
    uint64_t flags;        // 第 0 位：只读；第 1 位：生产者为交换做了复制
    DLTensor dl_tensor;
};
}
constexpr uint64_t kDLFlagReadOnly = 1u << 0;
// --8<-- [end:dlpack-abi]

// --8<-- [start:dlpack-consume]
// 消费者一侧：从任何实现了 __dlpack__ 的对象（PyTorch 张量、NumPy 数组、JAX 数组……）借用内存，原地乘以 factor。
// 协议：拿到名为 "dltensor[_versioned]" 的胶囊 → 改名为 "used_..."（宣布所有权转到我们手里）→ 用完调用 deleter。
py::dict scale_inplace(py::object obj, float factor) {
    py::object cap;
    try {
        cap = obj.attr("__dlpack__")(py::arg("max_version") = py::make_tuple(1, 0));
    } catch (py::error_already_set &e) {
        if (!e.matches(PyExc_TypeError)) throw;
        cap = obj.attr("__dlpack__")();  // 旧的生产者不认识 max_version
    }
    PyObject *c = cap.ptr();
    DLTensor *t = nullptr;
    bool versioned = PyCapsule_IsValid(c, "dltensor_versioned");
    DLManagedTensorVersioned *mv = nullptr;
    DLManagedTensor *m = nullptr;
    if (versioned) {
        mv = static_cast<DLManagedTensorVersioned *>(PyCapsule_GetPointer(c, "dltensor_versioned"));
        if (mv->version.major != 1) throw std::invalid_argument("unsupported DLPack major version");
        if (mv->flags & kDLFlagReadOnly) throw std::invalid_argument("the producer exported a read-only tensor");
        t = &mv->dl_tensor;
        PyCapsule_SetName(c, "used_dltensor_versioned");
    } else if (PyCapsule_IsValid(c, "dltensor")) {
        m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(c, "dltensor"));
        t = &m->dl_tensor;
        PyCapsule_SetName(c, "used_dltensor");
    } else {
        throw py::type_error("__dlpack__ did not return a DLPack capsule");
    }
    // 从这里起胶囊的析构函数不再释放张量，deleter 归我们调用（无论成功还是抛异常）。
    struct Release {
        DLManagedTensorVersioned *mv; DLManagedTensor *m;
        ~Release() { if (mv && mv->deleter) mv->deleter(mv); if (m && m->deleter) m->deleter(m); }
    } release{mv, m};

    if (t->device.device_type != 1) throw std::invalid_argument("only CPU tensors (kDLCPU) are handled here");
    if (t->dtype.code != 2 || t->dtype.bits != 32 || t->dtype.lanes != 1)
        throw py::type_error("expected float32");
    char *base = static_cast<char *>(t->data) + t->byte_offset;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
    std::vector<int64_t> idx(t->ndim, 0), stride(t->ndim, 1);
    for (int d = t->ndim - 1; d >= 0; --d)  // 旧生产者给 NULL 时按行主序自己算
        stride[d] = t->strides ? t->strides[d] : (d + 1 < t->ndim ? stride[d + 1] * t->shape[d + 1] : 1);
    for (int64_t k = 0; k < n; ++k) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; ++d) off += idx[d] * stride[d];
        reinterpret_cast<float *>(base)[off] *= factor;
        for (int d = t->ndim - 1; d >= 0; --d) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    py::dict out;
    out["ptr"] = reinterpret_cast<std::uintptr_t>(base);
    out["versioned"] = versioned;
    out["ndim"] = t->ndim;
    out["strides"] = std::vector<int64_t>(stride);
    return out;
}
// --8<-- [end:dlpack-consume]

// --8<-- [start:dlpack-export]
// 生产者一侧：C++ 拥有的 float32 缓冲区，同时通过缓冲区协议（NumPy）和 DLPack（PyTorch）零拷贝导出。
static int g_live_buffers = 0;  // 还活着的 Buffer 个数，测试用它观察所有权何时真正结束

struct Buffer {
    std::vector<float> data;
    explicit Buffer(size_t n) : data(n) {
        for (size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
        ++g_live_buffers;
    }
    ~Buffer() { --g_live_buffers; }
    std::uintptr_t address() const { return reinterpret_cast<std::uintptr_t>(data.data()); }
};

// manager_ctx：持有 Python 侧 Buffer 对象的一个强引用，并存放 shape 与 strides；deleter 释放它们。
struct ExportCtx {
    py::object owner;
    int64_t shape[1];
    int64_t strides[1];
};

static void delete_versioned(DLManagedTensorVersioned *self) {
    py::gil_scoped_acquire gil;  // deleter 可能在任何线程、不持 GIL 时被调用，减引用前先拿 GIL
    delete static_cast<ExportCtx *>(self->manager_ctx);
    delete self;
}
static void delete_legacy(DLManagedTensor *self) {
    py::gil_scoped_acquire gil;
    delete static_cast<ExportCtx *>(self->manager_ctx);
    delete self;
}

// 胶囊被回收时，若名字仍是 "dltensor[_versioned]"（没有消费者接手），由胶囊负责调用 deleter。
static void capsule_versioned_dtor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        auto *m = static_cast<DLManagedTensorVersioned *>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
        m->deleter(m);
    }
}
static void capsule_legacy_dtor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
        auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap, "dltensor"));
        m->deleter(m);
    }
}

py::object buffer_dlpack(py::object self, py::object stream, py::object max_version, py::object dl_device,
                         py::object copy) {
    if (!stream.is_none()) throw py::buffer_error("a CPU producer accepts only stream=None");  // CPU 没有流要同步
    if (!dl_device.is_none() && dl_device.cast<std::pair<int, int>>() != std::pair<int, int>{1, 0})
        throw py::buffer_error("only kDLCPU device 0 is available");
    if (!copy.is_none() && copy.cast<bool>()) throw py::buffer_error("this producer never copies");
    Buffer &b = self.cast<Buffer &>();
    auto *ctx = new ExportCtx{self, {static_cast<int64_t>(b.data.size())}, {1}};
    DLTensor t{b.data.data(), {1, 0}, 1, {2, 32, 1}, ctx->shape, ctx->strides, 0};
    bool v1 = !max_version.is_none() && max_version.cast<std::pair<int, int>>().first >= 1;
    PyObject *cap;
    if (v1) {
        auto *m = new DLManagedTensorVersioned{{1, 0}, ctx, delete_versioned, 0, t};
        cap = PyCapsule_New(m, "dltensor_versioned", capsule_versioned_dtor);
        if (!cap) m->deleter(m);  // 胶囊没建成：没人会调用 deleter，这里自己释放
    } else {
        auto *m = new DLManagedTensor{t, ctx, delete_legacy};
        cap = PyCapsule_New(m, "dltensor", capsule_legacy_dtor);
        if (!cap) m->deleter(m);
    }
    if (!cap) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(cap);  // PyCapsule_New 返回新引用：接管，不再加一
}
// --8<-- [end:dlpack-export]

// --8<-- [start:gil]
// 一个“长”的 C++ 调用：忙等 seconds 秒，返回进入与离开时的单调时钟读数（与 time.monotonic 同一时钟）。
// release=true 时先释放 GIL：这段时间里别的 Python 线程可以执行字节码；代价是这里不能碰任何 Python 对象。
std::pair<double, double> spin(double seconds, bool release) {
    auto now = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
    auto busy = [&](double start) {
        volatile uint64_t x = 0;
        while (now() - start < seconds) x = x + 1;
    };
    double start = now();
    if (release) {
        py::gil_scoped_release nogil;  // 析构时重新获取 GIL
        busy(start);
    } else {
        busy(start);
    }
    return {start, now()};
}
// --8<-- [end:gil]

// --8<-- [start:refs]
// 引用计数：py::object 是拥有引用的 RAII 句柄（拷贝加一、析构减一），py::handle 只是借来的裸指针。
struct Holder {
    py::object held;  // 持有一个强引用：被持有的对象至少活到 Holder 析构
    explicit Holder(py::object o) : held(std::move(o)) {}
};

Py_ssize_t refcount(py::handle h) { return Py_REFCNT(h.ptr()); }

// 错误示范：只加不减，对象永远不会被释放（泄漏）；unleak 把这一次补上。
void leak(py::handle h) { h.inc_ref(); }
void unleak(py::handle h) { h.dec_ref(); }
// --8<-- [end:refs]

PYBIND11_MODULE(native_ext, m) {
    m.doc() = "buffer protocol, DLPack, GIL release and reference counting across the Python/C++ boundary";
    m.def("sum_float64", &sum_float64, py::arg("obj"));
    m.def("fill_bytes", &fill_bytes, py::arg("obj"), py::arg("value"));
    py::class_<HeldView>(m, "HeldView")
        .def(py::init<py::buffer>())
        .def_property_readonly("address", &HeldView::address);
    m.def("scale_inplace", &scale_inplace, py::arg("obj"), py::arg("factor"));
    // --8<-- [start:bind-buffer]
    py::class_<Buffer>(m, "Buffer", py::buffer_protocol())
        .def(py::init<size_t>())
        .def_property_readonly("address", &Buffer::address)
        .def("__len__", [](const Buffer &b) { return b.data.size(); })
        .def_buffer([](Buffer &b) {  // 缓冲区协议：NumPy 看到的就是 b.data 这块内存
            return py::buffer_info(b.data.data(), sizeof(float), py::format_descriptor<float>::format(), 1,
                                   {b.data.size()}, {sizeof(float)});
        })
        .def("__dlpack__", &buffer_dlpack, py::kw_only(), py::arg("stream") = py::none(),
             py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
        .def("__dlpack_device__", [](const Buffer &) { return py::make_tuple(1, 0); });
    // --8<-- [end:bind-buffer]
    m.def("live_buffers", [] { return g_live_buffers; });
    m.def("spin", &spin, py::arg("seconds"), py::arg("release"));
    py::class_<Holder>(m, "Holder").def(py::init<py::object>());
    m.def("refcount", &refcount);
    m.def("leak", &leak);
    m.def("unleak", &unleak);
}
