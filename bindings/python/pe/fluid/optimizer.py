"""fluid.optimizer — Paddle 1.x optimizers (regularization=, parameter_list=)
over pe.optimizer's (the same optimizer pass and kernels)."""
from .. import optimizer as _opt

__all__ = ["SGD", "Momentum", "Adam", "Adagrad", "RMSProp", "Adamax", "Lamb", "SGDOptimizer", "MomentumOptimizer",
           "AdamOptimizer", "AdagradOptimizer", "RMSPropOptimizer", "AdamaxOptimizer", "LambOptimizer"]


class _Fluid:
    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        return super().minimize(loss, startup_program=startup_program, parameters=parameter_list,
                                no_grad_set=no_grad_set)


class SGD(_Fluid, _opt.SGD):
    def __init__(self, learning_rate, parameter_list=None, regularization=None, grad_clip=None, name=None):
        _opt.SGD.__init__(self, learning_rate=learning_rate, parameters=parameter_list,
                          weight_decay=regularization, grad_clip=grad_clip, name=name)


class Momentum(_Fluid, _opt.Momentum):
    def __init__(self, learning_rate, momentum, parameter_list=None, use_nesterov=False, regularization=None,
                 grad_clip=None, name=None):
        _opt.Momentum.__init__(self, learning_rate=learning_rate, momentum=momentum, parameters=parameter_list,
                               use_nesterov=use_nesterov, weight_decay=regularization, grad_clip=grad_clip,
                               name=name)


class Adam(_Fluid, _opt.Adam):
    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameter_list=None,
                 regularization=None, grad_clip=None, name=None, lazy_mode=False):
        _opt.Adam.__init__(self, learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                           parameters=parameter_list, weight_decay=regularization, grad_clip=grad_clip, name=name,
                           lazy_mode=lazy_mode)


class Adagrad(_Fluid, _opt.Adagrad):
    def __init__(self, learning_rate, epsilon=1e-6, parameter_list=None, regularization=None, grad_clip=None,
                 name=None, initial_accumulator_value=0.0):
        _opt.Adagrad.__init__(self, learning_rate=learning_rate, epsilon=epsilon, parameters=parameter_list,
                              weight_decay=regularization, grad_clip=grad_clip, name=name,
                              initial_accumulator_value=initial_accumulator_value)


class RMSProp(_Fluid, _opt.RMSProp):
    def __init__(self, learning_rate, rho=0.95, epsilon=1e-6, momentum=0.0, centered=False, parameter_list=None,
                 regularization=None, grad_clip=None, name=None):
        _opt.RMSProp.__init__(self, learning_rate=learning_rate, rho=rho, epsilon=epsilon, momentum=momentum,
                              centered=centered, parameters=parameter_list, weight_decay=regularization,
                              grad_clip=grad_clip, name=name)


class Adamax(_Fluid, _opt.Adamax):
    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameter_list=None,
                 regularization=None, grad_clip=None, name=None):
        _opt.Adamax.__init__(self, learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon,
                             parameters=parameter_list, weight_decay=regularization, grad_clip=grad_clip, name=name)


class Lamb(_Fluid, _opt.Lamb):
    def __init__(self, learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6,
                 parameter_list=None, regularization=None, grad_clip=None, exclude_from_weight_decay_fn=None,
                 name=None):
        _opt.Lamb.__init__(self, learning_rate=learning_rate, lamb_weight_decay=lamb_weight_decay, beta1=beta1,
                           beta2=beta2, epsilon=epsilon, parameters=parameter_list, grad_clip=grad_clip,
                           exclude_from_weight_decay_fn=exclude_from_weight_decay_fn, name=name)
        if regularization is not None:
            # Lamb's Python class takes no weight_decay; 1.x's regularization= is the L2 on the gradient
            _opt.Optimizer.__init__(self, learning_rate, parameter_list, regularization, grad_clip, name)


SGDOptimizer, MomentumOptimizer, AdamOptimizer = SGD, Momentum, Adam
AdagradOptimizer, RMSPropOptimizer, AdamaxOptimizer, LambOptimizer = Adagrad, RMSProp, Adamax, Lamb
