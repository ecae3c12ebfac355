"""The listings of docs/foundations/networking/ip-layer.md and application-layer.md behave as the pages say.

References: the standard library's ipaddress module, brute force over every prefix, the worked examples of
RFC 7541 (Appendix C.1) and a well-known IPv4 header, and counts of TCP connections on 127.0.0.1.
"""
from __future__ import annotations

import ipaddress
import random

import pytest

from conftest import ROOT, load_listing

CODE = ROOT / "code" / "foundations" / "networking"


def load(name: str):
    return load_listing(CODE / f"{name}.py", "netlayers_" + name.replace("-", "_"))


ip = load("ip-layer")
app = load("app-layer")


def test_checksum_known_header_and_self_check():
    # A frequently quoted example header (192.168.0.1 -> 192.168.0.199, UDP, TTL 64): checksum 0xb861.
    hdr = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert ip.internet_checksum(hdr) == 0xB861
    built = ip.ipv4_header("192.168.0.1", "192.168.0.199", 0x73 - 20)
    assert built.hex() == "45000073000040004011b861c0a80001c0a800c7"
    assert ip.internet_checksum(built) == 0  # a header with its checksum sums to all ones
    hop = ip.decrement_ttl(built)
    assert hop[8] == 63 and ip.internet_checksum(hop) == 0
    with pytest.raises(ValueError):
        ip.decrement_ttl(built[:8] + b"\x01" + built[9:])


def test_longest_prefix_match_against_brute_force():
    rng = random.Random(0)
    routes = {"0.0.0.0/0": "default"}
    for i in range(300):
        plen = rng.choice([8, 12, 16, 20, 24, 28, 32])
        net = ipaddress.IPv4Network((rng.getrandbits(32), plen), strict=False)
        routes[str(net)] = f"hop{i}"
    trie = ip.PrefixTrie()
    for p, h in routes.items():
        trie.insert(p, h)
    nets = [(ipaddress.IPv4Network(p), h) for p, h in routes.items()]
    probes = [str(ipaddress.IPv4Address(rng.getrandbits(32))) for _ in range(500)]
    probes += [str(n.network_address + 1) for n, _ in nets[:200] if n.num_addresses > 2]
    for a in probes:
        addr = ipaddress.IPv4Address(a)
        best = max((n for n, _ in nets if addr in n), key=lambda n: n.prefixlen)
        assert trie.lookup(a) == routes[str(best)]


def test_napt_mapping():
    nat = ip.Napt("203.0.113.7")
    a = nat.outbound("10.0.0.2", 5555)
    b = nat.outbound("10.0.0.3", 5555)       # same private port, another host: another public port
    assert a != b and a[0] == b[0] == "203.0.113.7"
    assert nat.outbound("10.0.0.2", 5555) == a  # the mapping is reused
    assert nat.inbound(a[1]) == ("10.0.0.2", 5555) and nat.inbound(b[1]) == ("10.0.0.3", 5555)
    assert nat.inbound(a[1], "udp") is None and nat.inbound(12345) is None  # unsolicited: dropped


def test_fragment_count():
    assert ip.fragment_count(4000, 1500) == 3        # 3980 bytes of payload, 1480 per fragment
    assert ip.fragment_count(1500, 1500) == 1
    assert ip.fragment_count(65535, 1500) == 45
    assert ip.fragment_count(9000, 9000) == 1        # a jumbo frame carries it whole


def test_dns_encoding_and_compression():
    q = app.build_query(0xBEEF, "gpu-node-3.cluster.local")
    assert q[:2] == b"\xbe\xef" and q[12:13] == b"\x0a" and q.endswith(b"\x00\x01\x00\x01")
    r = app.build_response(q, {"gpu-node-3.cluster.local": "10.1.2.3"})
    out = app.parse_response(r)
    assert out == {"id": 0xBEEF, "rcode": 0, "answers": [("gpu-node-3.cluster.local", "10.1.2.3", 300)]}
    assert len(r) == len(q) + 2 + 10 + 4       # the answer's name is a 2-byte pointer to offset 12
    miss = app.parse_response(app.build_response(app.build_query(1, "nope.local"), {}))
    assert miss["rcode"] == 3 and miss["answers"] == []


def test_dns_over_udp_on_localhost():
    server, stop = app.serve_dns({"trainer-0.local": "10.0.0.10", "trainer-1.local": "10.0.0.11"})
    try:
        assert app.resolve(server, "trainer-1.local")["answers"][0][1] == "10.0.0.11"
        assert app.resolve(server, "missing.local", qid=7)["rcode"] == 3
    finally:
        stop()


def test_hpack_integers_rfc7541_examples():
    assert app.hpack_int(10, 5) == bytes([0b01010])                     # C.1.1
    assert app.hpack_int(1337, 5) == bytes([0b11111, 0b10011010, 0b00001010])  # C.1.2
    assert app.hpack_int(42, 8) == bytes([42])                          # C.1.3
    for n in (5, 6, 7, 8):
        for v in (0, 1, 30, 31, 127, 128, 255, 1337, 2**20, 2**31 - 1):
            assert app.hpack_int_decode(app.hpack_int(v, n), n) == v


def test_http11_keep_alive_reuses_one_connection():
    paths = ["/a", "/b", "/c"]
    bodies, conns = app.requests_over(paths, keep_alive=True)
    assert bodies == [b"/a", b"/b", b"/c"] and conns == 1
    bodies, conns = app.requests_over(paths, keep_alive=False)
    assert bodies == [b"/a", b"/b", b"/c"] and conns == 3
