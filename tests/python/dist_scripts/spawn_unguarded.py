"""Calls spawn at import time, without `if __name__ == "__main__":`: each
spawned rank re-imports this file and must refuse to spawn again."""
import pe.distributed as dist


def work():
    pass


dist.spawn(work, nprocs=2)
