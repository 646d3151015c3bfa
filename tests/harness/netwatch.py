"""netwatch: the network log of an air-gapped test host.

Why: an "offline" molecule scenario puts its host on a Docker network created with `internal: true`.
Docker's isolation rules then drop everything that would leave the subnet, so a role that quietly reaches
for the internet (a pip index, a registry, a DNS name) fails late and vaguely, or, worse, falls back and
passes. The drop itself leaves no trace. netwatch records, on the host side of the network's bridge, every
packet the offline host(s) send, and says which ones tried to leave, so a scenario can assert "nothing tried
to leave" and name the culprit when something did.

Where it looks: Docker gives an internal network a Linux bridge (`br-<first 12 hex of the network id>`, or
the `com.docker.network.bridge.name` option) holding the gateway address, and the containers still get
`default via <gateway>`. A packet headed outside is therefore handed to the bridge (addressed to the
gateway's MAC) and is seen by an AF_PACKET socket bound to the bridge *before* iptables drops it in
FORWARD. DNS goes to the gateway too when the scenario writes `nameserver <gateway>` into resolv.conf.
Traffic between two containers of the network is switched between veth ports and never reaches the
bridge's own port, unless the bridge is promiscuous: the socket asks for PACKET_MR_PROMISC (a per-socket
membership the kernel drops when the socket closes), so that local traffic is logged too, as "local".

Verdicts, for every IPv4/IPv6 packet whose source is a watched address:
  leave   the destination is outside the network's subnet(s), or is the gateway itself (the host beyond the
          bridge is the connected side: a proxy, a mirror or a DNS server there would be a way out)
  local   another address of the network
  reply   a TCP segment (not a bare SYN) on a connection the other side opened: a SYN from a non-watched
          source to a watched destination was seen, as (remote ip, remote port, local ip, local port)
  noise   IPv6 link-local/multicast, IPv4 broadcast/multicast (neighbour discovery, MLD, mDNS...)
ARP and packets from other sources are not logged (other sources only feed the reply tracking).

CLI (python3 tests/harness/netwatch.py ...; no shebang/exec bit, which ansible-test's shebang check wants):
  start  --network NAME --watch IP[,IP...] --log FILE [--pidfile F]  daemonizes, pid in F (default FILE.pid),
                                                                     returns once the started line is written
  stop   --pidfile F (or --log FILE)                                 SIGTERM, waits for the stopped line
  report --log FILE [--json]                                         exit 1 if any "leave", 0 if none, 2 unreadable

Log (JSON lines, appended, one write per line): a first {"event": "started", ...} once the socket is open,
one line per packet ({"t", "src", "dst", "family", "proto", "sport", "dport", "flags", "dns_query",
"dns_qtype", "icmp_type", "verdict", ...}), a last {"event": "stopped", "packets": n} on SIGTERM.

Library (unit tests): parse_frame(), classify(), read_log(), leaves(), network_info_from_inspect().
Python 3 standard library only; `start` needs root (raw socket).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
VLAN_TYPES = (0x8100, 0x88A8)
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1

IPPROTO_NAMES = {1: "icmp", 6: "tcp", 17: "udp", 58: "icmp"}
IPV6_EXT_HEADERS = (0, 43, 44, 51, 60)  # hop-by-hop, routing, fragment, AH, destination options
TCP_FLAG_LETTERS = ((0x01, "F"), (0x02, "S"), (0x04, "R"), (0x08, "P"), (0x10, "A"), (0x20, "U"),
                    (0x40, "E"), (0x80, "C"))
DNS_PORT = 53
DNS_QTYPES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA",
              33: "SRV", 64: "SVCB", 65: "HTTPS", 255: "ANY"}
VERDICTS = ("leave", "local", "reply", "noise")
RECV_SIZE = 1 << 17  # GRO/GSO frames on a bridge can exceed the MTU; 128 KiB holds any of them


# --------------------------------------------------------------------------- frame parsing


def parse_frame(frame: bytes) -> dict | None:
    """An Ethernet frame -> a packet dict (IPv4/IPv6 only; ARP and the rest -> None)."""
    if len(frame) < 14:
        return None
    ethertype = struct.unpack_from("!H", frame, 12)[0]
    offset = 14
    while ethertype in VLAN_TYPES and len(frame) >= offset + 4:
        ethertype = struct.unpack_from("!H", frame, offset + 2)[0]
        offset += 4
    if ethertype == ETH_P_IP:
        return parse_ipv4(frame[offset:])
    if ethertype == ETH_P_IPV6:
        return parse_ipv6(frame[offset:])
    return None


def _packet(family: str, src: bytes, dst: bytes, length: int) -> dict:
    return {
        "family": family,
        "src": str(ipaddress.ip_address(src)),
        "dst": str(ipaddress.ip_address(dst)),
        "proto": "other",
        "ipproto": None,
        "sport": None,
        "dport": None,
        "flags": None,
        "dns_query": None,
        "dns_qtype": None,
        "icmp_type": None,
        "icmp_code": None,
        "fragment": False,
        "len": length,
    }


def parse_ipv4(data: bytes) -> dict | None:
    """An IPv4 packet (header first) -> packet dict; non-first fragments carry no ports."""
    if len(data) < 20 or data[0] >> 4 != 4:
        return None
    header_len = (data[0] & 0x0F) * 4
    total_len, frag = struct.unpack_from("!H2xH", data, 2)
    if header_len < 20 or len(data) < header_len:
        return None
    end = total_len if header_len <= total_len <= len(data) else len(data)  # 0 with BIG TCP: take all
    packet = _packet("ipv4", data[12:16], data[16:20], total_len or len(data))
    frag_offset = frag & 0x1FFF
    packet["fragment"] = bool(frag_offset or frag & 0x2000)
    ipproto = data[9]
    if frag_offset:
        _set_proto(packet, ipproto)
        return packet
    _parse_l4(packet, ipproto, data[header_len:end])
    return packet


def parse_ipv6(data: bytes) -> dict | None:
    """An IPv6 packet -> packet dict, walking the extension headers to the transport header."""
    if len(data) < 40 or data[0] >> 4 != 6:
        return None
    payload_len, next_header = struct.unpack_from("!HB", data, 4)
    end = 40 + payload_len if 0 < payload_len and 40 + payload_len <= len(data) else len(data)
    packet = _packet("ipv6", data[8:24], data[24:40], 40 + payload_len)
    offset = 40
    while next_header in IPV6_EXT_HEADERS and offset + 8 <= end:
        current = next_header
        next_header = data[offset]
        if current == 44:  # fragment header: 8 bytes; only the first fragment has the transport header
            frag_offset = struct.unpack_from("!H", data, offset + 2)[0] >> 3
            packet["fragment"] = True
            offset += 8
            if frag_offset:
                _set_proto(packet, next_header)
                return packet
        elif current == 51:
            offset += (data[offset + 1] + 2) * 4
        else:
            offset += (data[offset + 1] + 1) * 8
    _parse_l4(packet, next_header, data[offset:end])
    return packet


def _set_proto(packet: dict, ipproto: int) -> None:
    packet["ipproto"] = ipproto
    packet["proto"] = IPPROTO_NAMES.get(ipproto, "other")


def _parse_l4(packet: dict, ipproto: int, segment: bytes) -> None:
    _set_proto(packet, ipproto)
    if ipproto == 6 and len(segment) >= 20:
        _parse_tcp(packet, segment)
    elif ipproto == 17 and len(segment) >= 8:
        packet["sport"], packet["dport"] = struct.unpack_from("!HH", segment, 0)
        if packet["dport"] == DNS_PORT:
            _add_dns(packet, segment[8:])
    elif ipproto in (1, 58) and len(segment) >= 2:
        packet["icmp_type"], packet["icmp_code"] = segment[0], segment[1]


def _parse_tcp(packet: dict, segment: bytes) -> None:
    packet["sport"], packet["dport"] = struct.unpack_from("!HH", segment, 0)
    packet["flags"] = tcp_flags(segment[13])
    data_offset = (segment[12] >> 4) * 4
    payload = segment[data_offset:] if data_offset >= 20 else b""
    if packet["dport"] == DNS_PORT and len(payload) >= 2:
        _add_dns(packet, payload[2:])  # DNS over TCP: a 2-byte length, then the message


def tcp_flags(bits: int) -> str:
    """TCP flag byte -> letters in bit order ("S", "SA", "PA", "FA", "R"...)."""
    return "".join(letter for bit, letter in TCP_FLAG_LETTERS if bits & bit)


def _add_dns(packet: dict, message: bytes) -> None:
    query = parse_dns_query(message)
    if query:
        packet["dns_query"], packet["dns_qtype"] = query


def parse_dns_query(message: bytes) -> tuple[str, str] | None:
    """A DNS message -> (first question's name, qtype) if it is a query, else None."""
    if len(message) < 12:
        return None
    flags, qdcount = struct.unpack_from("!HH", message, 2)
    if flags & 0x8000 or qdcount < 1:  # a response, or no question
        return None
    name, offset = _dns_name(message, 12)
    if name is None or offset + 4 > len(message):
        return None
    qtype = struct.unpack_from("!H", message, offset)[0]
    return name, DNS_QTYPES.get(qtype, str(qtype))


def _dns_name(message: bytes, offset: int) -> tuple[str | None, int]:
    """Decode a (possibly compressed) DNS name -> (name, offset after it in the message)."""
    labels, end, jumps = [], None, 0
    while offset < len(message):
        length = message[offset]
        if length == 0:
            return ".".join(labels) or ".", (end if end is not None else offset + 1)
        if length & 0xC0 == 0xC0:  # compression pointer
            if offset + 1 >= len(message) or jumps > 16:
                return None, offset
            end = offset + 2 if end is None else end
            offset = ((length & 0x3F) << 8) | message[offset + 1]
            jumps += 1
            continue
        if length & 0xC0 or offset + 1 + length > len(message):
            return None, offset
        labels.append(message[offset + 1:offset + 1 + length].decode("ascii", "replace"))
        offset += 1 + length
    return None, offset


# --------------------------------------------------------------------------- verdicts


def _addresses(values) -> frozenset:
    if isinstance(values, frozenset):
        return values
    if isinstance(values, (str, ipaddress.IPv4Address, ipaddress.IPv6Address)):
        values = [values]
    return frozenset(ipaddress.ip_address(v) for v in (values or ()) if v)


def _networks(values) -> tuple:
    if isinstance(values, (str, ipaddress.IPv4Network, ipaddress.IPv6Network)):
        values = [values]
    return tuple(ipaddress.ip_network(v, strict=False) for v in (values or ()))


def is_syn_only(packet: dict) -> bool:
    """A connection opener: SYN without ACK (ECN bits allowed)."""
    flags = packet.get("flags") or ""
    return "S" in flags and "A" not in flags and "R" not in flags and "F" not in flags


def is_noise(dst, subnets) -> bool:
    """Link-local/multicast IPv6, broadcast/multicast IPv4 (incl. a subnet's broadcast address)."""
    dst = ipaddress.ip_address(dst)
    if dst.version == 6:
        return dst.is_link_local or dst.is_multicast
    if dst.is_multicast or dst == ipaddress.IPv4Address("255.255.255.255"):
        return True
    return any(net.version == 4 and net.prefixlen < 31 and dst == net.broadcast_address
               for net in _networks(subnets))


def conn_key(remote_ip, remote_port, local_ip, local_port) -> tuple:
    """The conntrack key: (remote ip, remote port, local ip, local port), ips in canonical text."""
    return (str(ipaddress.ip_address(remote_ip)), remote_port, str(ipaddress.ip_address(local_ip)), local_port)


def classify(packet: dict | None, subnets, gateway, watched, conntrack: set) -> str | None:
    """Verdict of one parsed packet: "leave" | "local" | "reply" | "noise", or None (not of interest).

    `gateway` is one address or several (IPv4 and IPv6 gateways); `conntrack` is a set this function
    updates with the connections other sources open to watched hosts.
    """
    if packet is None:
        return None
    src, dst = ipaddress.ip_address(packet["src"]), ipaddress.ip_address(packet["dst"])
    watched = _addresses(watched)
    tcp = packet.get("proto") == "tcp" and packet.get("sport") is not None
    if src not in watched:
        if tcp and dst in watched and is_syn_only(packet):
            conntrack.add(conn_key(src, packet["sport"], dst, packet["dport"]))
        return None
    subnets = _networks(subnets)
    if is_noise(dst, subnets):
        return "noise"
    if tcp and not is_syn_only(packet) and conn_key(dst, packet["dport"], src, packet["sport"]) in conntrack:
        return "reply"
    if dst in _addresses(gateway) or not any(dst in net for net in subnets):
        return "leave"
    return "local"


# --------------------------------------------------------------------------- log reading / report


def read_log(path: str) -> list:
    """All JSON lines of a netwatch log (a torn last line, e.g. from a killed daemon, is skipped)."""
    entries = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return entries


def leaves(entries: list) -> list:
    """The packet lines whose verdict is "leave"."""
    return [e for e in entries if e.get("verdict") == "leave"]


def summarize(entries: list) -> dict:
    """Counts per verdict, the leaves, and the started/stopped events (the last run's, if appended)."""
    counts = {verdict: 0 for verdict in VERDICTS}
    started = stopped = None
    for entry in entries:
        if entry.get("event") == "started":
            started = entry
        elif entry.get("event") == "stopped":
            stopped = entry
        elif "verdict" in entry:
            counts[entry["verdict"]] = counts.get(entry["verdict"], 0) + 1
    return {"counts": counts, "leaves": leaves(entries), "started": started, "stopped": stopped}


def describe(entry: dict) -> str:
    """One human line for a packet entry: time, src -> dst, proto/port, flags, DNS name."""
    stamp = time.strftime("%H:%M:%S", time.localtime(entry.get("t", 0)))
    port = f"/{entry['dport']}" if entry.get("dport") is not None else ""
    text = f"{stamp} {entry.get('src')} -> {entry.get('dst')} {entry.get('family', '')} {entry.get('proto')}{port}"
    if entry.get("flags"):
        text += f" [{entry['flags']}]"
    if entry.get("icmp_type") is not None:
        text += f" type {entry['icmp_type']}"
    if entry.get("dns_query"):
        text += f" dns {entry['dns_query']} {entry.get('dns_qtype') or ''}".rstrip()
    return text


def format_report(path: str, summary: dict) -> str:
    lines = [f"netwatch {path}"]
    started = summary["started"]
    if started:
        lines.append(f"  interface {started.get('interface')}  subnets {', '.join(started.get('subnets', []))}"
                     f"  gateway {started.get('gateway')}  watch {', '.join(started.get('watch', []))}")
    else:
        lines.append("  (no started event: the capture never opened)")
    counts = "  ".join(f"{k} {v}" for k, v in summary["counts"].items())
    lines.append(f"  packets: {sum(summary['counts'].values())}  {counts}")
    if not summary["stopped"]:
        lines.append("  (no stopped event: the daemon was killed or is still running)")
    lines.append(f"LEAVE ({len(summary['leaves'])})" + (":" if summary["leaves"] else ": none"))
    lines.extend("  " + describe(entry) for entry in summary["leaves"])
    return "\n".join(lines)


# --------------------------------------------------------------------------- docker network


def network_info_from_inspect(inspect: dict) -> dict:
    """`docker network inspect` (one network's object) -> {"interface", "subnets", "gateways"}."""
    options = inspect.get("Options") or {}
    interface = options.get("com.docker.network.bridge.name") or "br-" + inspect["Id"][:12]
    subnets, gateways = [], []
    for config in (inspect.get("IPAM") or {}).get("Config") or []:
        if config.get("Subnet"):
            subnets.append(str(ipaddress.ip_network(config["Subnet"], strict=False)))
        if config.get("Gateway"):
            gateways.append(str(ipaddress.ip_address(config["Gateway"].split("/")[0])))
    return {"interface": interface, "subnets": subnets, "gateways": gateways,
            "internal": bool(inspect.get("Internal"))}


def interface_addresses(interface: str) -> list:
    """Addresses held by the interface (`ip -j addr`), the gateway when IPAM does not name one."""
    try:
        out = subprocess.run(["ip", "-j", "addr", "show", "dev", interface], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    return [info["local"] for link in json.loads(out or "[]") for info in link.get("addr_info", [])
            if info.get("scope") == "global"]


def network_info(name: str) -> dict:
    out = subprocess.run(["docker", "network", "inspect", name], check=True, capture_output=True, text=True).stdout
    info = network_info_from_inspect(json.loads(out)[0])
    if not info["gateways"]:
        info["gateways"] = [a for a in interface_addresses(info["interface"])
                            if any(ipaddress.ip_address(a) in ipaddress.ip_network(s) for s in info["subnets"])]
    return info


# --------------------------------------------------------------------------- capture


def open_socket(interface: str) -> socket.socket:
    """AF_PACKET raw socket on `interface`, bridge made promiscuous for this socket's lifetime."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
    sock.bind((interface, 0))
    ifindex = socket.if_nametoindex(interface)
    sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b""))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return sock


def write_line(fd: int, obj: dict) -> None:
    """One JSON line in one write() on an O_APPEND fd: nothing buffered, no torn lines between writers."""
    os.write(fd, (json.dumps(obj, separators=(", ", ": ")) + "\n").encode())


class Capture:
    """The daemon's state: scope of the network, the conntrack set, the counters, the stop flag."""

    def __init__(self, sock, log_fd, info: dict, watch: list):
        self.sock, self.log_fd = sock, log_fd
        self.info = info
        self.watch = watch
        self.subnets = _networks(info["subnets"])
        self.gateways = _addresses(info["gateways"])
        self.watched = _addresses(watch)
        self.conntrack: set = set()
        self.packets = self.frames = 0
        self.stopping = False

    def started_event(self) -> dict:
        return {"event": "started", "t": time.time(), "pid": os.getpid(), "interface": self.info["interface"],
                "subnets": self.info["subnets"], "gateway": (self.info["gateways"] or [None])[0],
                "gateways": self.info["gateways"], "watch": self.watch}

    def handle(self, frame: bytes, t: float) -> None:
        self.frames += 1
        packet = parse_frame(frame)
        verdict = classify(packet, self.subnets, self.gateways, self.watched, self.conntrack)
        if verdict is None:
            return
        self.packets += 1
        write_line(self.log_fd, {"t": round(t, 6), **packet, "verdict": verdict})

    def run(self) -> None:
        self.sock.settimeout(0.5)
        while not self.stopping:
            try:
                frame = self.sock.recv(RECV_SIZE)
            except (socket.timeout, InterruptedError):
                continue
            self.handle(frame, time.time())
        self.drain()
        write_line(self.log_fd, {"event": "stopped", "t": time.time(), "packets": self.packets,
                                 "frames": self.frames, "connections_in": len(self.conntrack)})

    def drain(self) -> None:
        """Frames already queued when SIGTERM came are still logged."""
        self.sock.setblocking(False)
        while True:
            try:
                frame = self.sock.recv(RECV_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            self.handle(frame, time.time())


def _close_fds(keep) -> None:
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _daemonize(keep) -> None:
    """Second half of the double fork: new session, no terminal, only `keep` fds open."""
    os.setsid()
    if os.fork():
        os._exit(0)
    os.chdir("/")
    os.umask(0o022)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    _close_fds(keep)


def _pid_alive(pid: int) -> bool:
    """Running and not a zombie (the daemon's reaper may be a PID 1 that never reaps)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _pid_is_netwatch(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"netwatch" in handle.read()
    except OSError:
        return False


def _read_pid(pidfile: str) -> int | None:
    try:
        with open(pidfile, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _serve(capture: Capture, pidfile: str | None, ready_fd: int | None) -> int:
    """The daemon body: pidfile, started line, signal handling, loop, cleanup."""
    def stop(_signum, _frame):
        capture.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if pidfile:
        with open(pidfile, "w", encoding="ascii") as handle:
            handle.write(f"{os.getpid()}\n")
    write_line(capture.log_fd, capture.started_event())
    if ready_fd is not None:
        os.write(ready_fd, f"ok {os.getpid()}".encode())
        os.close(ready_fd)
    try:
        capture.run()
    except Exception as exc:  # pylint: disable=broad-except  # the log is the daemon's only voice
        write_line(capture.log_fd, {"event": "error", "t": time.time(), "error": repr(exc),
                                    "packets": capture.packets})
        return 1
    finally:
        if pidfile and _read_pid(pidfile) == os.getpid():
            os.unlink(pidfile)
    return 0


def cmd_start(args) -> int:
    watch = [str(ipaddress.ip_address(ip.strip())) for item in args.watch for ip in item.split(",") if ip.strip()]
    pidfile = os.path.abspath(args.pidfile or args.log + ".pid")
    old = _read_pid(pidfile)
    if old and _pid_alive(old) and _pid_is_netwatch(old):
        print(f"netwatch: already running (pid {old}, {pidfile})", file=sys.stderr)
        return 1
    info = network_info(args.network)
    if args.interface:
        info["interface"] = args.interface
    if not os.path.exists(f"/sys/class/net/{info['interface']}"):
        print(f"netwatch: no interface {info['interface']} for network {args.network}", file=sys.stderr)
        return 1
    sock = open_socket(info["interface"])  # here, so a missing privilege fails in the caller's face
    log_fd = os.open(os.path.abspath(args.log), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    capture = Capture(sock, log_fd, info, watch)
    if args.foreground:
        return _serve(capture, pidfile, None)
    return _spawn(capture, pidfile, sock, log_fd)


def _spawn(capture: Capture, pidfile: str, sock, log_fd: int) -> int:
    """Fork the daemon; return once it has written its started line (or failed to)."""
    ready_r, ready_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        os.close(ready_r)
        code = 1
        try:
            _daemonize({sock.fileno(), log_fd, ready_w})
            code = _serve(capture, pidfile, ready_w)
        finally:
            os._exit(code)  # never return into the caller's stack
    os.close(ready_w)
    sock.close()
    os.close(log_fd)
    os.waitpid(child, 0)
    message = b""
    if select.select([ready_r], [], [], 15)[0]:
        message = os.read(ready_r, 64)
    os.close(ready_r)
    if not message.startswith(b"ok "):
        print("netwatch: the daemon did not report ready", file=sys.stderr)
        return 1
    pid = message.split()[1].decode()
    print(f"netwatch: pid {pid} on {capture.info['interface']} ({', '.join(capture.info['subnets'])}, "
          f"gateway {', '.join(capture.info['gateways'])}), watching {', '.join(capture.watch)} -> {pidfile}")
    return 0


def cmd_stop(args) -> int:
    pidfile = args.pidfile or (args.log + ".pid" if args.log else None)
    if not pidfile:
        print("netwatch: stop needs --pidfile (or --log)", file=sys.stderr)
        return 2
    pid = _read_pid(pidfile)
    if pid is None or not _pid_alive(pid):
        print(f"netwatch: not running ({pidfile})", file=sys.stderr)
        if pid is not None and os.path.exists(pidfile):
            os.unlink(pidfile)
        return 0
    if not _pid_is_netwatch(pid):
        print(f"netwatch: pid {pid} in {pidfile} is not netwatch; not signalled", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
        print(f"netwatch: pid {pid} ignored SIGTERM for {args.timeout}s; killed (no stopped line)", file=sys.stderr)
        return 1
    if os.path.exists(pidfile):
        os.unlink(pidfile)
    print(f"netwatch: stopped pid {pid}")
    return 0


def cmd_report(args) -> int:
    summary = summarize(read_log(args.log))
    if args.json:
        print(json.dumps({"log": args.log, **summary}, indent=2))
    else:
        print(format_report(args.log, summary))
    return 1 if summary["leaves"] else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="capture on a Docker network's bridge, in the background")
    start.add_argument("--network", required=True, help="Docker network name or id")
    start.add_argument("--watch", required=True, action="append", help="IP[,IP...] of the offline host(s)")
    start.add_argument("--log", required=True, help="JSON-lines log, appended")
    start.add_argument("--pidfile", help="default: LOG.pid")
    start.add_argument("--interface", help="override the bridge interface found by docker network inspect")
    start.add_argument("--foreground", action="store_true", help="do not daemonize (debugging)")
    stop = sub.add_parser("stop", help="SIGTERM the daemon and wait for its stopped line")
    stop.add_argument("--pidfile")
    stop.add_argument("--log", help="stands for --pidfile LOG.pid")
    stop.add_argument("--timeout", type=float, default=10.0)
    report = sub.add_parser("report", help="summary; exit 1 when a packet tried to leave")
    report.add_argument("--log", required=True)
    report.add_argument("--json", action="store_true")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {"start": cmd_start, "stop": cmd_stop, "report": cmd_report}
    try:
        return handlers[args.command](args)
    except subprocess.CalledProcessError as exc:
        print(f"netwatch: {' '.join(exc.cmd)} failed: {(exc.stderr or '').strip()}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"netwatch: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
