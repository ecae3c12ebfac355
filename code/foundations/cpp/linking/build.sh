#!/usr/bin/env bash
# 用法：build.sh [输出目录]。构建静态库、共享库和几种链接方式的可执行文件。
# -O0：让每个函数都留在符号表里，方便用 nm/readelf/objdump 观察。
set -euo pipefail
SRC=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-build}
mkdir -p "$OUT"/static "$OUT"/v1 "$OUT"/v2
cd "$OUT"
CXX="g++ -std=c++20 -O0"

# 1. 编译：每个 .cpp 变成一个可重定位目标文件
$CXX -c "$SRC/main.cpp" -o main.o
$CXX -c "$SRC/vec.cpp" -o vec.o

# 2. 静态库：只是 .o 的归档；链接时被引用到的成员整个拷进可执行文件
ar rcs static/libvec.a vec.o
$CXX main.o static/libvec.a -o app-static

# 3. 共享库：必须是位置无关代码（-fPIC）；soname 写进库里，链接它的程序记下的是 soname
for v in v1 v2; do
    $CXX -fPIC -DVEC_VERSION="\"$v\"" -c "$SRC/vec.cpp" -o "$v/vec.pic.o"
    $CXX -shared -Wl,-soname,libvec.so.1 "$v/vec.pic.o" -o "$v/libvec.so.1"
    ln -sf libvec.so.1 "$v/libvec.so"   # 链接器按 -lvec 找 libvec.so
done

# 4. 几种动态链接的可执行文件
$CXX main.o -Lv1 -lvec -o app-bare                                          # 不告诉加载器去哪找
$CXX main.o -Lv1 -lvec -Wl,-rpath,'$ORIGIN/v1' -o app-runpath               # DT_RUNPATH（新式）
$CXX main.o -Lv1 -lvec -Wl,--disable-new-dtags,-rpath,'$ORIGIN/v1' -o app-rpath  # DT_RPATH（旧式）
$CXX main.o -Lv1 -lvec -Wl,-rpath,'$ORIGIN/v1' -Wl,-z,now -o app-now        # 启动时解析全部符号

# 5. 用来介入（interpose）的库
$CXX -fPIC -shared "$SRC/preload.cpp" -o libpreload.so
