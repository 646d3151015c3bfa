"""kimi.deploy.replica_link as Ansible runs it: a listener on loopback and members that reach it or not."""
import os
import socket
import threading

from module_runner import run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
MODULE = os.path.join(ROOT, "plugins", "modules", "replica_link.py")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listen_in_background(port, expect, timeout):
    out = {}
    thread = threading.Thread(target=lambda: out.update(run_module(MODULE, {
        "mode": "listen", "port": port, "expect": expect, "timeout": timeout})))
    thread.start()
    return thread, out


def test_members_reach_the_listener_and_learn_their_interface():
    port = free_port()
    thread, heard = listen_in_background(port, expect=2, timeout=20)
    results = [run_module(MODULE, {"mode": "connect", "address": "127.0.0.1", "port": port, "timeout": 15})
               for _member in range(2)]
    thread.join(30)
    for result in results:
        assert result["reachable"] is True and result["changed"] is False, result
        assert result["head_ip"] == "127.0.0.1" and result["local_address"] == "127.0.0.1"
        assert result["interface"] == "lo"
    assert heard["in_use"] is False and heard["connected_from"] == ["127.0.0.1", "127.0.0.1"], heard


def test_a_port_in_use_is_reported_and_still_reachable():
    with socket.socket() as engine:
        engine.bind(("127.0.0.1", 0))
        engine.listen(8)
        port = engine.getsockname()[1]
        heard = run_module(MODULE, {"mode": "listen", "port": port, "timeout": 5})
        reached = run_module(MODULE, {"mode": "connect", "address": "localhost", "port": port, "timeout": 5})
    assert heard["in_use"] is True and heard["connected_from"] == []
    assert reached["reachable"] is True


def test_nothing_listening_is_unreachable_with_the_reason():
    result = run_module(MODULE, {"mode": "connect", "address": "127.0.0.1", "port": free_port(), "timeout": 1})
    assert result["reachable"] is False and "refused" in result["error"].lower(), result
    assert "failed" not in result  # the play decides, naming the host and the port


def test_an_unknown_head_name_says_it_does_not_resolve():
    result = run_module(MODULE, {"mode": "connect", "address": "no-such-head.invalid", "port": 29500, "timeout": 1})
    assert result["reachable"] is False and "does not resolve" in result["error"]


def test_active_infiniband_hcas_are_read_from_sysfs(tmp_path):
    for hca, state in (("mlx5_0", "4: ACTIVE"), ("mlx5_1", "1: DOWN"), ("mlx5_2", "4: ACTIVE")):
        port = tmp_path / "sys/class/infiniband" / hca / "ports/1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
    result = run_module(MODULE, {"mode": "connect", "address": "127.0.0.1", "port": free_port(), "timeout": 0.5,
                                 "sys_root": str(tmp_path)})
    assert result["infiniband"] == ["mlx5_0", "mlx5_2"]
    assert run_module(MODULE, {"mode": "connect", "address": "127.0.0.1", "port": free_port(), "timeout": 0.5,
                               "sys_root": str(tmp_path / "none")})["infiniband"] == []


def test_a_bad_port_is_refused_naming_the_option():
    result = run_module(MODULE, {"mode": "connect", "address": "127.0.0.1", "port": 70000})
    assert result["failed"] and result["option"] == "port"
