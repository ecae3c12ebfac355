"""应用层的三个机制：DNS 报文（含名字压缩）与一个本机 DNS 服务器、HPACK 的整数编码、HTTP/1.1 的持久连接。

全部只用 127.0.0.1，不访问外部网络。tests/test_networking_layers.py 对照 RFC 的样例与计数断言它们。
"""
from __future__ import annotations

import http.client
import http.server
import ipaddress
import socket
import struct
import threading


# --8<-- [start:dns]
def encode_name(name: str) -> bytes:
    """RFC 1035 §3.1：每个标签前放一个长度字节，以长度 0 结尾。"""
    out = b""
    for label in name.rstrip(".").split("."):
        raw = label.encode("ascii")
        assert 0 < len(raw) < 64, "a label has 1 to 63 bytes"
        out += bytes([len(raw)]) + raw
    return out + b"\0"


def build_query(qid: int, name: str, qtype: int = 1) -> bytes:
    """首部 12 字节：ID、标志（RD=1，请求递归）、各段计数；问题段：名字、类型（A=1）、类（IN=1）。"""
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + encode_name(name) + struct.pack("!HH", qtype, 1)


def read_name(msg: bytes, off: int) -> tuple[str, int]:
    """读一个可能被压缩的名字：高两位为 11 的字节与下一字节组成指向报文内偏移的指针（§4.1.4）。"""
    labels, end, hops = [], None, 0
    while True:
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if end is None:
                end = off + 2                    # 名字在原位置只占两个字节
            off = ((n & 0x3F) << 8) | msg[off + 1]
            hops += 1
            assert hops < 64, "pointer loop"
            continue
        if n == 0:
            return ".".join(labels), (end if end is not None else off + 1)
        labels.append(msg[off + 1: off + 1 + n].decode("ascii"))
        off += 1 + n


def build_response(query: bytes, records: dict[str, str], ttl: int = 300) -> bytes:
    qid, _flags = struct.unpack("!HH", query[:4])
    name, off = read_name(query, 12)
    question = query[12: off + 4]
    addr = records.get(name)
    if addr is None:                             # NXDOMAIN：RCODE = 3
        return struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question
    answer = (struct.pack("!H", 0xC00C)          # 指针：名字就在偏移 12 的问题段里
              + struct.pack("!HHIH", 1, 1, ttl, 4) + ipaddress.IPv4Address(addr).packed)
    return struct.pack("!HHHHHH", qid, 0x8180, 1, 1, 0, 0) + question + answer  # QR=1, RD=1, RA=1


def parse_response(msg: bytes) -> dict:
    qid, flags, qd, an, _ns, _ar = struct.unpack("!HHHHHH", msg[:12])
    off = 12
    for _ in range(qd):
        _, off = read_name(msg, off)
        off += 4
    answers = []
    for _ in range(an):
        name, off = read_name(msg, off)
        rtype, _cls, ttl, rdlen = struct.unpack("!HHIH", msg[off: off + 10])
        off += 10
        if rtype == 1:
            answers.append((name, str(ipaddress.IPv4Address(msg[off: off + rdlen])), ttl))
        off += rdlen
    return {"id": qid, "rcode": flags & 0xF, "answers": answers}


def serve_dns(records: dict[str, str]):
    """一个只会回答 A 记录的本机 DNS 服务器（UDP，端口由系统分配）。返回 (地址, stop)：stop() 让它退出。"""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    stopping = threading.Event()

    def loop():
        while True:
            query, peer = sock.recvfrom(512)       # 经典 DNS over UDP 的报文上限 512 字节
            if stopping.is_set():
                return
            sock.sendto(build_response(query, records), peer)

    t = threading.Thread(target=loop, daemon=True)
    t.start()

    def stop():
        stopping.set()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"", sock.getsockname())      # 唤醒阻塞在 recvfrom 上的线程（关闭套接字并不会唤醒它）
        t.join(timeout=5)
        sock.close()
        assert not t.is_alive()

    return sock.getsockname(), stop


def resolve(server: tuple[str, int], name: str, qid: int = 0x1234, timeout: float = 2.0) -> dict:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(build_query(qid, name), server)
        reply, _ = s.recvfrom(512)
    out = parse_response(reply)
    assert out["id"] == qid, "a reply must echo the query's ID"
    return out
# --8<-- [end:dns]


# --8<-- [start:hpack]
def hpack_int(value: int, prefix_bits: int) -> bytes:
    """RFC 7541 §5.1：值小于 2^N - 1 时放进 N 位前缀；否则前缀全 1，余数按 7 位一组、低位在前，最高位作续位。"""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out, value = [limit], value - limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out + [value])


def hpack_int_decode(data: bytes, prefix_bits: int) -> int:
    limit = (1 << prefix_bits) - 1
    value = data[0] & limit
    if value < limit:
        return value
    shift = 0
    for b in data[1:]:
        value += (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    return value
# --8<-- [end:hpack]


# --8<-- [start:keepalive]
class CountingServer(http.server.ThreadingHTTPServer):
    """记录接受了几条 TCP 连接，用来证明 HTTP/1.1 在一条连接上连续发多个请求。"""
    daemon_threads = True

    def __init__(self):
        self.connections = 0
        super().__init__(("127.0.0.1", 0), Handler)

    def get_request(self):
        self.connections += 1
        return super().get_request()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"           # 默认 HTTP/1.0：每个响应后关闭连接

    def do_GET(self):
        body = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))  # 有长度，客户端才知道响应在哪结束、连接可复用
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def requests_over(paths: list[str], keep_alive: bool) -> tuple[list[bytes], int]:
    server = CountingServer()
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        bodies = []
        conn = None
        for p in paths:
            if conn is None or not keep_alive:
                if conn is not None:
                    conn.close()
                conn = http.client.HTTPConnection(*server.server_address, timeout=5)
            conn.request("GET", p)
            bodies.append(conn.getresponse().read())
        conn.close()
        return bodies, server.connections
    finally:
        server.shutdown()
        server.server_close()
        t.join(timeout=5)
# --8<-- [end:keepalive]
