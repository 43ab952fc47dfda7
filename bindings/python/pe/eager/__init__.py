"""pe.eager — eager (dynamic) mode: tensors whose ops run at once, and autograd.

    import pe
    pe.disable_static()
    w = pe.randn([4, 3]); w.stop_gradient = False
    x = pe.to_tensor(np.ones([2, 4], "float32"))
    loss = pe.mean(pe.nn.functional.relu(x @ w))
    loss.backward()                 # w.grad: d loss / d w
    with pe.no_grad():
        w = (w - 0.1 * w.grad).detach(); w.stop_gradient = False

Every op is the static engine's op type, infer function and kernel, run on
tensors without a program (pe/eager.h); backward() runs the backward ops
the ops' grad makers (ops/ops.def) make. CPU places only. What exists is
listed in docs/guide.md ("Eager mode").
"""
from .autograd import Tensor, no_grad, run_op, backward  # noqa: F401
from .functional import (to_tensor, full, zeros, ones, randn, rand, arange,  # noqa: F401
                         add, subtract, multiply, divide, scale, relu, sigmoid, tanh, exp, log, sqrt, square, abs, softmax, pow, neg,
                         equal, not_equal, less_than, less_equal, greater_than, greater_equal, matmul, mean, sum,
                         cast, reshape, transpose, concat, softmax_with_cross_entropy, cross_entropy)
from .nn_functional import (gelu, linear, conv2d, max_pool2d, avg_pool2d, batch_norm, layer_norm,  # noqa: F401
                            embedding, dropout, flatten, mse_loss, l1_loss)
from .io import save, load  # noqa: F401
from . import optimizer  # noqa: F401
