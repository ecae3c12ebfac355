"""inode、硬链接与符号链接：名字只是目录里指向 inode 的一项，数据要等最后一个名字和最后一个打开的描述符都消失才释放。"""
from __future__ import annotations

import os


# --8<-- [start:links]
def link_demo(d: str) -> dict:
    a, b, s = (os.path.join(d, n) for n in ("a.bin", "b.bin", "s.bin"))
    with open(a, "wb") as f:
        f.write(b"weights")
    os.link(a, b)                       # 硬链接：目录里多一项，指向同一个 inode，链接计数 +1
    os.symlink("a.bin", s)              # 符号链接：一个新 inode，内容是路径字符串 "a.bin"
    st_a, st_b, st_s = os.stat(a), os.stat(b), os.lstat(s)
    out = {
        "same_inode": st_a.st_ino == st_b.st_ino,
        "nlink_after_link": st_a.st_nlink,
        "symlink_own_inode": st_s.st_ino != st_a.st_ino,
        "symlink_size": st_s.st_size,                   # 路径字符串的长度
        "symlink_target": os.readlink(s),
        "readdir": sorted((e.name, e.inode()) for e in os.scandir(d)),  # 目录项就是 (名字, inode 号)
    }
    fd = os.open(a, os.O_RDONLY)
    os.unlink(a)                        # 删掉一个名字：inode 还在，b.bin 照样能读
    with open(b, "rb") as f:
        out["read_via_hard_link"] = f.read()
    out["nlink_after_unlink"] = os.stat(b).st_nlink
    out["symlink_dangling"] = os.path.lexists(s) and not os.path.exists(s)  # 符号链接按名字找，名字没了就悬空
    os.unlink(b)                        # 最后一个名字也没了：链接计数为 0，但描述符还开着
    out["nlink_while_open"] = os.fstat(fd).st_nlink
    out["read_after_all_names_gone"] = os.pread(fd, 7, 0)  # 数据要等 close 之后才释放（df 与 du 不一致的原因）
    os.close(fd)
    return out
# --8<-- [end:links]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for k, v in link_demo(d).items():
            print(k, v)
