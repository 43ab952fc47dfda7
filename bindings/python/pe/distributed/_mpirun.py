"""pe.distributed._mpirun — mpirun's command line, and which rank failed.

What: spawn and launch start their ranks with Open MPI's mpirun; this
module builds that command (--oversubscribe, no core binding, the host
list, root's consent variables, the environment for remote hosts) and,
after a failed job, names the rank that failed from the status files the
ranks write (start.N, exit.N) and from mpirun's own message.

Why mpirun: it starts ranks on one or many machines, wires MPI between
them, and ends the whole job when one rank exits non-zero or dies — the
fault handling a home-made launcher would have to reinvent.
"""
import os
import re
import shutil
import signal
import socket
import threading
import time

from ..utils._process import set_parent_death_signal

# True while a spawned rank re-imports the caller's main module
# (_spawn_child): spawn() refuses to start ranks then.
importing_main = False

_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}

# Variables a remote host's ranks need (a local rank inherits mpirun's whole environment).
_FORWARD_PREFIXES = ("PADDLE_", "FLAGS_", "PE_", "CPU_NUM", "OMP_", "PYTHONPATH", "LD_LIBRARY_PATH", "PATH")


def find():
    """The mpirun executable, or None."""
    return shutil.which("mpirun")


def is_local(host):
    if host in _LOCAL_NAMES or host.startswith("127."):
        return True
    try:
        names = {socket.gethostname(), socket.getfqdn()}
        addrs = set(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        return False
    return host in names or host in addrs


def rank_env():
    """This process's environment for the ranks, with this pe package first
    on PYTHONPATH (so the ranks import the same pe)."""
    env = dict(os.environ)
    pe_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([pe_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def command(mpirun, nprocs_per_host, hosts, env):
    """mpirun's argv prefix for nprocs_per_host ranks on each of hosts
    (ranks fill the hosts in order: rank r on hosts[r // nprocs_per_host]),
    and fills env (a dict, changed in place) with what mpirun needs."""
    n = nprocs_per_host * len(hosts)
    cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(n)]
    # mpirun, and with it the ranks, ends when the process that started it dies, SIGKILL included
    # (spawn's and launch's mpirun runs in a session of its own, so nothing else would stop it):
    # setpriv (util-linux) sets the parent-death signal and execs mpirun. Linux sends it when the
    # starting *thread* ends, so only from the main thread, which lives as long as the process.
    setpriv = shutil.which("setpriv")
    if setpriv and threading.current_thread() is threading.main_thread():
        cmd = [setpriv, "--pdeathsig", "TERM", "--"] + cmd
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    # Containers often forbid process_vm_readv (vader's single copy): use plain copies.
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    # The ranks of a host share its cores: each gets its share of kernel threads (as one process
    # gives each of its places), unless the user chose. It also makes N ranks of 1 place compute
    # the same bits as 1 process of N places (the kernels' sums depend on their thread count).
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nprocs_per_host)))
    if not (len(hosts) == 1 and is_local(hosts[0])):
        cmd += ["--host", ",".join("%s:%d" % (h, nprocs_per_host) for h in hosts), "--map-by", "slot"]
        for k in sorted(env):
            if k.startswith(_FORWARD_PREFIXES):
                cmd += ["-x", k]
    return cmd


def die_with_parent():
    """In a rank: SIGKILL this process when its parent (mpirun, or a remote host's daemon) dies,
    however it dies — the ranks of a launcher or spawner killed with SIGKILL must not train on
    headless (Linux's PR_SET_PDEATHSIG; elsewhere nothing). A parent already gone: exit now."""
    if not set_parent_death_signal(signal.SIGKILL):
        return
    if os.getppid() == 1:
        os._exit(1)


def write_status(status_dir, kind, rank, text=""):
    """status_dir/<kind>.<rank>: 'start' when the rank runs, 'exit' with its code."""
    if not status_dir:
        return
    try:
        path = os.path.join(status_dir, "%s.%d" % (kind, rank))
        with open(path + ".tmp", "w") as f:
            f.write("%.6f %s\n" % (time.time(), text))
        os.replace(path + ".tmp", path)
    except OSError:
        pass


def _alive(pid, marker):
    """Whether pid runs (not a zombie) a command line containing marker."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                return False
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return marker.encode() in f.read()
    except (OSError, IndexError):
        return False


def reap(status_dir, marker, timeout=5.0):
    """After mpirun has exited: waits up to timeout seconds for this host's
    ranks (the pids of their start files) to be gone, then SIGKILLs any
    left (mpirun may exit while the ranks it signalled are still ending)."""
    host = socket.gethostname()
    pids = []
    for _, text in _read_status(status_dir, "start").values():
        parts = text.split()
        if len(parts) == 2 and parts[1] == host and parts[0].isdigit():
            pids.append(int(parts[0]))
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in pids if _alive(p, marker)]
        if not left:
            return
        if time.monotonic() > deadline:
            for p in left:
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
            return
        time.sleep(0.05)


def started_text():
    """What a rank writes in its start file: its pid and host."""
    return "%d %s" % (os.getpid(), socket.gethostname())


def _read_status(status_dir, kind):
    """{rank: (time, text)} of status_dir's <kind>.N files."""
    out = {}
    try:
        names = os.listdir(status_dir)
    except OSError:
        return out
    for name in names:
        m = re.fullmatch(r"%s\.(\d+)" % kind, name)
        if not m:
            continue
        try:
            with open(os.path.join(status_dir, name)) as f:
                t, _, text = f.read().strip().partition(" ")
            out[int(m.group(1))] = (float(t), text)
        except (OSError, ValueError):
            continue
    return out


_SIGNAL_RE = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)(?: \(([^)]*)\))?")
_EXIT_RE = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(\d+)")


def diagnose(status_dir, nprocs, mpirun_text, returncode):
    """(rank or None, what happened) for a failed job."""
    exits = _read_status(status_dir, "exit")
    failed = sorted((t, r, text) for r, (t, text) in exits.items() if text.split()[:1] != ["0"])
    if failed:
        t, r, text = failed[0]
        code = text.split()[0] if text else "?"
        return r, "rank %d exited with code %s" % (r, code)
    m = _SIGNAL_RE.search(mpirun_text or "")
    if m:
        r, sig, name = int(m.group(1)), int(m.group(2)), m.group(3)
        return r, "rank %d was killed by signal %d%s" % (r, sig, " (%s)" % name if name else "")
    m = _EXIT_RE.search(mpirun_text or "")
    if m:
        r = int(m.group(1))
        return r, "rank %d exited with code %s" % (r, m.group(2))
    started = _read_status(status_dir, "start")
    missing = [r for r in range(nprocs) if r not in started]
    if status_dir and missing and len(missing) < nprocs:
        return missing[0], "rank %d never started" % missing[0]
    if status_dir and len(missing) == nprocs:
        return None, "no rank started (mpirun exit status %d)" % returncode
    return None, "the job failed (mpirun exit status %d)" % returncode


def tail(path, lines=20):
    """The last lines of a text file ('' when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
