#!/usr/bin/python3
"""scripts/make_train_examples.py — writes the training programs in examples/.

    /usr/bin/python3 scripts/make_train_examples.py [--build build] [--check]

For mlp and cnn it loads <model>_forward.pe (the forward pass with its
loss, written by scripts/make_examples.py) and <model>_forward_startup.pe,
appends the backward pass and one momentum op per parameter (lr 0.01,
mu 0.9) with PE's own minimize (pe._core.minimize: append_backward, then
the optimizer ops; the velocities get fill_constant 0 in the startup), and
writes

  examples/<model>_train.json / .pe          forward + backward + momentum
  examples/<model>_startup.json / .pe  parameters + velocities

These are the programs `pe plan` and the memory benchmarks
(benchmarks/bench_memory.c) use. --check regenerates into a temporary
directory and fails when the committed files differ (what the script
writes is what is committed).

The pe Python package comes from the build directory (--build, default
$PE_BUILD_DIR or <repo>/build): <build>/python/pe.
"""
import argparse
import filecmp
import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, "examples")
MODELS = ("mlp", "cnn")
LR, MU = 0.01, 0.9


def load_core(build):
    sys.path.insert(0, os.path.join(build, "python"))
    try:
        from pe import _core  # noqa: E402
    except ImportError as e:
        sys.exit("make_train_examples: cannot import the pe package from %s/python (%s): build PE first"
                 % (build, e))
    return _core


def write(core, model, out_dir):
    main = core.load_program(os.path.join(EXAMPLES, model + "_forward.pe"))
    startup = core.load_program(os.path.join(EXAMPLES, model + "_forward_startup.pe"))
    pairs = core.minimize(main, startup, "loss", kind="momentum", learning_rate=LR, momentum=MU)
    if not pairs:
        sys.exit("make_train_examples: %s: minimize found no parameters" % model)
    for prog, name in ((main, model + "_train"), (startup, model + "_startup")):
        for ext in (".json", ".pe"):
            prog.save(os.path.join(out_dir, name + ext))
    return len(pairs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.environ.get("PE_BUILD_DIR", os.path.join(REPO, "build")))
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing")
    a = ap.parse_args()
    core = load_core(a.build)
    if not a.check:
        for m in MODELS:
            n = write(core, m, EXAMPLES)
            print("examples/%s_train.{json,pe}: %d parameters with momentum" % (m, n))
        return
    with tempfile.TemporaryDirectory() as tmp:
        bad = []
        for m in MODELS:
            write(core, m, tmp)
            for f in sorted(os.listdir(tmp)):
                if f.startswith(m + "_") and not filecmp.cmp(os.path.join(tmp, f), os.path.join(EXAMPLES, f), False):
                    bad.append(f)
        if bad:
            sys.exit("make_train_examples: examples differ from what the script writes: %s" % ", ".join(bad))
        print("examples/*_train*: up to date")


if __name__ == "__main__":
    main()
