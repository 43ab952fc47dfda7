"""Helpers of tests/python/test_pserver.py: start the processes of a
parameter-server job (pservers and trainers, each its own /usr/bin/python3)
on loopback addresses and free ports, wait for them under a hard time limit,
and kill every one of them whatever happens.

    with Cluster(tmp_path) as c:
        port = c.port("127.0.0.1", "127.0.0.2")
        ps = c.start("ps0", [script, cfg_file])
        ...
        c.wait([ps, tr0, tr1], timeout=60)   # fails the test (after killing all) past the limit

Each process writes its stdout / stderr to files in tmp_path (read with
.out() / .err()), runs in its own session (killed as a process group) with
OMP_NUM_THREADS=1 and the test's PYTHONPATH plus the directory `pe` was
imported from.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import pe

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
NODE = os.path.join(HERE, "ps_scripts", "ps_node.py")
PE_PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(pe.__file__)))

_next_port = [None]


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port(*hosts):
    """A port free on every one of `hosts` (127.0.0.x), below the ephemeral
    range (so no outgoing connection of this test takes it meanwhile), from a
    range that depends on this process's id (tests run in parallel in other
    processes pick other ranges)."""
    hosts = hosts or ("127.0.0.1",)
    low, span = 20000, max(1000, min(_ephemeral_low(), 32768) - 20000 - 1)
    if _next_port[0] is None:
        _next_port[0] = (os.getpid() * 97) % span
    for _ in range(span):
        port = low + _next_port[0] % span
        _next_port[0] += 1
        if all(_bindable(h, port) for h in hosts):
            return port
    raise RuntimeError("no free port on %s" % (hosts,))


def child_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_") and not k.startswith("PE_PS_")}
    pp = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = PE_PYTHONPATH + (os.pathsep + pp if pp else "")
    env.update({"OMP_NUM_THREADS": "1", "CPU_NUM": "1", "PYTHONUNBUFFERED": "1",
                # a job that goes wrong fails in seconds, not the defaults' minutes
                "PE_PS_CONNECT_TIMEOUT": "30", "PE_PS_TRAINER_WAIT": "40", "PE_PS_TIMEOUT": "60"})
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Proc:
    def __init__(self, name, popen, out_path, err_path, t0):
        self.name, self.p, self.out_path, self.err_path, self.t0 = name, popen, out_path, err_path, t0
        self.ended = None  # monotonic time it was seen ended

    def _read(self, path):
        try:
            with open(path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def out(self):
        return self._read(self.out_path)

    def err(self):
        return self._read(self.err_path)

    @property
    def rc(self):
        return self.p.poll()

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def report(self):
        return "=== %s (rc=%s, %.1f s)\n--- stdout\n%s--- stderr\n%s" % (
            self.name, self.p.poll(), (self.ended or time.monotonic()) - self.t0, self.out()[-4000:],
            self.err()[-6000:])


class Cluster:
    def __init__(self, tmp_path):
        self.dir = str(tmp_path)
        self.procs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill_all()
        return False

    def port(self, *hosts):
        return free_port(*hosts)

    def start(self, name, args, env=None, **extra_env):
        out = os.path.join(self.dir, name + ".out")
        err = os.path.join(self.dir, name + ".err")
        with open(out, "wb") as fo, open(err, "wb") as fe:
            p = subprocess.Popen([PY] + list(args), stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                 env=env or child_env(**extra_env), cwd=self.dir, start_new_session=True)
        proc = Proc(name, p, out, err, time.monotonic())
        self.procs.append(proc)
        return proc

    def node(self, name, cfg, **extra_env):
        """Starts ps_node.py with cfg (written to NAME.json)."""
        path = os.path.join(self.dir, name + ".json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return self.start(name, [NODE, path], **extra_env)

    def report(self, procs=None):
        return "\n".join(p.report() for p in (procs or self.procs))

    def kill_all(self):
        for p in self.procs:
            p.kill()

    def wait(self, procs, timeout):
        """Waits until every proc ended; past timeout seconds kills all of
        this cluster's processes and fails the test with their logs."""
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            for p in procs:
                if p.ended is None and p.p.poll() is not None:
                    p.ended = now
            if all(p.ended is not None for p in procs):
                return
            if now > deadline:
                self.kill_all()
                pytest.fail("not ended within %d s: %s\n%s" % (
                    timeout, ", ".join(p.name for p in procs if p.ended is None), self.report()))
            time.sleep(0.02)

    def wait_for(self, cond, timeout, what):
        """Polls cond() until true; fails (after killing all) past timeout."""
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                self.kill_all()
                pytest.fail("%s: not within %d s\n%s" % (what, timeout, self.report()))
            for p in self.procs:
                if p.ended is None and p.p.poll() is not None:
                    p.ended = time.monotonic()
            time.sleep(0.02)


def lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except OSError:
        return []
