"""pe.distributed.env — the trainer environment (Paddle's ParallelEnv, get_rank, get_world_size).

Read from the environment variables Paddle's launcher sets, with Paddle's
defaults: PADDLE_TRAINER_ID (rank, 0), PADDLE_TRAINERS_NUM (world_size, 1),
FLAGS_selected_gpus (device_id, 0), PADDLE_CURRENT_ENDPOINT
(current_endpoint, ""), PADDLE_TRAINER_ENDPOINTS (trainer_endpoints, the
list of comma-separated endpoints; "" when unset, as Paddle's docs say),
PADDLE_RANK_IN_NODE (rank_in_node: the process's index on its machine).

Under a plain `mpirun python x.py` (no PADDLE_* variables) the rank, the
world size and the rank in the node come from Open MPI's
OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_LOCAL_RANK.
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


def _first_int_env(names, default):
    """(value, name) of the first of names that is set, else (default, None)."""
    for n in names:
        if os.environ.get(n, "").strip():
            return _int_env(n, default), n
    return default, None


class ParallelEnv:
    """Snapshot of the trainer environment at construction."""

    def __init__(self):
        self._rank, rank_var = _first_int_env(["PADDLE_TRAINER_ID", "OMPI_COMM_WORLD_RANK"], 0)
        self._world_size, size_var = _first_int_env(["PADDLE_TRAINERS_NUM", "OMPI_COMM_WORLD_SIZE"], 1)
        self._rank_in_node, _ = _first_int_env(["PADDLE_RANK_IN_NODE", "OMPI_COMM_WORLD_LOCAL_RANK"], 0)
        gpus = os.environ.get("FLAGS_selected_gpus", "").strip()
        try:
            self._device_id = int(gpus.split(",")[0]) if gpus else 0
        except ValueError:
            raise ValueError("environment variable FLAGS_selected_gpus=%r is not a list of integers" % gpus) from None
        self._current_endpoint = os.environ.get("PADDLE_CURRENT_ENDPOINT", "")
        eps = os.environ.get("PADDLE_TRAINER_ENDPOINTS", "")
        self._trainer_endpoints = [e for e in eps.split(",") if e] if eps else ""
        if self._world_size < 1:
            raise ValueError("%s must be >= 1, got %d" % (size_var or "PADDLE_TRAINERS_NUM", self._world_size))
        if not 0 <= self._rank < self._world_size:
            raise ValueError("%s=%d is not in [0, %s=%d)" % (rank_var or "PADDLE_TRAINER_ID", self._rank,
                                                             size_var or "PADDLE_TRAINERS_NUM", self._world_size))

    @property
    def rank(self):
        """This process's rank (PADDLE_TRAINER_ID, else OMPI_COMM_WORLD_RANK, else 0)."""
        return self._rank

    @property
    def world_size(self):
        """The number of processes (PADDLE_TRAINERS_NUM, else OMPI_COMM_WORLD_SIZE, else 1)."""
        return self._world_size

    @property
    def device_id(self):
        """The first of FLAGS_selected_gpus (0 when unset)."""
        return self._device_id

    @property
    def current_endpoint(self):
        return self._current_endpoint

    @property
    def trainer_endpoints(self):
        return list(self._trainer_endpoints) if self._trainer_endpoints else ""

    @property
    def rank_in_node(self):
        """This process's index on its machine (PADDLE_RANK_IN_NODE, else OMPI_COMM_WORLD_LOCAL_RANK, else 0)."""
        return self._rank_in_node

    # the older names (Paddle's: local_rank is the rank, not the rank in the node)
    local_rank = rank
    nranks = world_size
    dev_id = device_id

    def __repr__(self):
        return "%s(rank=%d, world_size=%d, device_id=%d, current_endpoint=%r, trainer_endpoints=%r)" % (
            type(self).__name__, self._rank, self._world_size, self._device_id, self._current_endpoint,
            self._trainer_endpoints)


def get_rank():
    """This trainer's rank (PADDLE_TRAINER_ID, else OMPI_COMM_WORLD_RANK, else 0)."""
    return ParallelEnv().rank


def get_world_size():
    """Number of trainers (PADDLE_TRAINERS_NUM, else OMPI_COMM_WORLD_SIZE, else 1)."""
    return ParallelEnv().world_size
