"""pe.utils.unique_name — Paddle's unique-name scheme (fc_0, fc_0.w_0, fc_0.tmp_0, ...).

Every key has its own counter: generate("fc") -> "fc_0", "fc_1", ...;
generate("fc_0.w") -> "fc_0.w_0". Counters are global (not per program), as in
Paddle; `guard()` starts a fresh set, so two identical model builds inside
two guards get identical variable names.
"""
import contextlib

__all__ = ["generate", "generate_with_ignorable_key", "guard", "switch", "UniqueNameGenerator"]


class UniqueNameGenerator:
    """Counters per key, with an optional prefix."""

    def __init__(self, prefix=None):
        self.ids = {}
        self.prefix = prefix or ""

    def __call__(self, key):
        n = self.ids.get(key, 0)
        self.ids[key] = n + 1
        return "%s%s_%d" % (self.prefix, key, n)


generator = UniqueNameGenerator()


def generate(key):
    """A new unique name "<key>_<n>"."""
    return generator(key)


def generate_with_ignorable_key(key):
    """Same as generate (Paddle distinguishes them only in dygraph mode)."""
    return generator(key)


def switch(new_generator=None):
    """Installs new_generator (a fresh one when None); returns the old one."""
    global generator
    old = generator
    if new_generator is None:
        new_generator = UniqueNameGenerator()
    elif isinstance(new_generator, str):
        new_generator = UniqueNameGenerator(new_generator)
    generator = new_generator
    return old


@contextlib.contextmanager
def guard(new_generator=None):
    """with unique_name.guard(): names restart from 0 inside the block."""
    old = switch(new_generator)
    try:
        yield
    finally:
        switch(old)
