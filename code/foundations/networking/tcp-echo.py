"""TCP：单线程 + I/O 多路复用的回显服务器，和带长度前缀分帧的客户端。全部在 127.0.0.1 上，端口由内核分配。"""
from __future__ import annotations

import selectors
import socket
import struct
import threading

HEADER = struct.Struct("!I")  # 4 字节、网络字节序（大端）的长度前缀


# --8<-- [start:framing]
def recv_exact(sock: socket.socket, n: int) -> bytes:
    """TCP 是字节流：一次 recv 可能只拿到一部分，必须循环到凑满 n 字节。"""
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:  # 对端关闭了连接（读到 EOF）
            raise ConnectionError(f"peer closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def send_msg(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(HEADER.pack(len(payload)) + payload)  # sendall 内部循环，直到全部交给内核


def recv_msg(sock: socket.socket) -> bytes:
    (n,) = HEADER.unpack(recv_exact(sock, HEADER.size))
    return recv_exact(sock, n)
# --8<-- [end:framing]


# --8<-- [start:server]
class EchoServer:
    """一个线程、一个 selector（Linux 上是 epoll），同时服务任意多个连接。"""

    def __init__(self, host: str = "127.0.0.1"):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host, 0))      # 端口 0：由内核挑一个空闲端口
        self.listener.listen(128)          # backlog：已完成握手、等待 accept 的连接队列长度上限
        self.listener.setblocking(False)
        self.address = self.listener.getsockname()
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, data=None)
        self._stop = threading.Event()
        self.accepted = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for key, events in self.sel.select(timeout=0.05):  # 有界等待，便于退出
                if key.data is None:
                    self._accept()
                else:
                    self._service(key, events)
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()

    def _accept(self) -> None:
        conn, _ = self.listener.accept()  # 就绪通知之后才调用，不会阻塞
        conn.setblocking(False)
        self.accepted += 1
        self.sel.register(conn, selectors.EVENT_READ, data=bytearray())  # data：待发送的字节

    def _service(self, key: selectors.SelectorKey, events: int) -> None:
        conn, pending = key.fileobj, key.data
        if events & selectors.EVENT_READ:
            try:
                chunk = conn.recv(65536)
            except (BlockingIOError, InterruptedError):
                chunk = None
            except ConnectionError:
                chunk = b""
            if chunk == b"":  # 对端关闭
                self.sel.unregister(conn)
                conn.close()
                return
            if chunk:
                pending += chunk
        if pending:
            try:
                sent = conn.send(pending)  # 非阻塞：内核发送缓冲区满时只发出一部分
                del pending[:sent]
            except (BlockingIOError, InterruptedError):
                pass
        # 还有没发完的数据就同时关心“可写”事件，否则只关心“可读”，避免空转
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if pending else 0)
        if key.events != want:
            self.sel.modify(conn, want, data=pending)

    def __enter__(self) -> "EchoServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
# --8<-- [end:server]


# --8<-- [start:client]
def client(address, messages: list[bytes], timeout: float = 5.0) -> list[bytes]:
    with socket.create_connection(address, timeout=timeout) as c:  # socket + connect（三次握手）
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # 关闭 Nagle：小消息立刻发出
        replies = []
        for m in messages:
            send_msg(c, m)
            replies.append(recv_msg(c))  # 服务器只是原样回显字节，分帧完全由两端的应用负责
        return replies
# --8<-- [end:client]


def concurrent_clients(n_clients: int = 8, rounds: int = 20) -> tuple[bool, int]:
    """n_clients 个客户端线程同时连接一个单线程服务器；返回（全部回显正确？，服务器接受的连接数）。"""
    ok = []
    with EchoServer() as srv:
        def one(i: int) -> None:
            msgs = [f"client {i} round {r}".encode() * (r + 1) for r in range(rounds)]
            ok.append(client(srv.address, msgs) == msgs)
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n_clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        accepted = srv.accepted
    return len(ok) == n_clients and all(ok), accepted


if __name__ == "__main__":
    with EchoServer() as srv:
        big = bytes(range(256)) * 4096  # 1 MiB：会被拆成许多 TCP 段，也远超一次 recv 的量
        assert client(srv.address, [b"hello", big, b""]) == [b"hello", big, b""]
    assert concurrent_clients() == (True, 8)
    print("ok")
