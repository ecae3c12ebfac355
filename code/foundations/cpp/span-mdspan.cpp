// listing: stdout=span: static extent 8 bytes, dynamic extent 16 bytes; subspan\(2, 3\) sums to 9\nview2d: \(1, 2\) is offset 6 row-major, 7 column-major; transposed view reads 7 without copying\nmdspan: (std::mdspan agrees|not in this libstdc\+\+, using the minimal view)
// std::span（C++20）是“指针 + 长度”的一维视图；std::mdspan（C++23）把同样的想法推广到多维：
// 指针 + 各维长度（extents）+ 布局映射（layout mapping，多维下标 → 一维偏移）。
// GCC 12 的 libstdc++ 没有 <mdspan>，这里写一个最小的二维视图说明它的机制；编译器有 <mdspan> 时
// 再用 std::mdspan 核对同样的下标映射。
#include <array>
#include <cassert>
#include <cstddef>
#include <cstdio>
#include <numeric>
#include <span>
#include <vector>

#if __has_include(<mdspan>)
#include <mdspan>
#endif

// --8<-- [start:span]
float sum(std::span<const float> xs) {  // 接受 vector、array、C 数组或其中一段，不拷贝
    float s = 0;
    for (float x : xs) s += x;
    return s;
}

void spans() {
    std::array<float, 8> a{};
    std::iota(a.begin(), a.end(), 0.0f);    // 0 1 2 ... 7
    std::span fixed = a;                     // 从 std::array 推导出静态长度：span<float, 8>
    static_assert(decltype(fixed)::extent == 8 && sizeof(fixed) == sizeof(float*));
    std::span<float> dynamic = a;            // 动态长度：指针 + 长度
    static_assert(sizeof(dynamic) == sizeof(float*) + sizeof(std::size_t));
    auto mid = dynamic.subspan(2, 3);        // 2 3 4：仍指向 a 的存储
    mid[0] = 10.0f;                          // 写的是 a[2]
    assert(a[2] == 10.0f);
    mid[0] = 2.0f;
    assert(sum(mid) == 9.0f);
    std::vector<float> v{1, 2, 3, 6};
    assert(sum(v) == 12.0f && std::as_bytes(std::span(v)).size() == 16);
    std::printf("span: static extent %zu bytes, dynamic extent %zu bytes; subspan(2, 3) sums to %g\n",
                sizeof(fixed), sizeof(dynamic), static_cast<double>(sum(mid)));
}
// --8<-- [end:span]

// --8<-- [start:view2d]
// 最小的二维视图：数据指针 + 两维长度 + 两维步长（stride）。offset(i, j) = i * stride0 + j * stride1。
//   行主序（C/NumPy 默认，mdspan 的 layout_right）：stride = (cols, 1)
//   列主序（Fortran/BLAS，layout_left）：           stride = (1, rows)
// 转置只是交换两维的长度与步长，数据一个字节也不动（mdspan 里要用 layout_stride 表示）。
template <typename T>
struct View2D {
    T* data;
    std::size_t extent[2];
    std::size_t stride[2];

    static View2D row_major(T* p, std::size_t rows, std::size_t cols) { return {p, {rows, cols}, {cols, 1}}; }
    static View2D col_major(T* p, std::size_t rows, std::size_t cols) { return {p, {rows, cols}, {1, rows}}; }
    std::size_t offset(std::size_t i, std::size_t j) const {
        assert(i < extent[0] && j < extent[1]);
        return i * stride[0] + j * stride[1];
    }
    T& operator()(std::size_t i, std::size_t j) const { return data[offset(i, j)]; }
    View2D transposed() const { return {data, {extent[1], extent[0]}, {stride[1], stride[0]}}; }
};

void views2d() {
    std::vector<float> buf(12);
    std::iota(buf.begin(), buf.end(), 0.0f);  // 3×4 矩阵，按行存：第 i 行第 j 列是 4i + j
    auto m = View2D<float>::row_major(buf.data(), 3, 4);
    auto f = View2D<float>::col_major(buf.data(), 3, 4);
    assert(m.offset(1, 2) == 6 && f.offset(1, 2) == 7);
    auto t = m.transposed();                   // 4×3
    assert(t.extent[0] == 4 && t(3, 1) == m(1, 3) && t(3, 1) == 7.0f);
    std::printf("view2d: (1, 2) is offset %zu row-major, %zu column-major; transposed view reads %g without copying\n",
                m.offset(1, 2), f.offset(1, 2), static_cast<double>(t(3, 1)));
}
// --8<-- [end:view2d]

void check_against_std_mdspan() {
#if defined(__cpp_lib_mdspan)
    std::vector<float> buf(12);
    std::iota(buf.begin(), buf.end(), 0.0f);
    std::mdspan<float, std::dextents<std::size_t, 2>, std::layout_right> r(buf.data(), 3, 4);
    std::mdspan<float, std::dextents<std::size_t, 2>, std::layout_left> l(buf.data(), 3, 4);
    assert(r.mapping()(1, 2) == 6 && l.mapping()(1, 2) == 7);
    std::printf("mdspan: std::mdspan agrees\n");
#else
    std::printf("mdspan: not in this libstdc++, using the minimal view\n");
#endif
}

int main() {
    spans();
    views2d();
    check_against_std_mdspan();
    return 0;
}
