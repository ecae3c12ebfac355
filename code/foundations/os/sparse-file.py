"""ls -l 与 du 为什么会不一样：前者报告文件的逻辑大小 st_size，后者报告实际分配的块 st_blocks × 512。"""
from __future__ import annotations

import os
import shutil
import subprocess


# --8<-- [start:sparse]
def make_sparse(path: str, logical: int = 64 << 20) -> os.stat_result:
    with open(path, "wb") as f:
        f.seek(logical - 1)  # 跳过 64 MiB 不写，只在末尾写 1 字节：中间是“空洞”（hole）
        f.write(b"\0")
    return os.stat(path)


def sizes(path: str) -> dict:
    st = os.stat(path)
    return {
        "ls_l_bytes": st.st_size,               # ls -l、stat -c %s 显示的逻辑大小
        "du_bytes": st.st_blocks * 512,         # du 统计的占用：st_blocks 的单位固定是 512 字节
        "fs_free_bytes": shutil.disk_usage(os.path.dirname(path) or ".").free,  # df 的 Avail 列
    }
# --8<-- [end:sparse]


def du_kib(path: str) -> int | None:
    """调用真正的 du（如果有），用来对照 st_blocks 的换算。"""
    if shutil.which("du") is None:
        return None
    out = subprocess.run(["du", "-k", path], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "sparse.bin")
        make_sparse(p)
        s = sizes(p)
        print(s, "du -k:", du_kib(p))
        assert s["ls_l_bytes"] == 64 << 20
        assert s["du_bytes"] < s["ls_l_bytes"]  # 支持稀疏文件的文件系统（ext4、xfs、tmpfs 等）
