"""Pin a benchmark process to one CPU core with one BLAS / OpenMP / XLA thread.

Call :func:`pin` before numpy or jax is imported (thread counts are read at import).
"""

from __future__ import annotations

import os

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def pin() -> None:
    """Run this process on its lowest-numbered allowed core, one thread per library."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    for variable in THREAD_VARIABLES:
        os.environ[variable] = "1"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {XLA_ONE_THREAD}".strip()


def describe() -> str:
    """One line recording the pinning: CPU, BLAS libraries and their threads, XLA flags."""
    from threadpoolctl import threadpool_info

    blas = [(i["internal_api"], i.get("architecture"), i["num_threads"]) for i in threadpool_info()]
    return (
        f"pinned to CPU {sorted(os.sched_getaffinity(0))}; BLAS {blas}; "
        f"XLA_FLAGS={os.environ['XLA_FLAGS']}"
    )
