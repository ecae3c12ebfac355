"""网络层的几个可以精确计算的机制：IPv4 首部与校验和、最长前缀匹配、NAPT 映射表、分片数。

tests/test_networking_layers.py 用标准库 ipaddress、已知的首部样例与穷举对照断言这些函数。
"""
from __future__ import annotations

import ipaddress
import math
import struct
from dataclasses import dataclass, field


# --8<-- [start:checksum]
def internet_checksum(data: bytes) -> int:
    """RFC 1071：按 16 位字做反码求和（进位回卷），再取反。"""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:                       # 把高 16 位的进位加回低 16 位
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4_header(src: str, dst: str, payload_len: int, proto: int = 17, ttl: int = 64, ident: int = 0) -> bytes:
    """20 字节、无选项的 IPv4 首部（RFC 791 图 4），DF 置位，校验和按 RFC 1071 填好。"""
    ver_ihl = (4 << 4) | 5                   # 版本 4，首部长度 5 个 32 位字
    flags_frag = 0x4000                      # DF = 1，片偏移 0
    hdr = struct.pack("!BBHHHBBH4s4s", ver_ihl, 0, 20 + payload_len, ident, flags_frag, ttl, proto, 0,
                      ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    return hdr[:10] + struct.pack("!H", internet_checksum(hdr)) + hdr[12:]


def decrement_ttl(hdr: bytes) -> bytes:
    """路由器转发时 TTL 减一，并重算校验和（每一跳都要做，所以 IPv6 干脆取消了首部校验和）。"""
    ttl = hdr[8] - 1
    if ttl <= 0:
        raise ValueError("TTL exceeded: drop and send ICMP Time Exceeded")
    new = hdr[:8] + bytes([ttl]) + hdr[9:10] + b"\0\0" + hdr[12:]
    return new[:10] + struct.pack("!H", internet_checksum(new)) + new[12:]
# --8<-- [end:checksum]


# --8<-- [start:lpm]
class PrefixTrie:
    """二叉前缀树上的最长前缀匹配：沿目的地址的位往下走，记住最后一个带路由的节点。"""

    def __init__(self):
        self.root: dict = {}

    def insert(self, prefix: str, next_hop: str) -> None:
        net = ipaddress.IPv4Network(prefix)
        bits = format(int(net.network_address), "032b")[: net.prefixlen]
        node = self.root
        for b in bits:
            node = node.setdefault(b, {})
        node["hop"] = next_hop

    def lookup(self, addr: str) -> str | None:
        bits = format(int(ipaddress.IPv4Address(addr)), "032b")
        node, best = self.root, self.root.get("hop")
        for b in bits:
            if b not in node:
                break
            node = node[b]
            best = node.get("hop", best)
        return best
# --8<-- [end:lpm]


# --8<-- [start:nat]
@dataclass
class Napt:
    """NAPT（RFC 3022 的端口转换）：内网 (IP, 端口) ↔ 公网 IP 上的一个端口。"""
    public_ip: str
    next_port: int = 40000
    out: dict = field(default_factory=dict)     # (内网 IP, 内网端口, 协议) → 公网端口
    back: dict = field(default_factory=dict)    # (公网端口, 协议) → (内网 IP, 内网端口)

    def outbound(self, src_ip: str, src_port: int, proto: str = "tcp") -> tuple[str, int]:
        key = (src_ip, src_port, proto)
        if key not in self.out:                 # 第一个出向包建立映射
            self.out[key] = self.next_port
            self.back[(self.next_port, proto)] = (src_ip, src_port)
            self.next_port += 1
        return self.public_ip, self.out[key]

    def inbound(self, dst_port: int, proto: str = "tcp") -> tuple[str, int] | None:
        return self.back.get((dst_port, proto))  # 没有映射的入向包被丢弃：外部无法主动连进来
# --8<-- [end:nat]


# --8<-- [start:fragments]
def fragment_count(datagram_len: int, mtu: int, ihl: int = 20) -> int:
    """IPv4 分片数：每片载荷是 8 字节的整数倍（片偏移以 8 字节为单位），最后一片除外。"""
    if datagram_len <= mtu:
        return 1                             # 放得下就不分片
    per_fragment = (mtu - ihl) // 8 * 8
    return math.ceil((datagram_len - ihl) / per_fragment)
# --8<-- [end:fragments]
