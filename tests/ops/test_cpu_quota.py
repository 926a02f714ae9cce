"""`serve`'s default process count follows the CPU quota of its control group (app/ops/cpu.py),
not the node's cores: a real control group with a quota where this machine lets us make one,
and the kernel's file formats for the hierarchy this machine does not run."""

import os
import uuid
from pathlib import Path

import pytest

from app.ops.cpu import cgroup_cpu_quota, usable_cores
from tests.support.databases import BACKENDS, throwaway_database
from tests.support.servers import FENCELINE, Served, clean_env

CPU_V1 = Path("/sys/fs/cgroup/cpu")


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class TestFormats:
    def test_cgroup_v2_takes_the_tightest_quota_from_the_group_up(self, tmp_path):
        write(tmp_path / "cgroup.controllers", "cpu memory\n")
        write(tmp_path / "kubepods" / "cpu.max", "300000 100000\n")
        write(tmp_path / "kubepods" / "pod1" / "cpu.max", "max 100000\n")
        membership = tmp_path / "self-cgroup"
        membership.write_text("0::/kubepods/pod1\n")
        assert cgroup_cpu_quota(tmp_path, membership) == 3.0

    def test_cgroup_v2_in_a_namespace_reads_its_own_root(self, tmp_path):
        write(tmp_path / "cgroup.controllers", "cpu\n")
        write(tmp_path / "cpu.max", "150000 100000\n")
        (membership := tmp_path / "self-cgroup").write_text("0::/\n")
        assert cgroup_cpu_quota(tmp_path, membership) == 1.5
        assert usable_cores(tmp_path, membership) == min(2, len(os.sched_getaffinity(0)))

    def test_cgroup_v1_unlimited_is_no_quota(self, tmp_path):
        write(tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
        write(tmp_path / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
        (membership := tmp_path / "self-cgroup").write_text("3:cpu,cpuacct:/\n1:name=systemd:/\n")
        assert cgroup_cpu_quota(tmp_path, membership) is None
        assert usable_cores(tmp_path, membership) == len(os.sched_getaffinity(0))

    def test_no_cgroup_file_system_is_no_quota(self, tmp_path):
        assert cgroup_cpu_quota(tmp_path, tmp_path / "absent") is None


@pytest.fixture
def one_core_group():
    """A cgroup v1 cpu group of this machine's with a quota of one core, or a skip where the
    machine does not let us make one."""
    group = CPU_V1 / f"fenceline-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "cpu.cfs_quota_us").write_text(str(int((group / "cpu.cfs_period_us").read_text())))
    except OSError as exc:
        pytest.skip(f"no cgroup v1 cpu group can be made here ({exc.strerror})")
    yield group
    for pid in (group / "cgroup.procs").read_text().split():  # back to the root group, so it can go
        (CPU_V1 / "cgroup.procs").write_text(pid)
    group.rmdir()


@pytest.mark.skipif("postgresql" not in BACKENDS, reason="PostgreSQL is not among the test backends")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: a one-core quota changes nothing")
def test_serve_in_a_one_core_container_runs_one_process(tmp_path, one_core_group):
    """On PostgreSQL, unasked, one process per core: here two outside the group, one inside."""
    with throwaway_database("postgresql") as url:
        env = {**clean_env(tmp_path / "data"), "FENCELINE_DATABASE_URL": url, "FENCELINE_ADMIN_PASSWORD": "pw",
               "FENCELINE_DATABASE_POOL_SIZE": "2", "FENCELINE_DATABASE_MAX_OVERFLOW": "0"}
        enter = f"echo $$ > {one_core_group / 'cgroup.procs'} && exec \"$@\""
        for command, said in ((["sh", "-c", enter, "sh", *FENCELINE], "1 server process"),
                              (FENCELINE, f"{len(os.sched_getaffinity(0))} server processes")):
            with Served(tmp_path, env, command=command) as server:
                server.wait_healthy()
                assert said in server.output, server.output
