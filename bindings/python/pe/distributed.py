"""pe.distributed — the trainer environment (Paddle's ParallelEnv, get_rank, get_world_size).

Read from the environment variables Paddle's launcher sets, with Paddle's
defaults: PADDLE_TRAINER_ID (rank, 0), PADDLE_TRAINERS_NUM (world_size, 1),
FLAGS_selected_gpus (device_id, 0), PADDLE_CURRENT_ENDPOINT
(current_endpoint, ""), PADDLE_TRAINER_ENDPOINTS (trainer_endpoints, the
list of comma-separated endpoints; "" when unset, as Paddle's docs say).
"""
import os

__all__ = ["ParallelEnv", "get_rank", "get_world_size"]


def _int_env(name, default):
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError("environment variable %s=%r is not an integer" % (name, v)) from None


class ParallelEnv:
    """Snapshot of the trainer environment at construction."""

    def __init__(self):
        self._rank = _int_env("PADDLE_TRAINER_ID", 0)
        self._world_size = _int_env("PADDLE_TRAINERS_NUM", 1)
        gpus = os.environ.get("FLAGS_selected_gpus", "").strip()
        try:
            self._device_id = int(gpus.split(",")[0]) if gpus else 0
        except ValueError:
            raise ValueError("environment variable FLAGS_selected_gpus=%r is not a list of integers" % gpus) from None
        self._current_endpoint = os.environ.get("PADDLE_CURRENT_ENDPOINT", "")
        eps = os.environ.get("PADDLE_TRAINER_ENDPOINTS", "")
        self._trainer_endpoints = [e for e in eps.split(",") if e] if eps else ""
        if self._world_size < 1:
            raise ValueError("PADDLE_TRAINERS_NUM must be >= 1, got %d" % self._world_size)
        if not 0 <= self._rank < self._world_size:
            raise ValueError("PADDLE_TRAINER_ID=%d is not in [0, PADDLE_TRAINERS_NUM=%d)" % (
                self._rank, self._world_size))

    @property
    def rank(self):
        return self._rank

    @property
    def world_size(self):
        return self._world_size

    @property
    def device_id(self):
        return self._device_id

    @property
    def current_endpoint(self):
        return self._current_endpoint

    @property
    def trainer_endpoints(self):
        return list(self._trainer_endpoints) if self._trainer_endpoints else ""

    # the older names
    local_rank = rank
    nranks = world_size
    dev_id = device_id

    def __repr__(self):
        return "ParallelEnv(rank=%d, world_size=%d, device_id=%d, current_endpoint=%r, trainer_endpoints=%r)" % (
            self._rank, self._world_size, self._device_id, self._current_endpoint, self._trainer_endpoints)


def get_rank():
    """This trainer's rank (PADDLE_TRAINER_ID, default 0)."""
    return ParallelEnv().rank


def get_world_size():
    """Number of trainers (PADDLE_TRAINERS_NUM, default 1)."""
    return ParallelEnv().world_size
