"""tests/python/test_share_vars.py — share_vars_from through the Python API:
an evaluation program compiled with share_vars_from reads the training
program's parameters after each step without copies, and a source that was
never built (never run) is a clear error."""
import numpy as np
import pytest

import pe


def _programs():
    pe.enable_static()
    main, startup = pe.static.Program(), pe.static.Program()
    with pe.static.program_guard(main, startup):
        x = pe.static.data(name="x", shape=[None, 4], dtype="float32")
        y = pe.static.nn.fc(x, 3)
        loss = pe.mean(y)
        test = main.clone(for_test=True)
        pe.optimizer.SGD(learning_rate=0.1).minimize(loss)
    return main, startup, test, loss, y


def test_eval_sees_each_step_and_unbuilt_source_is_an_error(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, test, loss, y = _programs()
    scope = pe.static.Scope()
    exe = pe.static.Executor(pe.CPUPlace())
    with pe.static.scope_guard(scope):
        exe.run(startup)
        train = pe.static.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
        evalp = pe.static.CompiledProgram(test).with_data_parallel(share_vars_from=train)
        x = np.random.RandomState(0).rand(6, 4).astype("float32")
        with pytest.raises(pe.Error, match="share_vars_from.*not been run"):
            exe.run(evalp, feed={"x": x}, fetch_list=[y.name])
        w_name = [p.name for p in main.all_parameters() if p.name.endswith(".w_0")][0]
        for _ in range(3):
            exe.run(train, feed={"x": x}, fetch_list=[loss.name])
            w = np.array(scope.find_var(w_name).get_tensor())
            b = np.array(scope.find_var(w_name.replace(".w_0", ".b_0")).get_tensor())
            got = exe.run(evalp, feed={"x": x}, fetch_list=[y.name])[0]
            np.testing.assert_allclose(got, x @ w + b, rtol=1e-5, atol=1e-6)
