#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: kimi.deploy contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: replica_link
short_description: Prove a replica's members reach its head's rendezvous port, and read the network they use
description:
  - A Kimi-K2.6 replica over several hosts meets at its head, at the engines' own rendezvous port (SGLang
    C(--dist-init-addr), vLLM C(--master-addr)/C(--master-port)). A member that cannot reach it only fails after the
    engine's rendezvous timeout, minutes into a start. This module proves the path before any host is changed.
  - V(listen) runs on the head, usually with C(async) and C(poll=0) - it accepts connections on O(port) (every
    address) until O(expect) members connected or O(timeout) seconds passed, and returns who connected. When the port
    is taken (the replica's engine already listens there) it returns at once with RV(in_use=true), and the members
    test the running listener instead.
  - V(connect) runs on every member, the head included - it connects to O(address):O(port), retrying until
    O(timeout), and returns the local interface that carried the connection (what C(NCCL_SOCKET_IFNAME) and
    C(GLOO_SOCKET_IFNAME) should name) and the host's InfiniBand HCAs (C(/sys/class/infiniband), for C(NCCL_IB_HCA)
    and the container's C(/dev/infiniband) devices).
  - Changes nothing on the host; RV(ignore:changed) is always false.
version_added: 1.0.0
author: kimi.deploy maintainers (@kimi-deploy)
options:
  mode:
    description: V(listen) on the head, V(connect) on every member.
    type: str
    choices: [listen, connect]
    required: true
  port:
    description: The rendezvous port.
    type: int
    required: true
  address:
    description: The head's address as the members use it (V(connect)).
    type: str
  timeout:
    description: Seconds to listen for, or to keep trying to connect.
    type: float
    default: 10
  expect:
    description: V(listen) returns once this many connections came.
    type: int
    default: 1
  sys_root:
    description: Root under which C(/sys/class/infiniband) is read (a test's fake sysfs).
    type: path
    default: /
notes:
  - Supports check mode - it only opens sockets.
attributes:
  check_mode:
    support: full
    description: Runs the same; nothing changes.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Listen at the rendezvous port on the head
  kimi.deploy.replica_link:
    mode: listen
    port: 29500
    expect: 2
    timeout: 30
  async: 60
  poll: 0
  register: listener
  when: kimi_deployment.node_rank == 0

- name: Reach the head from every member
  kimi.deploy.replica_link:
    mode: connect
    address: "{{ kimi_deployment.head_address }}"
    port: 29500
"""

RETURN = r"""
in_use:
  description: V(listen) - the port was taken, so nothing was opened (something, usually the replica's engine, listens).
  returned: when mode is listen
  type: bool
connected_from:
  description: V(listen) - the addresses that connected.
  returned: when mode is listen
  type: list
  elements: str
reachable:
  description: V(connect) - whether the connection was made.
  returned: when mode is connect
  type: bool
error:
  description: V(connect) - why it could not be made (the last error).
  returned: when mode is connect and not reachable
  type: str
head_ip:
  description: V(connect) - the address O(address) resolved to.
  returned: when mode is connect and it resolved
  type: str
local_address:
  description: V(connect) - this host's address on the connection.
  returned: when reachable
  type: str
interface:
  description: V(connect) - the interface holding RV(local_address) (C(lo) for a loopback path).
  returned: when reachable
  type: str
infiniband:
  description: V(connect) - the InfiniBand HCAs with a port in state ACTIVE (C(mlx5_0), ...), sorted.
  returned: when mode is connect
  type: list
  elements: str
"""

import errno
import fcntl
import os
import socket
import struct
import time

from ansible.module_utils.basic import AnsibleModule

SIOCGIFADDR = 0x8915


def interface_of(address):
    """The name of the interface that holds `address` (IPv4 by ioctl, IPv6 from /proc/net/if_inet6), else None."""
    if ":" in address:
        packed = socket.inet_pton(socket.AF_INET6, address.split("%", 1)[0]).hex()
        try:
            with open("/proc/net/if_inet6") as table:
                for line in table:
                    fields = line.split()
                    if len(fields) >= 6 and fields[0] == packed:
                        return fields[5]
        except OSError:
            return None
        return None
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _index, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    finally:
        probe.close()
    return None


def active_hcas(sys_root):
    """InfiniBand HCAs (from <sys_root>/sys/class/infiniband) with at least one port in state ACTIVE."""
    base = os.path.join(sys_root, "sys/class/infiniband")
    found = []
    for hca in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        ports = os.path.join(base, hca, "ports")
        for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else []:
            try:
                with open(os.path.join(ports, port, "state")) as state:
                    if "ACTIVE" in state.read():
                        found.append(hca)
                        break
            except OSError:
                continue
    return found


def listen(port, expect, timeout):
    try:  # every address, IPv4 members too; IPv4 alone where the kernel has no IPv6
        listener = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        anywhere = ("::", port)
    except OSError:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        anywhere = ("0.0.0.0", port)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(anywhere)
    except OSError as exc:
        listener.close()
        if exc.errno == errno.EADDRINUSE:
            return {"in_use": True, "connected_from": []}
        raise
    listener.listen(64)
    listener.settimeout(0.2)
    came = []
    deadline = time.time() + timeout
    try:
        while len(came) < expect and time.time() < deadline:
            try:
                conn, peer = listener.accept()
            except socket.timeout:
                continue
            conn.close()
            came.append(peer[0][7:] if peer[0].startswith("::ffff:") else peer[0])
    finally:
        listener.close()
    return {"in_use": False, "connected_from": came}


def connect(address, port, timeout):
    deadline = time.time() + timeout
    error = None
    while True:
        try:
            infos = socket.getaddrinfo(address, port, 0, socket.SOCK_STREAM)
        except socket.gaierror as exc:
            return {"reachable": False, "error": "%s does not resolve: %s" % (address, exc.strerror)}
        head_ip = infos[0][4][0]
        family, kind, proto = infos[0][0], infos[0][1], infos[0][2]
        conn = socket.socket(family, kind, proto)
        conn.settimeout(max(0.5, min(3.0, deadline - time.time())))
        try:
            conn.connect(infos[0][4])
            local = conn.getsockname()[0]
            return {"reachable": True, "head_ip": head_ip, "local_address": local,
                    "interface": interface_of(local) or ("lo" if local.startswith("127.") or local == "::1" else None)}
        except OSError as exc:
            error = "timed out" if isinstance(exc, socket.timeout) else (exc.strerror or str(exc))
        finally:
            conn.close()
        if time.time() >= deadline:
            return {"reachable": False, "head_ip": head_ip, "error": error}
        time.sleep(0.5)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", choices=["listen", "connect"], required=True),
            port=dict(type="int", required=True), address=dict(type="str"),
            timeout=dict(type="float", default=10.0), expect=dict(type="int", default=1),
            sys_root=dict(type="path", default="/"),
        ),
        required_if=[["mode", "connect", ["address"]]],
        supports_check_mode=True,
    )
    p = module.params
    if not 1 <= p["port"] <= 65535:
        module.fail_json(msg="port must be 1 to 65535, got %d" % p["port"], option="port")
    if p["mode"] == "listen":
        try:
            module.exit_json(changed=False, **listen(p["port"], p["expect"], p["timeout"]))
        except OSError as exc:
            module.fail_json(msg="cannot listen on port %d: %s" % (p["port"], exc.strerror or exc))
    result = connect(p["address"], p["port"], p["timeout"])
    module.exit_json(changed=False, infiniband=active_hcas(p["sys_root"]), **result)


if __name__ == "__main__":
    main()
