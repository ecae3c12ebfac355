"""原子地替换一个文件（保存检查点、写配置的正确做法）：写临时文件 → fsync 文件 → rename 覆盖 → fsync 目录。

崩溃后读者只会看到完整的旧文件或完整的新文件；函数返回之后，新文件已经持久化。
"""
from __future__ import annotations

import os
import stat
import tempfile


# --8<-- [start:replace]
def atomic_replace(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    # 1. 临时文件必须和目标在同一个文件系统（同一目录最稳妥）：跨文件系统的 rename 会失败（EXDEV）
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        try:
            if os.path.exists(path):                   # mkstemp 建的是 0600，沿用旧文件的权限
                os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
            view = memoryview(data)
            while view:                                # write 可能只写进一部分（短计数）
                view = view[os.write(fd, view):]
            os.fsync(fd)                               # 2. 数据与 inode 落盘，之后才能让名字指向它
        finally:
            os.close(fd)
        os.replace(tmp, path)                          # 3. rename(2)：原子地把名字换到新 inode 上
    except BaseException:
        try:
            os.unlink(tmp)                             # 失败时不留下临时文件，旧文件原封不动
        except FileNotFoundError:
            pass
        raise
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)                                  # 4. 目录项的修改（rename）落盘：否则崩溃后可能还是旧文件
    finally:
        os.close(dfd)
# --8<-- [end:replace]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as d:
        target = os.path.join(d, "model.bin")
        atomic_replace(target, b"v1")
        atomic_replace(target, b"v2" * 1000)
        with open(target, "rb") as f:
            assert f.read() == b"v2" * 1000
        assert os.listdir(d) == ["model.bin"]
        print("ok")
