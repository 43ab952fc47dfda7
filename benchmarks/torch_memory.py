#!/usr/bin/python3
"""benchmarks/torch_memory.py — PyTorch's peak memory for the training runs
of bench_memory.c (the same models, batch, optimizer and dtype).

    OMP_NUM_THREADS=1 /usr/bin/python3 benchmarks/torch_memory.py [mlp|cnn|all] [--batch 128] [--steps 8]
    OMP_NUM_THREADS=1 PYTHONMALLOC=malloc LD_PRELOAD=build/lib/libpe_heap_count.so \
        /usr/bin/python3 benchmarks/torch_memory.py --heap [mlp|cnn|all] [--batch 128] [--steps 8]

The models are examples/mlp_train.pe and cnn_train.pe written in torch:

  mlp  784 -> fc 512 relu -> fc 256 relu -> fc 10, softmax cross entropy
  cnn  conv5x5(8, pad 2)+bias relu maxpool2 -> conv5x5(16, pad 2)+bias relu
       maxpool2 -> flatten 784 -> fc 64 relu -> fc 10, softmax cross entropy

float32, SGD with momentum 0.9 (lr 0.01), grads set to None between steps
(PyTorch 2's default; the peak is at the end of backward either way).

How memory is measured: torch.profiler with profile_memory=True records
every allocation and free of PyTorch's CPU allocator (c10) as a kineto
memory event with its byte count; summing them in time order gives the
bytes in use over the run. The profile starts before the model is built
(the batch tensors are made before it, as bench_memory makes its feeds
before its measurement), so

  run_peak_bytes   peak over the run: parameters, momentum buffers,
                   gradients, activations — what bench_memory.c's
                   run_peak_bytes counts for PE (pe_alloc_get_stats);
  step_peak_bytes  peak during the steps above what was in use before the
                   first step (the parameters).

Like PE's counters, this counts the framework's tensor allocations, not
scratch that oneDNN / MKL allocate inside a kernel.

--heap measures the whole process's heap instead, without the profiler:
benchmarks/heap_count.c, preloaded, counts every malloc of the process
(PyTorch's tensors, oneDNN's and MKL's buffers, the interpreter's objects
with PYTHONMALLOC=malloc), as bench_memory's heap_* figures do for PE.
From just before the model is built (the batch made before):

  heap_run_peak_bytes  the peak of live heap bytes over the run;
  heap_held_bytes      live heap bytes after the steps.

Prints key=value lines.
"""
import argparse
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def build(model):
    nn = torch.nn
    if model == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    return nn.Sequential(
        nn.Conv2d(1, 8, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))


def measure(model, batch, steps):
    torch.manual_seed(0)
    x = torch.rand(batch, 784) if model == "mlp" else torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    marks = {}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with torch.profiler.record_function("build"):
            net = build(model)
            opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        for i in range(steps):
            with torch.profiler.record_function("step%d" % i):
                opt.zero_grad(set_to_none=True)
                loss = torch.nn.functional.cross_entropy(net(x), y)
                loss.backward()
                opt.step()
    events = prof.profiler.kineto_results.events()
    for e in events:
        if e.name() == "step0":
            marks["steps_start"] = e.start_us()
    mem = sorted((e.start_us(), e.nbytes()) for e in events if e.name() == "[memory]")
    cur = run_peak = 0
    before_steps = None
    step_peak = 0
    for t, nb in mem:
        if before_steps is None and t >= marks["steps_start"]:
            before_steps = cur
        cur += nb
        run_peak = max(run_peak, cur)
        if before_steps is not None:
            step_peak = max(step_peak, cur - before_steps)
    return run_peak, step_peak, len(mem)


def measure_heap(model, batch, steps):
    import ctypes
    lib = ctypes.CDLL(None)
    try:
        live, peak, reset = lib.pe_heap_live, lib.pe_heap_peak, lib.pe_heap_reset_peak
    except AttributeError:
        sys.exit("torch_memory.py --heap: run with LD_PRELOAD=build/lib/libpe_heap_count.so")
    live.restype = peak.restype = ctypes.c_int64
    torch.manual_seed(0)
    x = torch.rand(batch, 784) if model == "mlp" else torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    heap0 = live()
    reset()
    net = build(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    return peak() - heap0, live() - heap0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="all", choices=["mlp", "cnn", "all"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--heap", action="store_true", help="the whole process's heap (LD_PRELOAD heap_count)")
    a = ap.parse_args()
    for m in ("mlp", "cnn"):
        if a.model not in ("all", m):
            continue
        if a.heap:
            peak, held = measure_heap(m, a.batch, a.steps)
            print("model=%s framework=torch-%s batch=%d heap_run_peak_bytes=%d heap_held_bytes=%d"
                  % (m, torch.__version__, a.batch, peak, held))
            sys.stdout.flush()
            continue
        run_peak, step_peak, n = measure(m, a.batch, a.steps)
        print("model=%s framework=torch-%s batch=%d run_peak_bytes=%d step_peak_bytes=%d memory_events=%d"
              % (m, torch.__version__, a.batch, run_peak, step_peak, n))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
