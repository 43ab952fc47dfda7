"""fluid.optimizer — Paddle 1.x optimizers (regularization=, parameter_list=)
over pe.optimizer's (the same optimizer pass and kernels)."""
from .. import optimizer as _opt

__all__ = ["SGD", "Momentum", "Adam", "SGDOptimizer", "MomentumOptimizer", "AdamOptimizer"]


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


SGDOptimizer, MomentumOptimizer, AdamOptimizer = SGD, Momentum, Adam
