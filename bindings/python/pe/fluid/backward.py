"""fluid.backward — Paddle 1.x's names for autodiff: append_backward(loss,
parameter_list, no_grad_set) -> [(param, grad)] and gradients(targets,
inputs, target_gradients, no_grad_set); pe.static's (the C pass
passes/backward.c)."""
from ..static.backward import append_backward, gradients  # noqa: F401

__all__ = ["append_backward", "gradients"]
