#!/usr/bin/env python3
"""benchmarks/bench_pserver.py — parameter-server mode: bytes per trainer per second, and the MLP vs collective mode.

What:
  (a) --bench transport: a 10M-parameter model whose compute is negligible
      (x [B, 2500] -> fc 4000 with bias, loss = mean, SGD; B = 2 rows per
      trainer by default) trained in sync mode by 1 pserver (`pe pserver`,
      the CLI, on the saved pserver program) + 2 trainers (Python,
      fluid.Executor on the transpiled trainer program), over loopback.
      Reported per trainer: bytes moved per second = (gradient bytes sent +
      parameter bytes received) x timed steps / wall time of the timed steps
      (the first --warmup steps excluded). Target >= 1 GB/s (10^9 B/s).
      With --split each trainer then runs a few more steps with its trainer
      program cut in four programs run back to back (compute: forward +
      backward; send; send_barrier: waits for the other trainer and the
      server's sum + update; recv + fetch_barrier), timing each part.
  (b) --bench mlp: the main job's MLP (784-512-256-10, relu, softmax cross
      entropy, Momentum 0.9 lr 0.05; global batch 128, Fashion-MNIST's
      training images in a fixed shuffled order when
      /usr/share/datasets/fashion-mnist has them, else synthetic data)
      trained (1) in pserver mode, 1 pserver + 2 trainers, sync, each
      trainer feeding its half of every batch, and (2) in collective mode
      on 2 processes (`mpirun -np 2`, ParallelExecutor(num_trainers=2,
      trainer_id=rank), CPU_NUM=1), the same global batch and steps.
      Reported: global samples/s (trainer 0's timed steps) of each and the
      ratio pserver / collective; the modes alternate within each round.
Every process runs with OMP_NUM_THREADS=1 (unless --threads) and a time
limit, and is killed in a finally; loopback only (127.0.0.1).

    PYTHONPATH=build/python PE_BIN_DIR=build/bin /usr/bin/python3 benchmarks/bench_pserver.py --bench transport
    PYTHONPATH=build/python PE_BIN_DIR=build/bin /usr/bin/python3 benchmarks/bench_pserver.py --bench mlp --rounds 3
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TRAINERS = 2
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
WIDE_IN, WIDE_OUT = 2500, 4000
MLP_BATCH, MLP_LR, MLP_MOMENTUM = 128, 0.05, 0.9


def import_pe():
    try:
        import pe
    except ImportError:
        sys.path.insert(0, os.path.join(ROOT, os.environ.get("PE_BUILD_DIR", "build"), "python"))
        import pe
    return pe


def pe_bin():
    return os.path.join(os.environ.get("PE_BIN_DIR", os.path.join(ROOT, "build", "bin")), "pe")


# ---- models and data -----------------------------------------------------------------------------

def build(model):
    """(main, startup, loss, feed names) of 'wide' (10M parameters) or 'mlp'."""
    pe = import_pe()
    import pe.fluid as fluid
    from pe.utils import unique_name
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup), unique_name.guard():
        if model == "wide":
            x = fluid.layers.data(name="x", shape=[WIDE_IN], dtype="float32")
            loss = fluid.layers.mean(fluid.layers.fc(x, WIDE_OUT))
            fluid.optimizer.SGD(learning_rate=1e-4).minimize(loss)
            return main, startup, loss, ["x"]
        image = fluid.layers.data(name="image", shape=[784], dtype="float32")
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        h = fluid.layers.fc(image, 512, act="relu")
        h = fluid.layers.fc(h, 256, act="relu")
        logits = fluid.layers.fc(h, 10)
        loss = fluid.layers.mean(pe.nn.functional.cross_entropy(logits, label))
        fluid.optimizer.Momentum(learning_rate=MLP_LR, momentum=MLP_MOMENTUM).minimize(loss)
        return main, startup, loss, ["image", "label"]


def batches(model, n, rows):
    """n global batches (the same in every process): fixed seed."""
    rng = np.random.RandomState(0)
    if model == "wide":
        x = rng.standard_normal((rows, WIDE_IN)).astype(np.float32)
        return [{"x": x}] * n
    try:  # the main job's data when it is there (the batches of compare_peers.py / bench_trainers.py)
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        import train_fashion_mnist as job
        x, y = job.load_fashion_mnist("train")
        order = np.random.RandomState(0).permutation(len(x))
        return [{"image": x[order[(i * rows + np.arange(rows)) % len(x)]],
                 "label": y[order[(i * rows + np.arange(rows)) % len(x)]]} for i in range(n)]
    except (ImportError, OSError, SystemExit):
        pass
    k = 8  # synthetic: distinct batches, cycled
    w = rng.standard_normal((784, 10)).astype(np.float32)
    out = []
    for _ in range(k):
        x = rng.uniform(0, 1, (rows, 784)).astype(np.float32)
        y = np.argmax(x @ w + rng.standard_normal((rows, 10)), axis=1).astype(np.int64).reshape(-1, 1)
        out.append({"image": x, "label": y})
    return [out[i % k] for i in range(n)]


def shard(feed, rank, n):
    """Trainer rank's rows of every feed (the last trainers take the extra rows)."""
    out = {}
    for k, v in feed.items():
        base, extra = divmod(len(v), n)
        lo = rank * base + max(0, rank - (n - extra))
        out[k] = v[lo:lo + base + (1 if rank >= n - extra else 0)]
    return out


def param_bytes(main):
    return sum(int(np.prod(p.shape)) * 4 for p in main.all_parameters())


# ---- workers ----------------------------------------------------------------------------------------

def write_pserver(model, ep, out_dir):
    """Transpiles for 1 pserver at ep and TRAINERS trainers; saves the pserver program and its startup."""
    pe = import_pe()
    import pe.fluid as fluid
    main, startup, _, _ = build(model)
    t = fluid.DistributeTranspiler()
    t.transpile(trainer_id=0, program=main, pservers=ep, trainers=TRAINERS, startup_program=startup)
    ps = t.get_pserver_program(ep)
    paths = os.path.join(out_dir, "pserver.pe"), os.path.join(out_dir, "pserver_startup.pe")
    pe.static.save_program(ps, paths[0])
    pe.static.save_program(t.get_startup_program(ep, ps), paths[1])
    return paths


def split_programs(prog):
    """The trainer program cut in four at its RPC ops: compute | send | send_barrier | recv + fetch_barrier.
    Every var is made persistable so the parts see each other's values through the scope."""
    parts = []
    ops = [op.type for op in prog.global_block().ops]
    first_send = ops.index("send") if "send" in ops else ops.index("split")
    sb = ops.index("send_barrier")
    bounds = [(0, first_send), (first_send, sb), (sb, sb + 1), (sb + 1, len(ops))]
    for lo, hi in bounds:
        p = prog.clone()
        g = p.global_block()
        for i in range(len(g.ops) - 1, -1, -1):
            if not lo <= i < hi:
                g._remove_op(i)
        for v in g.vars.values():
            if not v.name.endswith("@EMPTY@"):
                v.persistable = True
        parts.append(p)
    return parts


def merge_rpc(prog):
    """Experiment: the trainer program's send ops merged into one (all gradients, then one wait for every
    receipt) and its recv ops into one (every GET in flight at once), in place of one round trip per var."""
    g = prog.global_block()
    for kind, xs, names in (("send", "X", "send_varnames"), ("recv", "Out", "varnames")):
        idx = [i for i, op in enumerate(g.ops) if op.type == kind]
        if len(idx) < 2:
            continue
        ops = [g.ops[i] for i in idx]
        slots = {xs: [a for op in ops for a in (op.input(xs) if kind == "send" else op.output(xs))]}
        attrs = {k: ops[0].attr(k) for k in ops[0].attr_names}
        attrs["epmap"] = [e for op in ops for e in op.attr("epmap")]
        attrs[names] = [n for op in ops for n in op.attr(names)]
        for i in reversed(idx[1:]):
            g._remove_op(i)
        g._remove_op(idx[0])
        g._insert_op(idx[0], type=kind, inputs=slots if kind == "send" else {}, outputs={} if kind == "send" else slots,
                     attrs=attrs)
    return prog


def worker_ps_trainer(model, ep, tid, warmup, steps, rows, split_steps, merge=False):
    import_pe()
    import pe.fluid as fluid
    main, startup, loss, _ = build(model)
    nbytes = 2 * param_bytes(main)  # gradients sent + parameters received
    t = fluid.DistributeTranspiler()
    t.transpile(trainer_id=tid, program=main, pservers=ep, trainers=TRAINERS, startup_program=startup)
    prog = t.get_trainer_program()
    if merge:
        prog = merge_rpc(prog)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    data = [shard(b, tid, TRAINERS) for b in batches(model, warmup + steps, rows)]
    losses, times = [], []
    for i, feed in enumerate(data):
        t0 = time.perf_counter()
        lv, = exe.run(prog, feed=feed, fetch_list=[loss])
        times.append(time.perf_counter() - t0)
        losses.append(float(np.asarray(lv).reshape(-1)[0]))
        if i == warmup - 1:
            t_start = time.perf_counter()
    secs = time.perf_counter() - t_start
    res = {"trainer": tid, "steps": steps, "secs": secs, "bytes_per_step": nbytes,
           "bytes_per_s": nbytes * steps / secs, "samples_per_s": rows * steps / secs,
           "step_ms_median": 1e3 * statistics.median(times[warmup:]), "loss_first": losses[0],
           "loss_last": losses[-1]}
    if split_steps:
        parts = split_programs(prog)
        names = ["compute", "send", "send_barrier", "recv+fetch_barrier"]
        acc = {k: [] for k in names}
        feed = data[-1]
        for _ in range(split_steps):
            for k, p in zip(names, parts):
                t0 = time.perf_counter()
                exe.run(p, feed=feed if k == "compute" else None)
                acc[k].append(time.perf_counter() - t0)
        res["split_ms"] = {k: 1e3 * statistics.median(v[1:] if len(v) > 2 else v) for k, v in acc.items()}
    exe.close()
    return res


def worker_ps_server(prog_path, startup_path):
    """A pserver in Python: the saved programs run by fluid.Executor (what dist_train.py's pservers do)."""
    pe = import_pe()
    import pe.fluid as fluid
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(pe.static.load_program(startup_path))
    exe.run(pe.static.load_program(prog_path))
    return 0


def worker_collective(model, warmup, steps, rows):
    pe = import_pe()
    rank, n = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    main, startup, loss, _ = build(model)
    scope = pe.static.Scope()
    pe.static.Executor(pe.CPUPlace()).run(startup, scope=scope)
    exe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope, num_trainers=n,
                                     trainer_id=rank)
    data = [shard(b, rank, n) for b in batches(model, warmup + steps, rows)]
    losses = []
    for i, feed in enumerate(data):
        lv, = exe.run(fetch_list=[loss.name], feed=feed)
        losses.append(float(np.mean(lv)))
        if i == warmup - 1:
            t_start = time.perf_counter()
    secs = time.perf_counter() - t_start
    if rank != 0:
        return None
    return {"samples_per_s": rows * steps / secs, "secs": secs, "loss_first": losses[0], "loss_last": losses[-1]}


# ---- orchestration ----------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(threads):
    e = dict(os.environ, OMP_NUM_THREADS=str(threads), CPU_NUM="1")
    for k in list(e):
        if k.startswith("PADDLE_") or k.startswith("OMPI_"):
            e.pop(k)
    return e


def kv(items):
    """["K=V", ...] -> {K: V}"""
    return dict(x.split("=", 1) for x in items or [])


def last_json(out):
    return json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])


def run_pserver_mode(args, model, rows, warmup, steps, split_steps=0):
    """1 `pe pserver` + TRAINERS trainer processes; returns (the trainers' results, the pserver's stderr)."""
    ep = "127.0.0.1:%d" % free_port()
    procs = []
    with tempfile.TemporaryDirectory(prefix="pe-bench-ps-") as tmp:
        prog, start = write_pserver(model, ep, tmp)
        try:
            srv_cmd = [pe_bin(), "pserver", prog, "--startup", start, "--endpoint", ep, "--threads", str(args.threads)]
            if args.python_pserver:
                srv_cmd = [sys.executable, os.path.abspath(__file__), "--worker", "ps_server", "--model", prog,
                           "--ep", start]
            if args.perf:
                srv_cmd = ["perf", "record", "-g", "-o", args.perf, "--"] + srv_cmd
            srv = subprocess.Popen(srv_cmd, env=dict(base_env(args.threads), **kv(args.pserver_env)),
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            procs.append(srv)
            for tid in range(TRAINERS):
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", "ps_trainer", "--model", model,
                       "--ep", ep, "--tid", str(tid), "--warmup", str(warmup), "--steps", str(steps), "--rows",
                       str(rows), "--split", str(split_steps)] + (["--merge-rpc"] if args.merge_rpc else [])
                procs.append(subprocess.Popen(cmd, env=dict(base_env(args.threads), **kv(args.trainer_env)),
                                              stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True))
            deadline = time.monotonic() + args.timeout
            outs = []
            for p in procs[1:] + procs[:1]:
                o, e = p.communicate(timeout=max(1, deadline - time.monotonic()))
                if p.returncode != 0:
                    raise SystemExit("bench_pserver: %s failed (exit %d):\n%s\n%s" % (
                        "pe pserver" if p is srv else "a trainer", p.returncode, o[-2000:], e[-4000:]))
                outs.append((o, e))
            return [last_json(o) for o, _ in outs[:TRAINERS]], outs[-1][1]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()


def run_collective_mode(args, model, rows, warmup, steps):
    env = dict(base_env(args.threads), **MPI_ENV)
    cmd = ["mpirun", "--oversubscribe", "-np", str(TRAINERS), "--mca", "btl", "self,vader", "-x", "CPU_NUM", "-x",
           "OMP_NUM_THREADS", "-x", "PYTHONPATH", sys.executable, os.path.abspath(__file__), "--worker", "collective",
           "--model", model, "--warmup", str(warmup), "--steps", str(steps), "--rows", str(rows)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        o, e = p.communicate(timeout=args.timeout)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    if p.returncode != 0:
        raise SystemExit("bench_pserver: mpirun -np %d failed (exit %d):\n%s\n%s" % (TRAINERS, p.returncode,
                                                                                   o[-2000:], e[-4000:]))
    return last_json(o)


def bench_transport(args):
    rows = args.rows or 2 * TRAINERS
    warmup, steps = args.warmup or 3, args.steps or 20
    per_round = []
    for r in range(args.rounds):
        res, log = run_pserver_mode(args, "wide", rows, warmup, steps, args.split)
        per_round.append(res)
        print("round %d/%d, load %.1f: %s" % (r + 1, args.rounds, os.getloadavg()[0], "; ".join(
            "trainer %d %.3f GB/s (step %.1f ms median, loss %.4g -> %.4g)%s" % (
                q["trainer"], q["bytes_per_s"] / 1e9, q["step_ms_median"], q["loss_first"], q["loss_last"],
                " split ms: " + ", ".join("%s %.1f" % kv for kv in q["split_ms"].items()) if "split_ms" in q else "")
            for q in res)), flush=True)
    q0 = per_round[0][0]
    all_bps = [q["bytes_per_s"] for res in per_round for q in res]
    print("\n10M-parameter sync step, 1 pserver + %d trainers over loopback: %d parameters, %.1f MB moved per "
          "trainer per step (gradients sent + parameters received), %d rows per trainer, %d timed steps after %d"
          % (TRAINERS, q0["bytes_per_step"] // 8, q0["bytes_per_step"] / 1e6, rows // TRAINERS, steps, warmup))
    print("bytes per trainer per second: median %.3f GB/s (min %.3f, max %.3f over %d trainer runs); target >= 1 GB/s"
          % (statistics.median(all_bps) / 1e9, min(all_bps) / 1e9, max(all_bps) / 1e9, len(all_bps)))


def bench_mlp(args):
    warmup, steps = args.warmup or 20, args.steps or 150
    rows = args.rows or MLP_BATCH
    res = {"pserver": [], "collective": []}
    for r in range(args.rounds):
        order = ["pserver", "collective"] if r % 2 == 0 else ["collective", "pserver"]
        for mode in order:
            if mode == "pserver":
                q, _ = run_pserver_mode(args, "mlp", rows, warmup, steps, args.split)
                if "split_ms" in q[0]:
                    print("pserver mode, trainer 0, ms per step: " + ", ".join("%s %.2f" % kv for kv in q[0]["split_ms"].items()))
                res[mode].append({"samples_per_s": rows * steps / q[0]["secs"], "loss_last": q[0]["loss_last"]})
            else:
                res[mode].append(run_collective_mode(args, "mlp", rows, warmup, steps))
        print("round %d/%d, load %.1f: pserver %.0f samples/s (loss %.4f), collective %.0f samples/s (loss %.4f), "
              "ratio %.2f" % (r + 1, args.rounds, os.getloadavg()[0], res["pserver"][-1]["samples_per_s"],
                              res["pserver"][-1]["loss_last"], res["collective"][-1]["samples_per_s"],
                              res["collective"][-1]["loss_last"],
                              res["pserver"][-1]["samples_per_s"] / res["collective"][-1]["samples_per_s"]),
              flush=True)
    med = {k: statistics.median(x["samples_per_s"] for x in v) for k, v in res.items()}
    print("\nMLP 784-512-256-10, global batch %d, %d timed steps after %d, %d trainers: pserver mode %.0f samples/s, "
          "collective mode %.0f samples/s (medians of %d rounds), pserver / collective %.2f"
          % (rows, steps, warmup, TRAINERS, med["pserver"], med["collective"], args.rounds,
             med["pserver"] / med["collective"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", choices=["transport", "mlp", "all"], default="all")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=0, help="untimed steps (default: transport 3, mlp 20)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: transport 20, mlp 150)")
    ap.add_argument("--rows", type=int, default=0, help="global rows per step (default: transport 4, mlp 128)")
    ap.add_argument("--split", type=int, default=0, help="pserver mode: time the parts of N more steps")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every process, pe pserver --threads")
    ap.add_argument("--timeout", type=float, default=300, help="seconds any one mode may take")
    ap.add_argument("--perf", default="", help="transport: run the pserver under perf record -g -o PATH")
    ap.add_argument("--pserver-env", action="append", metavar="K=V", help="an environment variable of the pserver")
    ap.add_argument("--trainer-env", action="append", metavar="K=V", help="an environment variable of the trainers")
    ap.add_argument("--merge-rpc", action="store_true",
                    help="experiment: one send op and one recv op per trainer step instead of one per variable")
    ap.add_argument("--python-pserver", action="store_true",
                    help="run the pserver as Python (fluid.Executor on the saved programs) instead of `pe pserver`")
    ap.add_argument("--worker", choices=["ps_trainer", "ps_server", "collective"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--ep", help=argparse.SUPPRESS)
    ap.add_argument("--tid", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "ps_trainer":
        print(json.dumps(worker_ps_trainer(args.model, args.ep, args.tid, args.warmup, args.steps, args.rows,
                                           args.split, args.merge_rpc)), flush=True)
        return 0
    if args.worker == "ps_server":
        return worker_ps_server(args.model, args.ep)
    if args.worker == "collective":
        res = worker_collective(args.model, args.warmup, args.steps, args.rows)
        if res is not None:
            print(json.dumps(res), flush=True)
        return 0
    if not os.path.exists(pe_bin()):
        raise SystemExit("bench_pserver: %s not found (set PE_BIN_DIR or build into build/)" % pe_bin())
    if args.bench in ("transport", "all"):
        bench_transport(args)
    if args.bench in ("mlp", "all"):
        bench_mlp(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
