"""The HumanEval sandbox: passes correct code, fails wrong code, contains hostile code."""

import os
import socket
import subprocess
import sys
import time

import pytest

from selfjudge.tasks.sandbox import namespaces_available, run_python

MODES = ["rlimit"] + (["namespace"] if namespaces_available() else [])


def _stray_processes(marker: str) -> list[int]:
    """PIDs whose command line mentions ``marker`` (a sandbox's temp dir)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(pid))
            except OSError:
                pass
    return out


def _test_process_still_healthy():
    assert subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True, text=True).stdout == "7\n"


@pytest.mark.parametrize("mode", MODES)
def test_pass_and_fail(mode):
    ok = run_python("def f(x):\n    return x + 1\nassert f(1) == 2\nprint('done')", timeout_s=10, mode=mode)
    assert ok.status == "passed" and ok.passed and ok.returncode == 0 and ok.stdout.strip() == "done"
    bad = run_python("def f(x):\n    return x - 1\nassert f(1) == 2", timeout_s=10, mode=mode)
    assert bad.status == "failed" and not bad.passed and "AssertionError" in bad.stderr
    syn = run_python("def f(:\n", timeout_s=10, mode=mode)
    assert syn.status == "failed" and "SyntaxError" in syn.stderr


@pytest.mark.parametrize("mode", MODES)
def test_runs_in_temp_dir_without_privileges(mode):
    r = run_python("import os, sys\nprint(os.getcwd())\nprint(os.geteuid())\nprint(sys.flags.isolated)",
                   timeout_s=10, mode=mode)
    assert r.passed, r.stderr
    cwd, euid, isolated = r.stdout.split()
    assert os.path.basename(cwd).startswith("selfjudge-sbx-") and not os.path.exists(cwd)  # removed after
    assert isolated == "1"
    if os.geteuid() == 0:
        assert euid == "65534" and "uid-nobody" in r.enforced


@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_killed_within_time_limit(mode):
    t0 = time.monotonic()
    r = run_python("while True:\n    pass", timeout_s=1.5, mode=mode)
    elapsed = time.monotonic() - t0
    assert r.status == "timeout" and not r.passed
    assert 1.4 <= r.wall_s and elapsed < 5.0


@pytest.mark.parametrize("mode", MODES)
def test_fork_bomb_contained(mode):
    code = (
        "import os, subprocess, sys, time\n"
        "print(os.getcwd(), flush=True)\n"
        "kids = 0\n"
        "for _ in range(10000):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            os.setsid()  # try to escape the process group\n"
        "            time.sleep(600)\n"
        "            os._exit(0)\n"
        "        kids += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print(kids, flush=True)\n"
        "try:\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "    print('spawned', flush=True)\n"
        "except OSError:\n"
        "    print('spawn-refused', flush=True)\n"
        "time.sleep(600)\n"
    )
    t0 = time.monotonic()
    r = run_python(code, timeout_s=3, max_procs=8, mode=mode)
    assert r.status == "timeout" and time.monotonic() - t0 < 8.0
    workdir, kids, spawn = r.stdout.split()
    # the process limit stopped forking long before 10000 children, and refused a spawn
    assert 0 <= int(kids) < 8 and spawn == "spawn-refused", r.stdout
    # no process of the sandbox survives it, not even the setsid() ones
    time.sleep(0.3)
    assert _stray_processes(workdir) == []
    _test_process_still_healthy()


@pytest.mark.parametrize("mode", MODES)
def test_memory_hog_killed(mode):
    t0 = time.monotonic()
    r = run_python("chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 * 1024))",
                   timeout_s=10, memory_mb=256, mode=mode)
    assert r.status == "failed" and "MemoryError" in r.stderr
    assert time.monotonic() - t0 < 8.0
    _test_process_still_healthy()


@pytest.mark.parametrize("mode", MODES)
def test_no_network(mode):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        # through the socket module: blocked by the in-process guard in every mode
        r = run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)",
                       timeout_s=10, mode=mode)
        assert r.status == "failed" and "network access is disabled" in r.stderr
        # through the C module (bypasses the guard): only the network namespace stops it
        raw = run_python(f"import _socket\ns = _socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))\n"
                         "print('connected')", timeout_s=10, mode=mode)
        if mode == "namespace":
            assert raw.status == "failed" and "connected" not in raw.stdout
            assert "unreachable" in raw.stderr.lower()
    finally:
        server.close()


def test_bad_arguments():
    with pytest.raises(ValueError, match="timeout_s"):
        run_python("pass", timeout_s=0)
    with pytest.raises(ValueError, match="code"):
        run_python(None)
    with pytest.raises(ValueError, match="mode"):
        run_python("pass", mode="docker")
