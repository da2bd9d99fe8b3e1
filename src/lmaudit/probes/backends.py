"""Where shard work runs: in this process (``local``) or on Ray actors (``ray``).

A *task* is a picklable callable ``task(handle, shard) -> result``: the probe code
itself (see :mod:`lmaudit.probes.shards`), so both backends run one implementation
of every statistic. ``handle`` is a :class:`~lmaudit.models.handle.ModelHandle`.

The Ray backend starts ``workers`` actors per model; each loads the model once —
from its local folder with the options it was loaded with here, or, for a model
that only lives in memory, from a copy sent through Ray's object store — and then
serves shards until another model is needed. Results come back to this process,
which writes the caches, so a worker never touches the cache directory.

Ray is an optional extra (``pip install 'lmaudit[ray]'``).
"""

from __future__ import annotations

import contextvars
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from lmaudit.errors import LmauditError
from lmaudit.models.loading import load_model
from lmaudit.progress import set_quiet
from lmaudit.settings import integer

BACKENDS = ("local", "ray")

Task = Callable[[Any, Any], Any]


class LocalBackend:
    """Run every shard in this process, in order."""

    name = "local"

    def map(self, handle, task: Task, shards: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
        for index, shard in shards:
            yield index, task(handle, shard)

    def close(self) -> None:
        pass


def _require_ray():
    try:
        import ray
    except ImportError:
        raise LmauditError(
            "--backend ray needs Ray, which is not installed",
            hint="pip install 'lmaudit[ray]' (or use the default --backend local)",
        ) from None
    return ray


def _load_handle(source, tokenizer):
    """What a worker serves: a ModelHandle, loaded from its folder (a dict of load options) or given.

    It tokenises (and pads) with ``tokenizer``, the one the driver gave the task (a
    reference model is probed on the target's token ids).
    """
    if isinstance(source, dict):
        source = load_model(**source, device=None)
    source.tokenizer = tokenizer
    if source.adapter is not None:
        source.adapter.tokenizer = tokenizer
    return source


def _worker_class(ray):
    @ray.remote
    class ShardWorker:
        def __init__(self, source, tokenizer, threads: int) -> None:
            set_quiet(True)  # the driver shows the progress
            torch.set_num_threads(max(1, threads))
            self.handle = _load_handle(source, tokenizer)

        def run(self, task: Task, index: int, shard):
            with warnings.catch_warnings(record=True) as caught:  # handed to the driver, which shows them
                warnings.simplefilter("always")
                result = task(self.handle, shard)
            return index, result, [(str(w.message), w.category) for w in caught]

    return ShardWorker


class RayBackend:
    """Send shards to Ray actors that each hold one copy of the model.

    ``address`` joins a running cluster (``"auto"`` or ``ray://...``); without it a
    local instance with ``num_cpus`` CPUs starts. Each worker runs with this process's
    number of torch threads, so that its results are bit-identical to the local
    backend's (``threads_per_worker`` trades that for other thread counts).
    ``workers`` defaults to one per GPU where the cluster has GPUs, else to CPUs ÷
    threads per worker (no oversubscription). More workers than GPUs or CPUs share
    them (fractional Ray resources), so every actor can be placed.
    """

    name = "ray"

    def __init__(self, *, address: str | None = None, workers: int | None = None, num_cpus: int | None = None,
                 threads_per_worker: int | None = None) -> None:
        ray = _require_ray()
        self._ray = ray
        integer(1, optional=True)(workers, "workers", "--workers")  # the check RunOptions declares, for a caller here
        if not ray.is_initialized():
            kwargs: dict = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR",
                            "configure_logging": True}
            if address:
                kwargs["address"] = address
            else:
                kwargs["num_cpus"] = num_cpus or os.cpu_count() or 1
            os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
            try:
                ray.init(**kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"the Ray cluster at '{address}'" if address else "a local Ray instance"
                raise LmauditError(f"cannot start or join {where}: {exc}") from None

        resources = ray.cluster_resources()
        gpus, cpus = resources.get("GPU", 0), resources.get("CPU", 1)
        # As many threads as this process: a reduction split over another number of threads rounds
        # differently, and the results must be bit-identical to the local backend's.
        self._threads = threads_per_worker or torch.get_num_threads()
        self.workers = workers or (int(gpus) or max(1, int(cpus) // self._threads))
        if gpus:
            self._options = {"num_gpus": min(1.0, gpus / self.workers), "num_cpus": 0}
        else:
            self._options = {"num_cpus": min(1.0, cpus / self.workers)}
        self._actors: list = []
        self._source_key: Any = None
        self._cls = _worker_class(ray)

    def _pool(self, handle) -> list:
        spec = getattr(handle.model, "lmaudit_load_spec", None)
        # a model from a folder is the same model while its files (fingerprint) and load options are; one
        # that lives in memory may have changed since the last call (training in place): never reused
        key = (("spec", tuple(sorted(spec.items())), handle.fingerprint, id(handle.tokenizer)) if spec is not None
               else ("object", object()))
        if key != self._source_key:  # another model: free the previous actors first
            self._kill()
            source = dict(spec) if spec is not None else self._ray.put(handle)
            self._actors = [self._cls.options(**self._options).remote(source, handle.tokenizer, self._threads)
                            for _ in range(self.workers)]
            self._source_key = key
        return self._actors

    def map(self, handle, task: Task, shards: Iterable[tuple[int, Any]]) -> Iterator[tuple[int, Any]]:
        """Yield ``(index, task(model, shard))`` as shards finish (not in order)."""
        from ray.util import ActorPool


        pool = ActorPool(self._pool(handle))
        seen: set = set()
        try:
            for index, result, caught in pool.map_unordered(lambda actor, item: actor.run.remote(task, *item),
                                                            list(shards)):
                for message, category in caught:
                    if message not in seen:
                        seen.add(message)
                        warnings.warn(message, category, stacklevel=2)
                yield index, result
        except self._ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), Exception) else None
            if isinstance(cause, LmauditError):
                raise cause from None
            raise LmauditError(f"a Ray worker failed: {cause or exc}") from None
        except self._ray.exceptions.RayActorError as exc:
            self._kill()
            raise LmauditError(
                f"a Ray worker failed to start or died: {exc}",
                hint="a worker loads the model from the same folder path: on a cluster it must exist on every node; "
                     "after a lost node, re-run the same command (finished shards are cached)") from None

    def _kill(self) -> None:
        for actor in self._actors:
            self._ray.kill(actor)
        self._actors, self._source_key = [], None

    def close(self) -> None:
        self._kill()


_CURRENT: contextvars.ContextVar = contextvars.ContextVar("lmaudit_backend", default=None)


def current_backend():
    """The backend shard work goes to (the local one unless :func:`use_backend` set another)."""
    return _CURRENT.get() or LocalBackend()


def make_backend(name: str = "local", *, address: str | None = None, workers: int | None = None):
    if name not in BACKENDS:
        raise LmauditError(f"unknown backend '{name}'", hint=f"use one of {', '.join(BACKENDS)}")
    if name == "local":
        if address is not None or workers is not None:
            raise LmauditError("--address and --workers need --backend ray")
        return LocalBackend()
    return RayBackend(address=address, workers=workers)


@contextmanager
def use_backend(backend, *, close: bool = True) -> Iterator:
    """Send shard work inside the block to ``backend`` (a name or a backend object); close it after
    unless ``close=False`` (a backend reused by several blocks)."""
    if isinstance(backend, str):
        backend = make_backend(backend)
    token = _CURRENT.set(backend)
    try:
        yield backend
    finally:
        _CURRENT.reset(token)
        if close:
            backend.close()
