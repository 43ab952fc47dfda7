"""tests/python/test_api_checkpoint.py — pe.static.save / load and program files.

save() writes every persistable (parameters, optimizer accumulators, the
learning rate, dropout step counters) as safetensors plus the program as
.pe; load() restores them so training resumes bit-identically; the .pe file
round-trips through load_program; the safetensors file is readable by a
plain reader (8-byte header length + JSON header + raw data); a save that
cannot write every persistable (absent from the scope, never initialized)
is refused naming each one, and both old files keep their bytes.
"""
import json
import os
import struct

import numpy as np
import pytest

import pe
from pe.utils import unique_name

pe.enable_static()


def build():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 6], "float32")
        y = pe.static.data("y", [None, 1], "int64")
        h = pe.nn.functional.dropout(pe.static.nn.fc(x, 8, activation="relu"), p=0.2)
        loss = pe.nn.functional.cross_entropy(pe.static.nn.fc(h, 3), y)
        pe.optimizer.Adam(learning_rate=0.01).minimize(loss)
    return main, startup, loss


def feeds():
    rng = np.random.RandomState(5)
    return [{"x": rng.randn(8, 6).astype(np.float32), "y": rng.randint(0, 3, (8, 1)).astype(np.int64)}
            for _ in range(6)]


def test_resume_is_bit_identical(tmp_path):
    main, startup, loss = build()
    f = feeds()
    # uninterrupted: 6 steps
    s_ref = pe.static.Scope()
    exe = pe.static.Executor()
    exe.run(startup, scope=s_ref)
    ref = [exe.run(main, feed=fd, fetch_list=[loss], scope=s_ref)[0][0] for fd in f]
    # 3 steps, save, fresh scope, load, 3 more steps
    s1 = pe.static.Scope()
    exe.run(startup, scope=s1)
    first = [exe.run(main, feed=fd, fetch_list=[loss], scope=s1)[0][0] for fd in f[:3]]
    pe.static.save(main, str(tmp_path / "ckpt" / "model"), scope=s1)
    s2 = pe.static.Scope()
    pe.static.load(main, str(tmp_path / "ckpt" / "model"), scope=s2)
    rest = [exe.run(main, feed=fd, fetch_list=[loss], scope=s2)[0][0] for fd in f[3:]]
    np.testing.assert_array_equal(first + rest, ref)
    for p in main.all_parameters():
        np.testing.assert_array_equal(np.array(s2.find_var(p.name).get_tensor()),
                                      np.array(s_ref.find_var(p.name).get_tensor()))


def test_files_are_standard(tmp_path):
    main, startup, loss = build()
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    pe.static.save(main, str(tmp_path / "m"), scope=scope)
    raw = (tmp_path / "m.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    persist = {v.name for v in main.list_vars() if v.persistable}
    assert set(header) - {"__metadata__"} == persist
    assert "dropout_0.step_0" in persist and "fc_0.w_0_moment1_0" in persist
    ent = header["fc_0.w_0"]
    assert ent["dtype"] == "F32" and ent["shape"] == [6, 8]
    b, e = ent["data_offsets"]
    w = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").reshape(6, 8)
    np.testing.assert_array_equal(w, np.array(scope.find_var("fc_0.w_0").get_tensor()))
    p = pe.static.load_program(str(tmp_path / "m.pe"))
    assert p.to_json() == main.to_json()
    pe.static.save_program(main, str(tmp_path / "m.json"))
    assert pe.static.load_program(str(tmp_path / "m.json")).to_json() == main.to_json()
    assert pe.static.Program.parse_from_string(main.serialize_to_string()).to_json() == main.to_json()


def test_incomplete_save_is_refused_and_keeps_the_old_files(tmp_path):
    main, startup, loss = build()
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    model = str(tmp_path / "m")
    pe.static.save(main, model, scope=scope)
    old = {f: (tmp_path / f).read_bytes() for f in ("m.safetensors", "m.pe")}

    def refused(program, scope, error, *names):
        with pytest.raises(error) as e:
            pe.static.save(program, model, scope=scope)
        msg = str(e.value)
        assert "m.safetensors" in msg and "nothing was written" in msg, msg
        for n in names:
            assert n in msg, (n, msg)
        for f, b in old.items():
            assert (tmp_path / f).read_bytes() == b, f
        assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]

    # Two persistables erased from the scope: both named.
    s2 = pe.static.Scope()
    pe.static.Executor().run(startup, scope=s2)
    assert s2.erase_var("fc_0.w_0") and s2.erase_var("fc_0.w_0_moment1_0")
    refused(main, s2, pe.NotFoundError, "'fc_0.w_0' (not in the scope)", "'fc_0.w_0_moment1_0' (not in the scope)")
    # In the scope but never given a value.
    s2.var("fc_0.w_0")
    refused(main, s2, pe.InvalidArgumentError, "'fc_0.w_0' (no data", "'fc_0.w_0_moment1_0' (not in the scope)")
    # Nothing run into the scope: every persistable is missing (a count past the first 12).
    n = len([v for v in main.list_vars() if v.persistable])
    refused(main, pe.static.Scope(), pe.NotFoundError, "%d of the %d persistable vars" % (n, n), "more")
    # Another program (one more layer) whose new parameters the scope lacks:
    # the old program file is not replaced either.
    main2, startup2 = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main2, startup2), unique_name.guard():
        x = pe.static.data("x", [None, 6], "float32")
        pe.static.nn.fc(pe.static.nn.fc(pe.static.nn.fc(x, 8), 3), 2)
    refused(main2, scope, pe.NotFoundError, "'fc_2.w_0'", "'fc_2.b_0'")

    # A complete save still round-trips.
    pe.static.save(main, model, scope=scope)
    s3 = pe.static.Scope()
    pe.static.load(main, model, scope=s3)
    for v in main.list_vars():
        if v.persistable:
            np.testing.assert_array_equal(np.array(s3.find_var(v.name).get_tensor()),
                                          np.array(scope.find_var(v.name).get_tensor()))
