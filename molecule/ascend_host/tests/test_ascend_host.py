"""Host state after ascend_host (pytest-testinfra, run by verify.yml: pytest --hosts=docker://kimi-ascend-host)."""


def test_the_driver_was_upgraded_from_the_sites_installer(host):
    assert "Version=25.2.1" in host.file("/usr/local/Ascend/driver/version.info").content_string
    installer = host.file("/var/lib/ascend-host/Ascend-hdk-910b-npu-driver_25.2.1_linux-x86-64.run")
    assert installer.exists and installer.mode == 0o700 and installer.user == "root"


def test_the_tuning_is_persisted_for_the_next_boot(host):
    conf = host.file("/etc/sysctl.d/90-ascend-host.conf")
    assert conf.mode == 0o644
    for line in ("vm.swappiness = 0", "kernel.numa_balancing = 0", "kernel.sched_migration_cost_ns = 50000"):
        assert line in conf.content_string
    unit = host.file("/etc/systemd/system/ascend-host-cpu-governor.service")
    assert "echo performance" in unit.content_string
    assert host.service("ascend-host-cpu-governor.service").is_enabled
    before = host.file("/etc/ascend-host/tuning.before").content_string
    assert "vm.swappiness = " in before  # what the kernel had, for ascend_host_tuning=false


def test_docker_runs_and_the_npus_device_nodes_exist(host):
    assert host.service("docker").is_running
    nodes = ["/dev/davinci%d" % n for n in range(8)] + ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    for node in nodes:
        assert host.run("test -c %s" % node).rc == 0, node  # a character device
