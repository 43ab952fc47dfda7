"""tests/python/test_strategy_fields.py — every ExecutionStrategy / BuildStrategy field is real or refused.

- Every public field of a fresh strategy is a field the engine reads, a
  trainer field, or one of Paddle's switches PE refuses; no other kind
  exists (nothing is accepted and ignored).
- Refused switches: the default is accepted (Paddle scripts setting it run),
  any other value raises pe.UnsupportedError at the assignment naming the
  field, the value and why, and leaves the field unchanged.
- ExecutionStrategy.use_cuda = True on CPU places: refused at construction
  (ParallelExecutor and CompiledProgram).
- sync_batch_norm: a training batch_norm on 2 places is refused; on 1 place
  it trains exactly as without it; an inference batch_norm and a program
  with no batch_norm run on 2 places.
- num_trainers / trainer_id / trainers_endpoints reach ParallelExecutor (a
  trainer_id out of range, a conflict with the arguments, endpoints of the
  wrong count are errors).
- fuse_all_reduce_ops under the default shard_optimizer says why its
  gradients are not bucketed; with shard_optimizer off it buckets quietly.
- use_hierarchical_allreduce: both values train to the same result.
- pe graph --strategy follows the same rules in the same words.
"""
import os
import subprocess
import sys

import numpy as np
import pytest

import pe
from pe.utils import unique_name

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pe_json import pe_bin  # noqa: E402
from train_ref import EXAMPLES  # noqa: E402

pe.enable_static()

ES, BS = pe.static.ExecutionStrategy, pe.static.BuildStrategy

REFUSED = {
    ES: {"use_thread_barrier": False, "allow_op_delay": False, "use_experimental_executor": False},
    BS: {"fuse_bn_act_ops": False, "fuse_bn_add_act_ops": False, "fuse_relu_depthwise_conv": False,
         "fuse_broadcast_ops": False, "enable_auto_fusion": False, "enable_addto": False,
         "remove_unnecessary_lock": True, "cache_runtime_context": False, "fix_op_run_order": False,
         "allow_cuda_graph_capture": False, "nccl_comm_num": 1},
}


def test_every_field_is_read_or_refused():
    for cls in (ES, BS):
        s = cls()
        public = {k for k in vars(s) if not k.startswith("_")}
        known = set(cls._fields) | set(cls._refused) | set(getattr(cls, "_trainer_fields", {}))
        assert public == known, cls
        assert set(cls._refused) == set(REFUSED[cls])
        assert not set(cls._fields) & set(cls._refused)
        assert not hasattr(cls, "_ignored")


@pytest.mark.parametrize("cls,field", [(c, f) for c in REFUSED for f in REFUSED[c]])
def test_refused_switches(cls, field):
    s = cls()
    default = REFUSED[cls][field]
    assert getattr(s, field) == default
    setattr(s, field, default)  # Paddle scripts that set the default run
    other = 2 if field == "nccl_comm_num" else (not default)
    with pytest.raises(pe.UnsupportedError) as e:
        setattr(s, field, other)
    msg = str(e.value)
    assert msg.startswith("%s.%s = %r is not supported: " % (cls.__name__, field, other)), msg
    assert len(msg.split("is not supported: ")[1]) > 20  # says why
    assert getattr(s, field) == default  # unchanged


def test_refused_value_types():
    with pytest.raises(TypeError, match="nccl_comm_num"):
        BS().nccl_comm_num = "2"
    with pytest.raises(TypeError, match="fuse_bn_act_ops"):
        BS().fuse_bn_act_ops = "yes"
    with pytest.raises(TypeError, match="use_cuda"):
        ES().use_cuda = "yes"


def mlp(bn=False, act=None):
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup), unique_name.guard():
        x = pe.static.data("x", [None, 3], "float32")
        h = pe.static.nn.fc(x, 4, activation=act)
        if bn:
            h = pe.static.nn.batch_norm(h)
        loss = pe.mean(pe.static.nn.fc(h, 2))
        pe.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, loss


X = np.arange(24, dtype=np.float32).reshape(8, 3) / 10.0


def train(monkeypatch, places, prog, bs=None, es=None, steps=2, **kw):
    monkeypatch.setenv("CPU_NUM", str(places))
    main, startup, loss = prog
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    pexe = pe.static.ParallelExecutor(False, loss_name=loss.name, main_program=main, scope=scope,
                                      build_strategy=bs, exec_strategy=es, **kw)
    for _ in range(steps):
        pexe.run([loss], feed={"x": X})
    return {p.name: np.array(scope.find_var(p.name).get_tensor()) for p in main.all_parameters()}


def test_use_cuda_on_cpu_places(monkeypatch):
    es = ES()
    es.use_cuda = True
    with pytest.raises(pe.UnsupportedError, match="ParallelExecutor: ExecutionStrategy.use_cuda = True, but the "
                                                  "places are Place\\(cpu\\), Place\\(cpu:1\\)"):
        train(monkeypatch, 2, mlp(), es=es)
    main, startup, loss = mlp()
    scope = pe.static.Scope()
    exe = pe.static.Executor(pe.CPUPlace())
    exe.run(startup, scope=scope)
    cp = pe.static.CompiledProgram(main).with_data_parallel(loss_name=loss.name, exec_strategy=es)
    with pytest.raises(pe.UnsupportedError, match="CompiledProgram: ExecutionStrategy.use_cuda = True"):
        exe.run(cp, feed={"x": X}, fetch_list=[loss], scope=scope)
    es.use_cuda = False  # the default: the places decide
    train(monkeypatch, 2, mlp(), es=es)


def test_sync_batch_norm(monkeypatch):
    bs = BS()
    bs.sync_batch_norm = True
    with pytest.raises(pe.UnsupportedError, match="BuildStrategy.sync_batch_norm: batch_norm \\(block 0 op \\d+\\) "
                                                  "would normalize with the statistics of its place's rows only"):
        train(monkeypatch, 2, mlp(bn=True), bs=bs)
    # one place: the batch statistics are the whole batch's, as asked
    got = train(monkeypatch, 1, mlp(bn=True), bs=bs)
    ref = train(monkeypatch, 1, mlp(bn=True))
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
    # nothing to synchronize: no batch_norm, or one in inference (is_test)
    train(monkeypatch, 2, mlp(), bs=bs)
    main, startup, loss = mlp(bn=True)
    infer = main.clone(for_test=True)
    scope = pe.static.Scope()
    pe.static.Executor().run(startup, scope=scope)
    pexe = pe.static.ParallelExecutor(False, main_program=infer, scope=scope, build_strategy=bs)
    out, = pexe.run([loss.name], feed={"x": X})
    assert out.shape == (2,)


def test_trainer_fields_reach_parallel_executor(monkeypatch):
    bs = BS()
    bs.trainer_id = 3  # read: not one of the 1 trainers
    with pytest.raises(pe.InvalidArgumentError, match="ParallelExecutor: trainer_id=3 is not one of the 1 trainers"):
        train(monkeypatch, 1, mlp(), bs=bs)
    bs = BS()
    bs.num_trainers = 2
    with pytest.raises(pe.InvalidArgumentError, match="num_trainers=3, but BuildStrategy.num_trainers = 2"):
        train(monkeypatch, 1, mlp(), bs=bs, num_trainers=3)
    bs = BS()
    bs.trainers_endpoints = ["127.0.0.1:6170", "127.0.0.1:6171"]
    with pytest.raises(pe.InvalidArgumentError, match="trainers_endpoints lists 2 endpoints .* for num_trainers=1"):
        train(monkeypatch, 1, mlp(), bs=bs)
    bs.trainers_endpoints = ["127.0.0.1:6170"]  # one trainer, one endpoint: fine
    train(monkeypatch, 1, mlp(), bs=bs)


def test_fuse_all_reduce_ops_under_shard_optimizer(monkeypatch, capfd):
    bs = BS()
    bs.fuse_all_reduce_ops = True
    bs.fuse_elewise_add_act_ops = True  # removes a var: the executor builds a second graph, which stays quiet
    ref = train(monkeypatch, 2, mlp(act="relu"))
    capfd.readouterr()
    got = train(monkeypatch, 2, mlp(act="relu"), bs=bs)
    err = capfd.readouterr().err
    assert err.count("BuildStrategy.fuse_all_reduce_ops: 4 of the 4 gradients are summed inside shard_optimizer's "
                     "sharded updates") == 1, err
    assert "0 go in buckets; set shard_optimizer off to bucket them all" in err, err
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, err_msg=k)
    bs.shard_optimizer = False
    got = train(monkeypatch, 2, mlp(act="relu"), bs=bs)
    assert "fuse_all_reduce_ops" not in capfd.readouterr().err
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, err_msg=k)


def test_use_hierarchical_allreduce_both_values(monkeypatch):
    ref = train(monkeypatch, 2, mlp())
    bs = BS()
    bs.use_hierarchical_allreduce = True
    got = train(monkeypatch, 2, mlp(), bs=bs)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


def test_cli_strategy_follows_the_same_rules(tmp_path):
    """pe graph --strategy: the default of each refused BuildStrategy switch is
    accepted, another value is a usage error in the Python setter's words."""
    prog = os.path.join(EXAMPLES, "mlp_train.pe")

    def graph(spec):
        return subprocess.run([pe_bin(), "graph", prog, "--places", "cpu:2", "-o", str(tmp_path / "g.dot"),
                               "--strategy", spec], capture_output=True, text=True, timeout=120)

    for field, default in REFUSED[BS].items():
        other = 2 if field == "nccl_comm_num" else (not default)
        r = graph("%s=%d" % (field, default))
        assert r.returncode == 0, (field, r.stderr)
        r = graph("%s=%d" % (field, other))
        with pytest.raises(pe.UnsupportedError) as e:
            setattr(BS(), field, other)
        assert r.returncode == 2 and str(e.value) in r.stderr, (field, r.stderr, str(e.value))


def test_engine_fields_come_from_one_table(tmp_path):
    """The engine's fields and defaults exist once, in C (pe_strategy_fields,
    pe_pe_options_default): the Python classes start from them, send each as
    its C type, and pe graph --strategy takes every build field by the same
    name, with the same value names and range checks."""
    c_exec, c_build = pe._core.strategy_defaults()
    assert {"num_threads", "check_nan_inf"} <= set(c_exec) and {"fuse_gemm_epilogue", "reduce_strategy"} <= set(c_build)
    for cls, c in ((ES, c_exec), (BS, c_build)):
        d = cls()._to_dict()
        for k, v in c.items():
            assert k in cls._fields, k
            assert d[k] == v and type(d[k]) is type(v), (k, d[k], v)
    assert BS().reduce_strategy == BS.ReduceStrategy.AllReduce
    assert BS().gradient_scale_strategy == BS.GradientScaleStrategy.BatchShare
    b = BS()
    b.gradient_scale_strategy = BS.GradientScaleStrategy.CoeffNumDevice
    b.fuse_grad_size_in_MB = 8
    assert b._to_dict()["gradient_scale_strategy"] == "coeff_num_device"
    assert b._to_dict()["fuse_grad_size_in_MB"] == 8.0 and isinstance(b._to_dict()["fuse_grad_size_in_MB"], float)

    prog = os.path.join(EXAMPLES, "mlp_train.pe")

    def graph(spec):
        return subprocess.run([pe_bin(), "graph", prog, "--places", "cpu:2", "-o", str(tmp_path / "g.dot"),
                               "--strategy", spec], capture_output=True, text=True, timeout=120)

    every = ",".join("%s=%s" % (k, int(v) if isinstance(v, bool) else v) for k, v in c_build.items())
    r = graph(every)
    assert r.returncode == 0, (every, r.stderr)
    r = graph("fuse_grad_size_in_MB=0")
    with pytest.raises(pe.InvalidArgumentError) as e:
        BS().fuse_grad_size_in_MB = 0
    assert r.returncode == 2 and "BuildStrategy.fuse_grad_size_in_MB = 0 is out of range" in r.stderr, r.stderr
    assert "BuildStrategy.fuse_grad_size_in_MB = 0 is out of range" in str(e.value)
    r = graph("gradient_scale_strategy=sideways")
    assert r.returncode == 2 and "batch_share, coeff_num_device, one or customized" in r.stderr, r.stderr
    r = graph("fuse_everything=1")
    assert r.returncode == 2 and all(k in r.stderr for k in c_build), r.stderr
