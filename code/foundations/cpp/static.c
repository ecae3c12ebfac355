// listing: stdout=next_id: 1 2 3\nfile counter 3\nzero-initialized: 0 0
// C 语言里 static 的三种含义：文件作用域的内部链接、函数内的静态存储期、数组形参的最小长度。
#include <assert.h>
#include <stdio.h>

// --8<-- [start:linkage]
static int file_counter = 0;           // 内部链接：符号不导出，别的 .c 文件看不见，可以有同名的变量
static void bump(void) { ++file_counter; }  // 同理，static 函数只在本翻译单元可见
// --8<-- [end:linkage]

// --8<-- [start:storage]
int next_id(void) {
    static int id = 0;  // 静态存储期：放在 .bss，程序启动前清零，只初始化一次，调用之间保留值
    bump();
    return ++id;
}

int uninitialized_global;               // 没写初值的全局变量与 static 变量都在 .bss，保证为 0
static double uninitialized_static;
// --8<-- [end:storage]

// --8<-- [start:array]
// C99：形参写成 a[static 4]，承诺调用者至少传入 4 个元素的有效数组（编译器可据此优化、报警告）
int sum4(const int a[static 4]) { return a[0] + a[1] + a[2] + a[3]; }
// --8<-- [end:array]

int main(void) {
    int a = next_id(), b = next_id(), c = next_id();
    printf("next_id: %d %d %d\n", a, b, c);
    printf("file counter %d\n", file_counter);
    printf("zero-initialized: %d %g\n", uninitialized_global, uninitialized_static);
    int v[4] = {1, 2, 3, 4};
    assert(sum4(v) == 10);
    return 0;
}
