"""tests/python/test_lr_scheduler.py — pe.optimizer.lr, Paddle 2.x's learning-rate schedulers.

- The rates over 40 steps against torch.optim.lr_scheduler (Debian's torch
  1.13, the oracle) where torch has the same schedule, and against the
  formula (in this file) where only Paddle has it; step(epoch), state_dict
  round trips, ReduceOnPlateau on a metric sequence worked by hand.
- Optimizers take them: static programs (Executor, ParallelExecutor on 2
  places: the scheduler's value reaches every place) and eager mode train
  as torch does with the same scheduler; a pserver transpile refuses one;
  bad arguments are errors naming the scheduler and the argument.
"""
import math

import numpy as np
import pytest
import torch

import pe
from pe.optimizer import lr as L

STEPS = 40


def rates(sched, steps=STEPS):
    out = []
    for _ in range(steps):
        out.append(sched())
        sched.step()
    return np.array(out)


def torch_rates(make, steps=STEPS, lr=0.1):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    s = make(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        s.step()
    return np.array(out)


TORCH_CASES = {
    "step": (lambda: L.StepDecay(0.1, step_size=7, gamma=0.5),
             lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=7, gamma=0.5)),
    "multistep": (lambda: L.MultiStepDecay(0.1, milestones=[5, 12, 30], gamma=0.3),
                  lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[5, 12, 30], gamma=0.3)),
    "exponential": (lambda: L.ExponentialDecay(0.1, gamma=0.9),
                    lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)),
    "cosine": (lambda: L.CosineAnnealingDecay(0.1, T_max=10, eta_min=0.01),
               lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.01)),
    "lambda": (lambda: L.LambdaDecay(0.1, lambda e: 0.95 ** e + 0.01 * (e % 3)),
               lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 0.95 ** e + 0.01 * (e % 3))),
    "multiplicative": (lambda: L.MultiplicativeDecay(0.1, lambda e: 0.9 if e % 2 else 0.97),
                       lambda o: torch.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.9 if e % 2 else 0.97)),
    "linear": (lambda: L.LinearLR(0.1, total_steps=15, start_factor=0.25, end_factor=0.9),
               lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=15)),
    "cyclic": (lambda: L.CyclicLR(0.01, 0.1, step_size_up=4, step_size_down=6),
               lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, step_size_up=4, step_size_down=6,
                                                           cycle_momentum=False)),
    "cyclic2": (lambda: L.CyclicLR(0.01, 0.1, step_size_up=5, mode="triangular2"),
                lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, step_size_up=5, mode="triangular2",
                                                            cycle_momentum=False)),
    "cyclic_exp": (lambda: L.CyclicLR(0.01, 0.1, step_size_up=3, mode="exp_range", exp_gamma=0.97),
                   lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.01, 0.1, step_size_up=3, mode="exp_range",
                                                               gamma=0.97, cycle_momentum=False)),
    "onecycle": (lambda: L.OneCycleLR(0.1, total_steps=STEPS, divide_factor=25.0, end_learning_rate=0.1 / 25 / 1e3,
                                      phase_pct=0.3),
                 lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=STEPS, pct_start=0.3,
                                                               div_factor=25.0, final_div_factor=1e3,
                                                               cycle_momentum=False)),
    "onecycle3_linear": (lambda: L.OneCycleLR(0.1, total_steps=STEPS, end_learning_rate=0.1 / 25 / 1e4,
                                              anneal_strategy="linear", three_phase=True),
                         lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=STEPS,
                                                                       anneal_strategy="linear", three_phase=True,
                                                                       cycle_momentum=False)),
}


@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_matches_torch(name):
    make_pe, make_torch = TORCH_CASES[name]
    np.testing.assert_allclose(rates(make_pe()), torch_rates(make_torch), rtol=1e-12, atol=1e-15, err_msg=name)


def noam(e):
    return 1.0 * 64 ** -0.5 * min(1.0 if e == 0 else e ** -0.5, 10 ** -1.5 * e)


def poly(e, cycle):
    steps = 10
    if cycle:
        steps = 10 * max(1, math.ceil(e / 10))
    else:
        e = min(e, 10)
    return (0.1 - 0.001) * (1 - e / steps) ** 2 + 0.001


FORMULA_CASES = {
    "noam": (lambda: L.NoamDecay(d_model=64, warmup_steps=10), noam),
    "piecewise": (lambda: L.PiecewiseDecay([3, 9], [0.1, 0.05, 0.01]),
                  lambda e: 0.1 if e < 3 else 0.05 if e < 9 else 0.01),
    "natural_exp": (lambda: L.NaturalExpDecay(0.1, gamma=0.2), lambda e: 0.1 * math.exp(-0.2 * e)),
    "inverse_time": (lambda: L.InverseTimeDecay(0.1, gamma=0.5), lambda e: 0.1 / (1 + 0.5 * e)),
    "polynomial": (lambda: L.PolynomialDecay(0.1, decay_steps=10, end_lr=0.001, power=2.0),
                   lambda e: poly(e, False)),
    "polynomial_cycle": (lambda: L.PolynomialDecay(0.1, decay_steps=10, end_lr=0.001, power=2.0, cycle=True),
                         lambda e: poly(e, True)),
    "warmup_float": (lambda: L.LinearWarmup(0.1, warmup_steps=5, start_lr=0.0, end_lr=0.1),
                     lambda e: 0.1 * e / 5 if e < 5 else 0.1),
    "warmup_sched": (lambda: L.LinearWarmup(L.StepDecay(0.1, step_size=4, gamma=0.5), warmup_steps=5, start_lr=0.01,
                                            end_lr=0.1),
                     lambda e: 0.01 + 0.09 * e / 5 if e < 5 else 0.1 * 0.5 ** ((e - 5) // 4)),
}


@pytest.mark.parametrize("name", sorted(FORMULA_CASES))
def test_matches_formula(name):
    make, fn = FORMULA_CASES[name]
    np.testing.assert_allclose(rates(make()), [fn(e) for e in range(STEPS)], rtol=1e-12, err_msg=name)


def test_step_to_epoch_and_state_dict():
    s = L.CosineAnnealingDecay(0.1, T_max=8)
    s.step(5)  # closed form
    assert s.last_epoch == 5 and s() == pytest.approx(0.05 * (1 + math.cos(math.pi * 5 / 8)), rel=1e-12)
    a = L.StepDecay(0.1, step_size=3)
    for _ in range(7):
        a.step()
    st = a.state_dict()
    assert st == {"last_epoch": 7, "last_lr": pytest.approx(0.1 * 0.1 ** 2)}
    b = L.StepDecay(0.1, step_size=3)
    b.set_state_dict(st)
    assert rates(b, 10).tolist() == rates(a, 10).tolist()
    w = L.LinearWarmup(L.ExponentialDecay(0.1, gamma=0.5), warmup_steps=2, start_lr=0.0, end_lr=0.1)
    for _ in range(5):
        w.step()
    w2 = L.LinearWarmup(L.ExponentialDecay(0.1, gamma=0.5), warmup_steps=2, start_lr=0.0, end_lr=0.1)
    w2.set_state_dict(w.state_dict())
    assert rates(w2, 6).tolist() == rates(w, 6).tolist()
    with pytest.warns(UserWarning, match="not this scheduler's"):
        b.set_state_dict({"last_epoch": 1, "bogus": 3})


def test_reduce_on_plateau():
    s = L.ReduceOnPlateau(1.0, mode="min", factor=0.5, patience=2, cooldown=1, threshold=0.1, min_lr=0.2)
    # 10: best; 9.5, 9.2, 9.1 (not 10% under 10): bad 1, 2, 3 > patience 2 -> 0.5, then one step of
    # cooldown (9.0 not looked at); 8.9: best (under 9.0); 8.95, 8.97, 8.99: bad 1, 2, 3 -> 0.25;
    # cooldown; 8.99 x 3: bad 1, 2, 3 -> max(0.125, min_lr 0.2)
    seen = []
    for m in [10, 9.5, 9.2, 9.1, 9.0, 8.9, 8.95, 8.97, 8.99, 8.99, 8.99, 8.99, 8.99]:
        s.step(np.array([m], np.float32))
        seen.append(s())
    assert seen == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.2]
    mx = L.ReduceOnPlateau(0.1, mode="max", patience=0, threshold_mode="abs", threshold=0.5)
    mx.step(1.0)
    mx.step(1.4)   # not better by 0.5: one bad epoch > patience 0
    assert mx() == pytest.approx(0.01)
    with pytest.raises(ValueError, match="one value"):
        mx.step(np.zeros(2))


@pytest.mark.parametrize("make, match", [
    (lambda: L.StepDecay(0.1, step_size=0), "StepDecay: step_size must be a positive int"),
    (lambda: L.StepDecay(0.1, step_size=3, gamma=1.5), "StepDecay: gamma must be < 1.0"),
    (lambda: L.MultiStepDecay(0.1, milestones=[5, 3]), "MultiStepDecay: milestones must be increasing"),
    (lambda: L.PiecewiseDecay([3, 9], [0.1, 0.01]), "PiecewiseDecay: 2 boundaries need 3 values"),
    (lambda: L.ExponentialDecay(0.1, gamma=0), r"ExponentialDecay: gamma must be in \(0, 1\)"),
    (lambda: L.CosineAnnealingDecay(0.1, T_max=0), "CosineAnnealingDecay: T_max must be a positive int"),
    (lambda: L.StepDecay("0.1", step_size=3), "StepDecay: learning_rate must be a finite number"),
    (lambda: L.ReduceOnPlateau(0.1, mode="lowest"), "ReduceOnPlateau: mode must be 'min' or 'max'"),
    (lambda: L.CyclicLR(0.01, 0.1, step_size_up=2, mode="saw"), "CyclicLR: mode must be"),
    (lambda: L.OneCycleLR(0.1, total_steps=10, anneal_strategy="exp"), "OneCycleLR: anneal_strategy"),
    (lambda: L.LambdaDecay(0.1, 0.5), "LambdaDecay: lr_lambda must be a function"),
])
def test_bad_arguments(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_onecycle_past_total_steps():
    s = L.OneCycleLR(0.1, total_steps=3)
    s.step()
    s.step()
    s.step()
    with pytest.raises(ValueError, match="beyond total_steps=3"):
        s.step()


# ---- optimizers take them ------------------------------------------------------------------------

RS = np.random.RandomState(7)
X = RS.randn(8, 5).astype(np.float32)
Y = RS.randn(8, 1).astype(np.float32)
TRAIN_STEPS = 9


def make_sched():
    return L.MultiStepDecay(0.2, milestones=[2, 5], gamma=0.5)


def torch_train(w0, b0):
    lin = torch.nn.Linear(5, 1)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor(w0.T))
        lin.bias.copy_(torch.tensor(b0))
    opt = torch.optim.SGD(lin.parameters(), lr=0.2, momentum=0.9)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 5], gamma=0.5)
    for _ in range(TRAIN_STEPS):
        opt.zero_grad()
        loss = ((lin(torch.tensor(X)) - torch.tensor(Y)) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()
    return lin.weight.detach().numpy().T, lin.bias.detach().numpy()


def static_program():
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup):
        x = pe.static.data("x", [-1, 5], "float32")
        y = pe.static.data("y", [-1, 1], "float32")
        loss = pe.mean(pe.square(pe.static.nn.fc(x, 1) - y))
        sched = make_sched()
        pe.optimizer.Momentum(learning_rate=sched, momentum=0.9).minimize(loss)
    return main, startup, loss, sched


@pytest.mark.parametrize("places, shard", [(1, True), (2, True), (2, False)])
def test_static_training_matches_torch(places, shard, monkeypatch):
    """On 2 places without shard_optimizer every place updates its own copy
    of the parameters with its own copy of the rate: each must follow the
    scheduler (every place's copy is checked)."""
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, loss, sched = static_program()
    assert main.lr_scheduler is sched
    scope = pe.static.Scope()
    exe = pe.static.Executor(pe.CPUPlace())
    exe.run(startup, scope=scope)
    w, b = [p.name for p in main.all_parameters()]
    w0, b0 = [np.array(scope.find_var(n).get_tensor()).copy() for n in (w, b)]
    runner = main
    if places > 1:
        bs = pe.static.BuildStrategy()
        bs.shard_optimizer = shard
        runner = pe.static.CompiledProgram(main, build_strategy=bs).with_data_parallel(loss_name=loss.name)
    for _ in range(TRAIN_STEPS):
        exe.run(runner, feed={"x": X, "y": Y}, fetch_list=[loss], scope=scope)
        sched.step()
    scopes = [scope]
    if places > 1:
        assert runner.device_count == places
        scopes = [runner._pe.place_scope(i) for i in range(places)]
    tw, tb = torch_train(w0, b0)
    for i, sc in enumerate(scopes):
        np.testing.assert_allclose(np.array(sc.find_var(w).get_tensor()), tw, rtol=1e-5, atol=1e-6,
                                   err_msg="place %d" % i)
        np.testing.assert_allclose(np.array(sc.find_var(b).get_tensor()), tb, rtol=1e-5, atol=1e-6,
                                   err_msg="place %d" % i)


def test_eager_training_matches_torch():
    pe.disable_static()
    lin = pe.nn.Linear(5, 1)
    w0, b0 = lin.weight.numpy().copy(), lin.bias.numpy().copy()
    sched = make_sched()
    opt = pe.optimizer.Momentum(learning_rate=sched, momentum=0.9, parameters=lin.parameters())
    assert opt.get_lr() == pytest.approx(0.2)
    for _ in range(TRAIN_STEPS):
        loss = pe.mean(pe.square(lin(pe.to_tensor(X)) - pe.to_tensor(Y)))
        loss.backward()
        opt.step()
        opt.clear_grad()
        sched.step()
    assert opt.get_lr() == pytest.approx(0.05)
    with pytest.raises(RuntimeError, match="set it through the scheduler"):
        opt.set_lr(0.1)
    tw, tb = torch_train(w0, b0)
    np.testing.assert_allclose(lin.weight.numpy(), tw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lin.bias.numpy(), tb, rtol=1e-5, atol=1e-6)


def test_pserver_transpile_refuses_a_scheduler():
    import pe.fluid as fluid
    main, startup, _, _ = static_program()
    t = fluid.DistributeTranspiler()
    with pytest.raises(pe.UnsupportedError, match="pe.optimizer.lr.MultiStepDecay"):
        t.transpile(0, program=main, startup_program=startup, pservers="127.0.0.1:6174", trainers=1)


def test_bad_learning_rate_type():
    with pytest.raises(TypeError, match="learning_rate must be a float, a pe.optimizer.lr.LRScheduler"):
        pe.optimizer.SGD(learning_rate="0.1")
