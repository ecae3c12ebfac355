"""把 native-ext.cc 编译成 Python 扩展模块并导入：不经过 setuptools，直接调用 g++，每一步都看得见。

扩展模块就是一个共享库：文件名要带解释器的后缀（EXT_SUFFIX，例如 .cpython-311-x86_64-linux-gnu.so），
里面要有一个 PyInit_<模块名> 函数（PYBIND11_MODULE 宏生成它），import 时解释器 dlopen 它再调用这个函数。
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).with_name("native-ext.cc")
MODULE = "native_ext"


# --8<-- [start:build]
def compile_command(out_dir: Path, cxx: str = "g++") -> list[str]:
    import pybind11  # 只提供头文件（header-only），版本钉在 requirements.txt 里

    suffix = sysconfig.get_config_var("EXT_SUFFIX")     # .cpython-311-x86_64-linux-gnu.so
    return [
        cxx, "-O2", "-std=c++17", "-shared", "-fPIC",
        "-fvisibility=hidden",                            # pybind11 的建议：只导出 PyInit_native_ext
        f"-I{sysconfig.get_paths()['include']}",         # Python.h，与 `python3-config --includes` 相同
        f"-I{pybind11.get_include()}",
        str(SOURCE), "-o", str(out_dir / f"{MODULE}{suffix}"),
    ]                                                     # 不链接 libpython：符号由加载它的解释器提供


def build(out_dir: Path, timeout: float = 300) -> Path:
    """编译到 out_dir，返回生成的 .so；编译失败时把 g++ 的错误原样抛出。"""
    if shutil.which("g++") is None:
        raise RuntimeError("g++ is not installed")
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = compile_command(out_dir)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{proc.stderr}")
    return Path(cmd[-1])


def load(so_path: Path):
    """按路径导入扩展模块（相当于 import native_ext，但不需要把目录放进 sys.path）。"""
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(so_path))
    spec = importlib.util.spec_from_file_location(MODULE, so_path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    sys.modules[MODULE] = module
    return module
# --8<-- [end:build]
