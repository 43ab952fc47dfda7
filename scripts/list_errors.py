#!/usr/bin/env python3
"""scripts/list_errors.py — the index of every error message PE can report, from the sources.

What: finds every message the engine and the Python package can raise —
C calls pe_error(), pe_ctx_error(), pe_error_wrap() and raise_msg() (the
Python extension), and Python `raise _core.<Class>(...)` in
bindings/python/pe — and prints them as Markdown, grouped by source file,
each with its status code and the section of docs/guide.md that says what
to do about it. printf / %-format placeholders are shown as `…`.

How: a small scanner over the source text: after the call's opening
parenthesis it skips the first argument (the status code, or the status
being wrapped) and concatenates the adjacent string literals that follow
(C's "a" "b" continuation), so conditional arguments are not mixed into the
message. Messages repeated within a file are listed once.

Why: docs/guide.md §11 groups the messages and explains them; this index
makes the list complete and searchable, and is regenerated instead of
edited by hand:

    scripts/list_errors.py                        # print the index
    scripts/list_errors.py --update docs/guide.md # rewrite the block between the markers
    scripts/list_errors.py --check docs/guide.md  # exit 1 when the block is out of date
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- errors:begin (scripts/list_errors.py) -->", "<!-- errors:end -->"
C_DIRS = ["graph", "runtime", "executor", "passes", "ops", "tools", "bindings/python/pe"]
PY_DIR = "bindings/python/pe"

# Which section of docs/guide.md explains the messages of a source file (first match wins).
SECTIONS = [
    ("graph/program_io.cc", "11.2"), ("graph/check.c", "11.2"), ("graph/program.c", "11.12"),
    ("graph/program_dot.c", "11.7"), ("graph/ssa_graph.c", "11.7"), ("graph/checkpoint.c", "11.11"),
    ("passes/backward.c", "11.4"), ("passes/optimizer.c", "11.4"), ("passes/initializer.c", "11.4"),
    ("passes/", "11.7"),
    ("executor/executor.c", "11.5"), ("executor/nan_inf.c", "11.8"), ("executor/eager.c", "11.8"), ("executor/parallel_executor.c", "11.7"), ("executor/", "11.7"),
    ("ops/registry.c", "11.6"), ("ops/grad.c", "11.4"), ("ops/cpu/dnnl_util.c", "11.10"), ("ops/", "11.8"),
    ("runtime/comm/", "11.9"), ("runtime/cuda/", "11.10"), ("runtime/npy.c", "11.11"),
    ("runtime/safetensors.c", "11.11"), ("runtime/alloc.c", "11.11"), ("runtime/", "11.12"),
    ("tools/", "8 and docs/cli.md"),
    ("bindings/python/pe/static/executor.py", "11.7"), ("bindings/python/pe/static/io.py", "11.11"),
    ("bindings/python/pe/distributed/", "11.9"), ("bindings/python/pe/core_dist.c", "11.9"),
    ("bindings/python/pe/_core.c", "11.5"), ("bindings/python/pe/core_eager.c", "11.8"), ("bindings/python/pe/core_", "11.5"),
    ("bindings/python/pe/", "11.3"),
]

C_CALL = re.compile(r"\b(pe_error|pe_ctx_error|pe_error_wrap|raise_msg)\s*\(")
PY_CALL = re.compile(r"\braise\s+_core\.([A-Za-z]+Error)\s*\(")
C_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')
C_FMT = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t)?[diouxXeEfgGcsp]|%%")
PY_FMT = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[diouxXeEfgGcsrp]")
STATUS = re.compile(r"PE_ERR_([A-Z_]+)")
# pe.Error subclasses (bindings/python/pe/_core.c) -> the status names used for C messages.
PY_STATUS = {"InvalidArgumentError": "INVALID", "NotFoundError": "NOT_FOUND", "IOError": "IO",
             "FormatError": "FORMAT", "ResourceExhaustedError": "NOMEM", "UnsupportedError": "UNSUPPORTED",
             "DeviceError": "DEVICE", "CancelledError": "CANCELLED", "InternalError": "INTERNAL"}


def section(path):
    for prefix, sec in SECTIONS:
        if path.startswith(prefix):
            return sec
    return "11"


def skip_arg(src, i):
    """Index just past the first argument starting at src[i] (at the comma), or -1."""
    depth = 0
    while i < len(src):
        c = src[i]
        if c == '"':
            i += 1
            while i < len(src) and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return -1
            depth -= 1
        elif c == "," and depth == 0:
            return i + 1
        i += 1
    return -1


def c_messages(path, src):
    for m in C_CALL.finditer(src):
        start = m.end()
        j = skip_arg(src, start)
        if j < 0:
            continue
        first_arg = src[start:j]
        code = STATUS.search(first_arg)
        status = code.group(1) if code else "(wrapped)"
        # adjacent string literals right after the first argument
        parts, k = [], j
        while True:
            while k < len(src) and src[k] in " \t\r\n":
                k += 1
            lit = C_STR.match(src, k)
            if not lit:
                break
            parts.append(lit.group(1))
            k = lit.end()
        if not parts:
            continue
        msg = "".join(parts)
        msg = C_FMT.sub(lambda f: "%" if f.group(0) == "%%" else "…", msg)
        msg = msg.replace('\\"', '"').replace("\\\\", "\\").replace("\\n", " ")
        if msg.strip(" …:") == "":
            continue  # pure context wrapper ("%s", "%s: %s")
        yield src.count("\n", 0, m.start()) + 1, status, msg


def py_messages(path, src):
    for m in PY_CALL.finditer(src):
        k = m.end()
        parts = []
        while True:
            while k < len(src) and src[k] in " \t\r\n":
                k += 1
            lit = re.compile(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'').match(src, k)
            if not lit:
                break
            parts.append(lit.group(1) if lit.group(1) is not None else lit.group(2))
            k = lit.end()
        if not parts:
            continue
        msg = PY_FMT.sub("…", "".join(parts)).replace("%%", "%")
        yield src.count("\n", 0, m.start()) + 1, PY_STATUS.get(m.group(1), m.group(1)), msg


def collect():
    files = []
    for d in C_DIRS:
        for dp, dn, fn in os.walk(os.path.join(ROOT, d)):
            dn.sort()
            for f in sorted(fn):
                if f.endswith((".c", ".h", ".cc", ".cu")):
                    files.append(os.path.join(dp, f))
    for dp, dn, fn in os.walk(os.path.join(ROOT, PY_DIR)):
        dn.sort()
        files += [os.path.join(dp, f) for f in sorted(fn) if f.endswith(".py")]
    out = []
    for p in sorted(set(files)):
        rel = os.path.relpath(p, ROOT)
        with open(p, encoding="utf-8", errors="replace") as f:
            src = f.read()
        gen = py_messages(rel, src) if p.endswith(".py") else c_messages(rel, src)
        seen, msgs = set(), []
        for line, status, msg in gen:
            if msg in seen:
                continue
            seen.add(msg)
            msgs.append((line, status, msg))
        if msgs:
            out.append((rel, msgs))
    return out


def render():
    files = collect()
    n = sum(len(m) for _, m in files)
    lines = [BEGIN, "",
             "%d messages in %d source files (generated by `scripts/list_errors.py`; `…` stands for a value "
             "filled in at run time; (wrapped) = context put in front of an inner message)." % (n, len(files)), ""]
    for rel, msgs in files:
        lines.append("- `%s` — what to do: §%s" % (rel, section(rel)))
        for line, status, msg in msgs:
            lines.append("  - %s: `%s`" % (status, msg.replace("`", "'")))
    lines += ["", END]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description="Index of PE's error messages, from the sources.")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--update", metavar="GUIDE", help="rewrite the generated block of GUIDE")
    g.add_argument("--check", metavar="GUIDE", help="exit 1 when GUIDE's generated block is out of date")
    args = ap.parse_args(argv)
    text = render()
    if not (args.update or args.check):
        sys.stdout.write(text)
        return 0
    path = args.update or args.check
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    b, e = doc.find(BEGIN), doc.find(END)
    if b < 0 or e < b:
        print("list_errors: %s has no %s ... %s block" % (path, BEGIN, END), file=sys.stderr)
        return 2
    new = doc[:b] + text.rstrip("\n") + doc[e + len(END):]
    if args.check:
        if new != doc:
            print("list_errors: the message index in %s is out of date: run scripts/list_errors.py --update %s"
                  % (path, path), file=sys.stderr)
            return 1
        return 0
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
