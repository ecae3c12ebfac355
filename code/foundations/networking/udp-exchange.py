"""UDP：无连接、保留消息边界、不保证送达。在 127.0.0.1 上一问一答，端口由内核分配，每次接收都有超时。"""
from __future__ import annotations

import errno
import socket
import threading

MAX_UDP_PAYLOAD_IPV4 = 65535 - 20 - 8  # IPv4 总长度字段上限减去 IP 首部与 UDP 首部 = 65507


# --8<-- [start:udp]
def echo_server(sock: socket.socket, count: int) -> None:
    for _ in range(count):
        data, peer = sock.recvfrom(65535)  # 一次 recvfrom 恰好取走一个数据报
        sock.sendto(data.upper(), peer)


def exchange(messages: list[bytes], timeout: float = 2.0) -> list[bytes]:
    srv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    srv.bind(("127.0.0.1", 0))
    srv.settimeout(timeout)
    t = threading.Thread(target=echo_server, args=(srv, len(messages)), daemon=True)
    t.start()
    replies = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as cli:  # 没有 connect、没有握手
        cli.settimeout(timeout)  # UDP 丢了就是丢了：没有超时，recv 可能永远等下去
        for m in messages:
            cli.sendto(m, srv.getsockname())
            data, _ = cli.recvfrom(65535)
            replies.append(data)
    t.join(timeout)
    srv.close()
    return replies
# --8<-- [end:udp]


def truncation_demo() -> tuple[int, bytes]:
    """接收缓冲给小了：数据报被截断，多出的部分直接丢弃，下一次 recv 拿到的是下一个数据报。"""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
        b.bind(("127.0.0.1", 0))
        b.settimeout(2.0)
        a.sendto(b"x" * 100, b.getsockname())
        a.sendto(b"next", b.getsockname())
        first = b.recv(10)
        second = b.recv(100)
    return len(first), second


def too_big_errno() -> int | None:
    """超过 65507 字节的载荷放不进一个 IPv4 数据报，sendto 直接失败（EMSGSIZE）。"""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
        b.bind(("127.0.0.1", 0))
        a.sendto(b"x" * MAX_UDP_PAYLOAD_IPV4, b.getsockname())  # 恰好放得下
        try:
            a.sendto(b"x" * (MAX_UDP_PAYLOAD_IPV4 + 1), b.getsockname())
        except OSError as e:
            return e.errno
    return None


if __name__ == "__main__":
    msgs = [b"a", b"bb" * 10, b"", b"c" * 60000]
    assert exchange(msgs) == [m.upper() for m in msgs]  # 每条消息原样成为一个数据报，边界保留
    assert truncation_demo() == (10, b"next")
    assert too_big_errno() == errno.EMSGSIZE
    print("ok")
