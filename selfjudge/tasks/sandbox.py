"""Run untrusted Python (model-written HumanEval code) in a separate, limited process.

What is enforced (``SandboxResult.enforced`` lists what applied to a given run):

- **separate process**: ``python -I`` (isolated mode: no PYTHON* env vars, no user
  site, cwd not on ``sys.path``) in a fresh temporary directory used as cwd/HOME/TMPDIR,
  removed afterwards; minimal environment; stdout/stderr go to files in that directory
  (capped by the file-size limit) and only their tails are returned.
- **resource limits** (``resource.setrlimit`` in a launcher that then ``exec``s the program —
  not ``preexec_fn``, unsafe in threaded parents —, soft = hard so the code cannot raise them): CPU seconds, address space (memory), number of processes
  (``RLIMIT_NPROC``, against fork bombs), file size, open files, no core dumps.
- **wall-clock timeout**: the child runs in its own session / process group, which is
  SIGKILLed on timeout and again after every run; then every process whose command line
  or environment still names the sandbox's temp dir is SIGKILLed too (children that
  called ``setsid``).
- **namespaces** (``"namespace"`` mode, used automatically when running as root and
  ``unshare``/``setpriv`` work): ``unshare --net --pid --fork --kill-child`` — a new
  network namespace with no interfaces up (no network at all, not even loopback to the
  host) and a new PID namespace whose every process the kernel kills when the sandboxed
  program exits or is killed (so even a child that escapes the process group with
  ``setsid`` dies) — then ``setpriv`` drops to uid/gid 65534 (nobody) with no
  capabilities and ``no_new_privs``, which also makes ``RLIMIT_NPROC`` bite (root ignores it).
- **fallback** (``"rlimit"`` mode, no namespaces): same limits; as root it still drops to
  uid 65534 in the launcher; as another user ``RLIMIT_NPROC`` is set to that user's
  current process count + ``max_procs``. Network is then blocked only in-process (socket
  constructors replaced by a guard prepended to the program, and proxies pointed at a
  closed port): best effort, bypassable by hostile code; a child that calls ``setsid`` AND
  execs with a new argv/environment can outlive the clean-up.

The socket guard is prepended in both modes as defence in depth. Not enforced: total
memory across processes (per-process ``RLIMIT_AS`` × ``max_procs`` bounds it), reading
world-readable files, writing to world-writable directories such as /tmp.
Override the mode with ``SELFJUDGE_SANDBOX=namespace|rlimit|auto``.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

NOBODY = 65534
_TAIL_CHARS = 8000

_GUARD = '''\
import socket as _sbx_socket
def _sbx_no_network(*args, **kwargs):
    raise OSError("network access is disabled in the selfjudge sandbox")
for _sbx_name in ("socket", "create_connection", "create_server", "socketpair", "fromfd"):
    if hasattr(_sbx_socket, _sbx_name):
        setattr(_sbx_socket, _sbx_name, _sbx_no_network)
del _sbx_socket, _sbx_name
'''

# ``must_finish``: the program's last statement prints a nonce that only this process was
# told (through the environment, removed before the program's own code runs), so an exit
# before the end -- sys.exit(0), os._exit(0), raise SystemExit -- cannot pass as success
_FINISH_ENV = "SELFJUDGE_SBX_FINISHED"
_FINISH_GUARD = f'''\
def _sbx_finisher(nonce):
    def finished():
        import sys
        sys.stdout.write("\\n" + nonce + "\\n")
        sys.stdout.flush()
    return finished
import os as _sbx_os
_sbx_finished = _sbx_finisher(_sbx_os.environ.pop("{_FINISH_ENV}", ""))
del _sbx_finisher, _sbx_os
'''


# First program of the sandbox process: set the limits (soft = hard), optionally drop
# to uid/gid ``NOBODY``, then exec the rest of argv. A launcher instead of Popen's
# ``preexec_fn``, which can deadlock when the parent has threads (torch always does).
_LAUNCHER = """\
import os, resource, sys
cpu, mem, fsize, nproc, nofile, uid = map(int, sys.argv[1:7])
for lim, val in ((resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, mem), (resource.RLIMIT_FSIZE, fsize),
                 (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_NOFILE, nofile), (resource.RLIMIT_CORE, 0)):
    resource.setrlimit(lim, (val, val))
if uid >= 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
os.execvp(sys.argv[7], sys.argv[7:])
"""


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run.

    ``status``: "passed" (exit code 0, and with ``must_finish`` the program ran to its last
    line), "failed" (non-zero exit, e.g. an AssertionError or MemoryError, or an early exit
    under ``must_finish``), or "timeout" (killed at the wall-clock or CPU limit).
    """

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    enforced: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _python() -> str:
    return sys.executable or shutil.which("python3") or "python3"


def _world_executable(path: str) -> bool:
    """Whether uid ``NOBODY`` can exec ``path``: the file and every directory above it are o+x."""
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        return False
    p = real
    while True:
        try:
            if not os.stat(p).st_mode & 0o001:
                return False
        except OSError:
            return False
        parent = os.path.dirname(p)
        if parent == p:
            return True
        p = parent


@functools.lru_cache(maxsize=2)
def sandbox_python(drop_uid: bool) -> str:
    """Interpreter for the sandboxed program. When dropping to nobody it must be reachable
    by nobody (a pyenv python under a 0700 /root is not): then the first world-executable
    of ``sys.executable``, ``/usr/bin/python3``, ``/usr/local/bin/python3``. Only the
    standard library is needed (HumanEval programs import nothing else)."""
    if not drop_uid:
        return _python()
    for cand in (_python(), "/usr/bin/python3", "/usr/local/bin/python3"):
        if _world_executable(cand):
            return os.path.realpath(cand)
    raise ValueError("no Python interpreter is executable by uid 65534 (nobody); "
                     "install a system python3 or run the sandbox as a non-root user")


def _ns_prefix() -> list[str]:
    return [
        "unshare", "--net", "--pid", "--fork", "--kill-child", "--",
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--no-new-privs", "--",
    ]


@functools.lru_cache(maxsize=1)
def namespaces_available() -> bool:
    """Whether the namespace mode works here (root, unshare and setpriv present and permitted)."""
    if os.name != "posix" or os.geteuid() != 0:
        return False
    if not (shutil.which("unshare") and shutil.which("setpriv")):
        return False
    try:
        r = subprocess.run(_ns_prefix() + [sandbox_python(True), "-I", "-c", "import os; assert os.getuid() == %d" % NOBODY],
                           capture_output=True, timeout=30)
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def _resolve_mode(mode: str | None) -> str:
    mode = mode or os.environ.get("SELFJUDGE_SANDBOX", "auto")
    if mode not in ("auto", "namespace", "rlimit"):
        raise ValueError(f"mode must be 'auto', 'namespace' or 'rlimit', got {mode!r}")
    if mode == "auto":
        return "namespace" if namespaces_available() else "rlimit"
    if mode == "namespace" and not namespaces_available():
        raise ValueError("mode='namespace' requested but unshare/setpriv namespaces are not available here")
    return mode


def _user_process_count(uid: int) -> int:
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4 * _TAIL_CHARS))
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")[-_TAIL_CHARS:]


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_marked(marker: str, rounds: int = 20) -> int:
    """SIGKILL every process whose command line or environment mentions ``marker`` (the
    sandbox's temp dir), repeating until none is left; returns how many were killed.
    Catches children that left the process group with ``setsid`` (best effort: a process
    that exec'd with a new argv and environment is not recognised)."""
    needle, me, killed = marker.encode(), os.getpid(), 0
    for _ in range(rounds):
        found = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            for part in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{pid}/{part}", "rb") as f:
                        hit = needle in f.read()
                except OSError:
                    hit = False
                if hit:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                        found += 1
                    except OSError:
                        pass
                    break
        killed += found
        if not found:
            break
        time.sleep(0.02)
    return killed


def run_python(
    code: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    max_procs: int = 16,
    max_file_mb: int = 16,
    max_open_files: int = 256,
    mode: str | None = None,
    must_finish: bool = False,
) -> SandboxResult:
    """Run ``code`` as a Python program under the limits above and report the outcome.

    ``timeout_s``: wall-clock limit (the CPU-time limit is ``ceil(timeout_s) + 1`` s);
    ``memory_mb``: per-process address-space limit; ``max_procs``: process limit of the
    sandbox user; ``max_file_mb``: largest file it may write (also caps stdout/stderr).
    ``must_finish``: exit code 0 counts as passed only if the program reached its last line
    (test programs: an early ``sys.exit(0)`` in the tested code skips the tests).
    """
    if not isinstance(code, str):
        raise ValueError(f"code must be a str, got {type(code).__name__}")
    for name, value in (("timeout_s", timeout_s), ("memory_mb", memory_mb), ("max_procs", max_procs),
                        ("max_file_mb", max_file_mb), ("max_open_files", max_open_files)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    mode = _resolve_mode(mode)
    is_root = os.geteuid() == 0
    drop_uid = is_root  # namespace mode drops via setpriv, rlimit mode in the launcher
    enforced = ["subprocess", "python -I", "tempdir", "rlimits", "wall-timeout", "socket-guard"]

    workdir = tempfile.mkdtemp(prefix="selfjudge-sbx-")
    try:
        prog = os.path.join(workdir, "prog.py")
        nonce = "selfjudge-finished-" + os.urandom(16).hex()
        with open(prog, "w", encoding="utf-8") as f:
            if must_finish:
                f.write(_GUARD + _FINISH_GUARD + "\n" + code + "\n_sbx_finished()\n")
            else:
                f.write(_GUARD + "\n" + code)
        out_path, err_path = os.path.join(workdir, "stdout.txt"), os.path.join(workdir, "stderr.txt")
        if drop_uid:
            for p in (workdir, prog):
                os.chown(p, NOBODY, NOBODY)
            enforced.append("uid-nobody")
        if mode == "namespace":
            enforced.append("net+pid-namespace")
            nproc = max_procs
        else:
            nproc = max_procs if is_root else _user_process_count(os.getuid()) + max_procs

        cpu_s = int(timeout_s) + 2
        mem = int(memory_mb) * 1024 * 1024
        fsize = int(max_file_mb) * 1024 * 1024

        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": workdir,
            "TMPDIR": workdir,
            "PYTHONHASHSEED": "0",
            "OMP_NUM_THREADS": "1",
            **({_FINISH_ENV: nonce} if must_finish else {}),
            **{k: "http://127.0.0.1:9" for k in ("http_proxy", "https_proxy", "all_proxy",
                                                 "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")},
        }
        limits = [cpu_s, mem, fsize, nproc, max_open_files, NOBODY if (drop_uid and mode == "rlimit") else -1]
        inner = (_ns_prefix() if mode == "namespace" else []) + [sandbox_python(drop_uid), "-I", prog]
        cmd = [_python(), "-I", "-c", _LAUNCHER, *map(str, limits), *inner]
        start = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            if drop_uid:
                os.chown(out_path, NOBODY, NOBODY)
                os.chown(err_path, NOBODY, NOBODY)
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=err, start_new_session=True, close_fds=True)
            timed_out = False
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc.pid)
                proc.wait()
                _kill_marked(workdir)
        wall = time.monotonic() - start
        rc = proc.returncode
        if timed_out or rc in (-signal.SIGXCPU, -signal.SIGKILL, 128 + signal.SIGXCPU, 128 + signal.SIGKILL):
            status = "timeout"
        elif rc == 0 and (not must_finish or nonce in _tail(out_path)):
            status = "passed"
        else:
            status = "failed"
        stderr = _tail(err_path)
        if rc == 0 and status == "failed":
            stderr += "\n[sandbox] the program exited before its last line (its tests did not all run)"
        return SandboxResult(status, rc, _tail(out_path), stderr, wall, tuple(enforced))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
