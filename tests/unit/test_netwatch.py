"""Unit tests of tests/harness/netwatch.py's pure functions (no socket, no Docker, no root).

Frames are built by hand (Ethernet + IPv4/IPv6 + TCP/UDP/ICMP, DNS queries) so the parser is checked
against byte layouts, not against itself.
"""
import importlib.util
import ipaddress
import json
import os
import struct
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "harness" / "netwatch.py"

HOST = "172.18.0.2"
PEER = "172.18.0.3"
GATEWAY = "172.18.0.1"
SUBNETS = ["172.18.0.0/16"]
WATCHED = [HOST]


@pytest.fixture(scope="module", name="nw")
def fixture_nw():
    """The tool, imported as a module."""
    spec = importlib.util.spec_from_file_location("netwatch", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["netwatch"] = module
    spec.loader.exec_module(module)
    return module


# --------------------------------------------------------------------------- frame builders


def eth(ethertype, payload, vlan=None):
    header = b"\x02\x42\xac\x12\x00\x01" + b"\x02\x42\xac\x12\x00\x02"
    if vlan is not None:
        header += struct.pack("!HH", 0x8100, vlan)
    return header + struct.pack("!H", ethertype) + payload


def ipv4(src, dst, proto, payload, frag=0, options=b""):
    ihl = 5 + len(options) // 4
    total = ihl * 4 + len(payload)
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, total, 1, frag, 64, proto, 0,
                         ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    return header + options + payload


def ipv6(src, dst, next_header, payload):
    return (struct.pack("!IHBB", 6 << 28, len(payload), next_header, 64)
            + ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed + payload)


def tcp(sport, dport, flags, payload=b""):
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, flags, 64240, 0, 0) + payload


def udp(sport, dport, payload=b""):
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def dns_query(name, qtype=1, response=False, ident=0x1234):
    flags = 0x8180 if response else 0x0100
    question = b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\x00"
    return struct.pack("!HHHHHH", ident, flags, 1, 0, 0, 0) + question + struct.pack("!HH", qtype, 1)


SYN, ACK, PSH, FIN, RST = 0x02, 0x10, 0x08, 0x01, 0x04


def v4_tcp(src, dst, sport, dport, flags):
    return eth(0x0800, ipv4(src, dst, 6, tcp(sport, dport, flags)))


# --------------------------------------------------------------------------- parse_frame


def test_ipv4_tcp_syn(nw):
    packet = nw.parse_frame(v4_tcp(HOST, "1.1.1.1", 54300, 80, SYN))
    assert packet["family"] == "ipv4"
    assert (packet["src"], packet["dst"]) == (HOST, "1.1.1.1")
    assert (packet["proto"], packet["sport"], packet["dport"], packet["flags"]) == ("tcp", 54300, 80, "S")
    assert packet["dns_query"] is None and packet["fragment"] is False
    assert packet["len"] == 40


@pytest.mark.parametrize("bits, letters", [(SYN, "S"), (SYN | ACK, "SA"), (PSH | ACK, "PA"),
                                           (FIN | ACK, "FA"), (RST, "R"), (0, "")])
def test_tcp_flags(nw, bits, letters):
    assert nw.tcp_flags(bits) == letters


def test_ipv4_udp_dns_query(nw):
    frame = eth(0x0800, ipv4(HOST, GATEWAY, 17, udp(40989, 53, dns_query("deb.debian.org", qtype=28))))
    packet = nw.parse_frame(frame)
    assert (packet["proto"], packet["sport"], packet["dport"]) == ("udp", 40989, 53)
    assert (packet["dns_query"], packet["dns_qtype"]) == ("deb.debian.org", "AAAA")
    assert packet["flags"] is None


def test_dns_response_and_other_ports_are_not_queries(nw):
    response = eth(0x0800, ipv4(HOST, GATEWAY, 17, udp(40989, 53, dns_query("x.org", response=True))))
    assert nw.parse_frame(response)["dns_query"] is None
    other_port = eth(0x0800, ipv4(HOST, GATEWAY, 17, udp(40989, 5353, dns_query("x.local"))))
    assert nw.parse_frame(other_port)["dns_query"] is None
    garbage = eth(0x0800, ipv4(HOST, GATEWAY, 17, udp(40989, 53, b"\x00\x01\x01")))
    assert nw.parse_frame(garbage)["dns_query"] is None


def test_dns_over_tcp(nw):
    message = dns_query("pypi.org")
    frame = eth(0x0800, ipv4(HOST, GATEWAY, 6, tcp(41000, 53, PSH | ACK, struct.pack("!H", len(message)) + message)))
    packet = nw.parse_frame(frame)
    assert (packet["proto"], packet["flags"], packet["dns_query"], packet["dns_qtype"]) == ("tcp", "PA", "pypi.org", "A")


def test_dns_name_compression_and_loops(nw):
    # question name "a.example.org" written as "a" + pointer to "example.org" placed after the header
    header = struct.pack("!HHHHHH", 1, 0x0100, 1, 0, 0, 0)
    target = b"\x07example\x03org\x00"  # at offset 12
    question = b"\x01a\xc0\x0c" + struct.pack("!HH", 1, 1)
    # a made-up layout (real queries have no pointers), but the decoder must follow pointers
    message = header + target + question
    name, end = nw._dns_name(message, 12 + len(target))  # pylint: disable=protected-access
    assert name == "a.example.org" and end == 12 + len(target) + 4
    loop = header + b"\xc0\x0c" + struct.pack("!HH", 1, 1)
    assert nw.parse_dns_query(loop) is None


def test_vlan_tagged_frame(nw):
    frame = eth(0x0800, ipv4(HOST, PEER, 17, udp(1, 2)), vlan=10)
    assert nw.parse_frame(frame)["dst"] == PEER


def test_ethernet_padding_is_ignored(nw):
    message = dns_query("a.io")
    frame = eth(0x0800, ipv4(HOST, GATEWAY, 17, udp(1000, 53, message))) + b"\x00" * 20
    assert nw.parse_frame(frame)["dns_query"] == "a.io"


def test_ipv4_fragments(nw):
    first = nw.parse_frame(eth(0x0800, ipv4(HOST, "8.8.8.8", 17, udp(1000, 53, dns_query("a.io")), frag=0x2000)))
    assert first["fragment"] is True and first["dport"] == 53
    later = nw.parse_frame(eth(0x0800, ipv4(HOST, "8.8.8.8", 17, b"\x00" * 16, frag=0x0010)))
    assert later["fragment"] is True and later["proto"] == "udp" and later["dport"] is None


def test_ipv4_options(nw):
    packet = nw.parse_frame(eth(0x0800, ipv4(HOST, PEER, 6, tcp(1, 2, SYN), options=b"\x01\x01\x01\x00")))
    assert (packet["sport"], packet["dport"], packet["flags"]) == (1, 2, "S")


def test_ipv4_icmp_and_other(nw):
    icmp = nw.parse_frame(eth(0x0800, ipv4(HOST, "9.9.9.9", 1, b"\x08\x00\x00\x00\x00\x01\x00\x01")))
    assert (icmp["proto"], icmp["icmp_type"], icmp["icmp_code"], icmp["sport"]) == ("icmp", 8, 0, None)
    gre = nw.parse_frame(eth(0x0800, ipv4(HOST, "9.9.9.9", 47, b"\x00" * 8)))
    assert (gre["proto"], gre["ipproto"]) == ("other", 47)


def test_ipv6_udp_after_hop_by_hop(nw):
    hop_by_hop = bytes([17, 0]) + b"\x01\x04\x00\x00\x00\x00"  # next=UDP, len 0 (8 bytes), PadN
    frame = eth(0x86DD, ipv6("fd00::2", "2001:db8::1", 0, hop_by_hop + udp(5000, 53, dns_query("ghcr.io", 28))))
    packet = nw.parse_frame(frame)
    assert (packet["family"], packet["src"], packet["dst"]) == ("ipv6", "fd00::2", "2001:db8::1")
    assert (packet["proto"], packet["dport"], packet["dns_query"]) == ("udp", 53, "ghcr.io")


def test_ipv6_tcp_and_icmpv6(nw):
    syn = nw.parse_frame(eth(0x86DD, ipv6("fd00::2", "2606:4700::1111", 6, tcp(40000, 443, SYN))))
    assert (syn["proto"], syn["dport"], syn["flags"]) == ("tcp", 443, "S")
    rs = nw.parse_frame(eth(0x86DD, ipv6("fe80::1", "ff02::2", 58, b"\x85\x00\x00\x00\x00\x00\x00\x00")))
    assert (rs["family"], rs["proto"], rs["icmp_type"], rs["ipproto"]) == ("ipv6", "icmp", 133, 58)


def test_ipv6_non_first_fragment(nw):
    fragment = bytes([6, 0]) + struct.pack("!HI", 100 << 3, 7)
    packet = nw.parse_frame(eth(0x86DD, ipv6("fd00::2", "2001:db8::1", 44, fragment + b"\x00" * 16)))
    assert packet["fragment"] is True and packet["proto"] == "tcp" and packet["sport"] is None


@pytest.mark.parametrize("frame", [
    b"",
    b"\x00" * 13,
    eth(0x0806, b"\x00\x01\x08\x00\x06\x04\x00\x01" + b"\x00" * 20),  # ARP
    eth(0x0800, b"\x45\x00"),  # truncated IPv4
    eth(0x0800, b"\x65" + b"\x00" * 19),  # version 6 in an IPv4 frame
    eth(0x86DD, b"\x60" + b"\x00" * 10),  # truncated IPv6
])
def test_not_ip_or_broken_is_none(nw, frame):
    assert nw.parse_frame(frame) is None


# --------------------------------------------------------------------------- classify


def verdict(nw, frame, conntrack=None, watched=None, gateway=GATEWAY, subnets=None):
    return nw.classify(nw.parse_frame(frame), subnets or SUBNETS, gateway, watched or WATCHED,
                       set() if conntrack is None else conntrack)


def test_outside_destination_leaves(nw):
    assert verdict(nw, v4_tcp(HOST, "1.1.1.1", 54300, 80, SYN)) == "leave"
    assert verdict(nw, v4_tcp(HOST, "1.1.1.1", 54300, 80, ACK)) == "leave"  # no SYN seen from there
    assert verdict(nw, eth(0x0800, ipv4(HOST, "169.254.169.254", 6, tcp(1, 80, SYN)))) == "leave"


def test_gateway_counts_as_outside(nw):
    assert verdict(nw, v4_tcp(HOST, GATEWAY, 45806, 18080, SYN)) == "leave"
    dns = eth(0x0800, ipv4(HOST, GATEWAY, 17, udp(40000, 53, dns_query("deb.debian.org"))))
    assert verdict(nw, dns) == "leave"


def test_same_network_is_local(nw):
    assert verdict(nw, v4_tcp(HOST, PEER, 49868, 8000, SYN)) == "local"
    assert verdict(nw, eth(0x0800, ipv4(HOST, PEER, 17, udp(1, 9999)))) == "local"


@pytest.mark.parametrize("dst", ["172.18.255.255", "255.255.255.255", "224.0.0.251", "239.255.255.250"])
def test_ipv4_broadcast_multicast_is_noise(nw, dst):
    assert verdict(nw, eth(0x0800, ipv4(HOST, dst, 17, udp(5353, 5353)))) == "noise"


@pytest.mark.parametrize("dst", ["ff02::1", "ff02::fb", "fe80::1"])
def test_ipv6_link_local_multicast_is_noise(nw, dst):
    frame = eth(0x86DD, ipv6("fd00::2", dst, 17, udp(5353, 5353)))
    assert verdict(nw, frame, watched=["fd00::2"], subnets=["fd00::/64"]) == "noise"


def test_ipv6_outside_and_local(nw):
    watched, subnets, gateway = ["fd00::2"], [SUBNETS[0], "fd00::/64"], [GATEWAY, "fd00::1"]
    out = eth(0x86DD, ipv6("fd00::2", "2001:db8::1", 6, tcp(1, 443, SYN)))
    to_gateway = eth(0x86DD, ipv6("fd00::2", "fd00::1", 6, tcp(1, 443, SYN)))
    local = eth(0x86DD, ipv6("fd00::2", "fd00::3", 6, tcp(1, 443, SYN)))
    assert verdict(nw, out, watched=watched, subnets=subnets, gateway=gateway) == "leave"
    assert verdict(nw, to_gateway, watched=watched, subnets=subnets, gateway=gateway) == "leave"
    assert verdict(nw, local, watched=watched, subnets=subnets, gateway=gateway) == "local"


def test_unwatched_sources_are_not_of_interest(nw):
    assert verdict(nw, v4_tcp(PEER, "1.1.1.1", 1, 80, SYN)) is None
    assert verdict(nw, v4_tcp(GATEWAY, HOST, 1, 80, RST | ACK)) is None
    assert nw.classify(None, SUBNETS, GATEWAY, WATCHED, set()) is None


def test_replies_on_connections_the_other_side_opened(nw):
    conntrack = set()
    assert verdict(nw, v4_tcp(GATEWAY, HOST, 37968, 8001, SYN), conntrack) is None
    assert conntrack == {(GATEWAY, 37968, HOST, 8001)}
    for flags in (SYN | ACK, ACK, PSH | ACK, FIN | ACK, RST):
        assert verdict(nw, v4_tcp(HOST, GATEWAY, 8001, 37968, flags), conntrack) == "reply"
    # the same tuple, the other way round, or another port: not a reply
    assert verdict(nw, v4_tcp(HOST, GATEWAY, 8001, 37968, SYN), conntrack) == "leave"
    assert verdict(nw, v4_tcp(HOST, GATEWAY, 8001, 37969, ACK), conntrack) == "leave"
    assert verdict(nw, v4_tcp(HOST, GATEWAY, 8002, 37968, SYN | ACK), conntrack) == "leave"


def test_replies_to_a_local_peer_and_from_outside(nw):
    conntrack = set()
    verdict(nw, v4_tcp(PEER, HOST, 35486, 8001, SYN), conntrack)
    verdict(nw, v4_tcp("203.0.113.7", HOST, 50000, 22, SYN), conntrack)
    assert verdict(nw, v4_tcp(HOST, PEER, 8001, 35486, SYN | ACK), conntrack) == "reply"
    assert verdict(nw, v4_tcp(HOST, "203.0.113.7", 22, 50000, PSH | ACK), conntrack) == "reply"


def test_only_syns_to_watched_hosts_are_tracked(nw):
    conntrack = set()
    verdict(nw, v4_tcp(GATEWAY, PEER, 1000, 80, SYN), conntrack)  # to an unwatched host
    verdict(nw, v4_tcp(GATEWAY, HOST, 1001, 80, SYN | ACK), conntrack)  # not a connection opener
    verdict(nw, v4_tcp(HOST, PEER, 1002, 80, SYN), conntrack)  # opened by the watched host itself
    assert conntrack == set()


def test_udp_is_never_a_reply(nw):
    conntrack = {(GATEWAY, 53, HOST, 40000)}
    assert verdict(nw, eth(0x0800, ipv4(HOST, GATEWAY, 17, udp(40000, 53))), conntrack) == "leave"


def test_classify_accepts_prebuilt_sets(nw):
    packet = nw.parse_frame(v4_tcp(HOST, "1.1.1.1", 1, 80, SYN))
    subnets = tuple(ipaddress.ip_network(s) for s in SUBNETS)
    watched = frozenset({ipaddress.ip_address(HOST)})
    assert nw.classify(packet, subnets, frozenset({ipaddress.ip_address(GATEWAY)}), watched, set()) == "leave"
    assert nw.classify(packet, SUBNETS[0], None, HOST, set()) == "leave"


# --------------------------------------------------------------------------- log, report, inspect


def write_log(path, lines, torn=None):
    with open(path, "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line) + "\n")
        if torn:
            handle.write(torn)


STARTED = {"event": "started", "interface": "br-0123456789ab", "subnets": SUBNETS, "gateway": GATEWAY,
           "watch": WATCHED}
LEAVE_SYN = {"t": 1.0, "src": HOST, "dst": "1.1.1.1", "family": "ipv4", "proto": "tcp", "sport": 5, "dport": 80,
             "flags": "S", "dns_query": None, "verdict": "leave"}
LEAVE_DNS = {"t": 2.0, "src": HOST, "dst": GATEWAY, "family": "ipv4", "proto": "udp", "sport": 6, "dport": 53,
             "flags": None, "dns_query": "deb.debian.org", "dns_qtype": "A", "verdict": "leave"}
LOCAL = {"t": 3.0, "src": HOST, "dst": PEER, "proto": "tcp", "sport": 7, "dport": 8000, "flags": "S",
         "verdict": "local"}
STOPPED = {"event": "stopped", "packets": 3}


def test_read_log_skips_a_torn_last_line(nw, tmp_path):
    log = tmp_path / "net.log"
    write_log(log, [STARTED, LEAVE_SYN, LOCAL], torn='{"t": 4.0, "src": "172.')
    entries = nw.read_log(str(log))
    assert entries == [STARTED, LEAVE_SYN, LOCAL]
    assert nw.leaves(entries) == [LEAVE_SYN]


def test_summarize(nw):
    summary = nw.summarize([STARTED, LEAVE_SYN, LEAVE_DNS, LOCAL, STOPPED])
    assert summary["counts"] == {"leave": 2, "local": 1, "reply": 0, "noise": 0}
    assert summary["leaves"] == [LEAVE_SYN, LEAVE_DNS]
    assert summary["started"] == STARTED and summary["stopped"] == STOPPED


def test_report_exit_status_and_text(nw, tmp_path, capsys):
    log = tmp_path / "net.log"
    write_log(log, [STARTED, LEAVE_SYN, LEAVE_DNS, LOCAL, STOPPED])
    assert nw.main(["report", "--log", str(log)]) == 1
    out = capsys.readouterr().out
    assert "leave 2" in out and "local 1" in out
    assert "-> 1.1.1.1 ipv4 tcp/80 [S]" in out
    assert f"-> {GATEWAY} ipv4 udp/53 dns deb.debian.org A" in out
    assert "no stopped event" not in out
    write_log(log, [STARTED, LOCAL])
    assert nw.main(["report", "--log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "LEAVE (0): none" in out and "no stopped event" in out


def test_report_json(nw, tmp_path, capsys):
    log = tmp_path / "net.log"
    write_log(log, [STARTED, LEAVE_DNS, STOPPED])
    assert nw.main(["report", "--log", str(log), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["leave"] == 1
    assert report["leaves"][0]["dns_query"] == "deb.debian.org"
    assert report["started"]["interface"] == "br-0123456789ab"


def test_report_missing_log(nw, tmp_path, capsys):
    assert nw.main(["report", "--log", str(tmp_path / "absent.log")]) == 2
    assert "No such file" in capsys.readouterr().err


def test_network_info_from_inspect(nw):
    inspect = {"Id": "d6f7d90ec80205d951605b5683b881f5e417a51ed4bed3cfeb185482d2bb372f", "Internal": True,
               "Options": {}, "IPAM": {"Config": [{"Subnet": "172.19.0.0/16", "Gateway": "172.19.0.1"},
                                                  {"Subnet": "fd00:1::/64", "Gateway": "fd00:1::1"}]}}
    assert nw.network_info_from_inspect(inspect) == {
        "interface": "br-d6f7d90ec802", "subnets": ["172.19.0.0/16", "fd00:1::/64"],
        "gateways": ["172.19.0.1", "fd00:1::1"], "internal": True}
    named = {"Id": "52a73e62760e", "Options": {"com.docker.network.bridge.name": "docker0"},
             "IPAM": {"Config": [{"Subnet": "172.17.0.0/16"}]}}
    info = nw.network_info_from_inspect(named)
    assert (info["interface"], info["gateways"], info["internal"]) == ("docker0", [], False)


def test_capture_handle_writes_one_line_per_packet(nw, tmp_path):
    """The daemon's per-frame path, with a log fd and no socket."""
    log = tmp_path / "net.log"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    info = {"interface": "br-x", "subnets": SUBNETS, "gateways": [GATEWAY]}
    capture = nw.Capture(None, fd, info, WATCHED)
    nw.write_line(fd, capture.started_event())
    for frame in (v4_tcp(HOST, "1.1.1.1", 1, 80, SYN),
                  eth(0x0806, b"\x00" * 28),
                  v4_tcp(GATEWAY, HOST, 2, 8001, SYN),
                  v4_tcp(HOST, GATEWAY, 8001, 2, SYN | ACK),
                  v4_tcp(HOST, PEER, 3, 8000, SYN)):
        capture.handle(frame, 10.0)
    os.close(fd)
    entries = nw.read_log(str(log))
    assert entries[0]["event"] == "started" and entries[0]["gateway"] == GATEWAY
    assert [e["verdict"] for e in entries[1:]] == ["leave", "reply", "local"]
    assert entries[1]["t"] == 10.0 and entries[1]["dport"] == 80
    assert (capture.frames, capture.packets) == (5, 3)
