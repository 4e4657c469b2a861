"""``RayExecutor``: a batch's episodes as Ray tasks, so rollouts scale past one machine.

The batch is split into one chunk per worker; each chunk runs as a Ray task that receives the pickled
``Rollout`` (team, environment factory, round) and returns its episodes. Workers recall from the
shared memory store and log their recalls there, so the loop's process can reinforce them by id;
learning stays in the loop's process.

How a team travels: the rollout is pickled once per batch (``pack``) with two substitutions. A
``MemoryStore`` goes as its address (URL, config, pickled embedder) and a worker process reopens each
address once and keeps it open (``open_store``), so its vector mirror is loaded once and then only
caught up; a store in an in-memory SQLite database cannot be shared and is refused. A lock goes as a
fresh lock (a lock's state means nothing in another process). Everything else (chat backends,
embedders, the environment factory) is pickled by value; what cannot be is named in a ``ConfigError``.
Each worker keeps its own copy of the chat clients, so usage counted by the loop's ``ChatClient``
objects leaves out worker calls (every episode still carries its own usage, which the round metrics sum).

Failures: an exception raised by the episode code in a worker is raised again here, as it would be
in-process (its type kept, the worker's traceback in the message). A worker that dies (killed,
out of memory, its node lost) has its chunk re-run by Ray up to ``max_retries`` times; after that the
batch raises a retryable ``ConnectorError``. Nothing of that batch is recorded or learned from, so
running again resumes from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import io
import pickle
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from connectors import ConfigError, ConnectorError
from connectors.db import sqlite_path
from connectors.install import extra_hint
from evolve.envs.tasks import Task
from evolve.episode import Episode
from evolve.executors import Executor, InProcess, Rollout, split
from memory import MemoryConfig, MemoryStore

EXECUTORS = ("inprocess", "ray")  # the executors make_executor builds by name

OPEN_STORES = 8
"""How many stores a worker process keeps open; the least recently used beyond that is closed."""

_LOCKS: dict[type, Any] = {type(threading.Lock()): threading.Lock, type(threading.RLock()): threading.RLock}
_open: OrderedDict[tuple[str, str, int, str], MemoryStore] = OrderedDict()
_open_lock = threading.Lock()


def _ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise ConfigError(f"executor='ray' needs Ray, which is not installed: {extra_hint('distributed')}") from e
    return ray


@dataclass(frozen=True)
class StoreAddress:
    """What a worker needs to open a ``MemoryStore`` on the same database; the embedder stays pickled
    until a process opens the address for the first time."""

    url: str
    config: MemoryConfig
    embedder_name: str
    dim: int
    embedder: bytes

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.url, self.embedder_name, self.dim, repr(self.config))


def store_address(store: MemoryStore) -> StoreAddress:
    """The store's address; ``ConfigError`` for an in-memory SQLite store (no other process can see it)."""
    if store.url.startswith("sqlite") and sqlite_path(store.url) is None:
        raise ConfigError(
            f"a MemoryStore in an in-memory SQLite database ({store.url!r}) cannot be shared with Ray workers: "
            "each process would see its own empty database. Use a database file (sqlite:///path/evolve.db) "
            "or PostgreSQL (postgresql+psycopg://user@host/db), or executor='inprocess'"
        )
    name = getattr(store.embedder, "name", type(store.embedder).__qualname__)
    return StoreAddress(store.url, store.config, str(name), store.dim, _dumps(store.embedder))


def open_store(address: StoreAddress) -> MemoryStore:
    """The store at ``address``, opened once per process and kept (``OPEN_STORES`` at most)."""
    with _open_lock:
        store = _open.get(address.key)
        if store is None:
            store = MemoryStore(address.url, embedder=pickle.loads(address.embedder), config=address.config)
            _open[address.key] = store
            while len(_open) > OPEN_STORES:
                _open.popitem(last=False)[1].close()
        _open.move_to_end(address.key)
        return store


def _reduce(obj: Any) -> Any:
    """How ``pack`` sends what plain pickling cannot: stores by address, locks as fresh locks."""
    if isinstance(obj, MemoryStore):
        return open_store, (store_address(obj),)
    fresh = _LOCKS.get(type(obj))
    if fresh is not None:
        return fresh, ()
    return NotImplemented


@functools.cache
def _pickler() -> type:
    cloudpickle = _ray().cloudpickle

    class Shipper(cloudpickle.Pickler):  # type: ignore[misc, name-defined]
        def reducer_override(self, obj: Any) -> Any:
            reduced = _reduce(obj)
            return super().reducer_override(obj) if reduced is NotImplemented else reduced

    return Shipper


def _dumps(obj: object) -> bytes:
    buf = io.BytesIO()
    _pickler()(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def pack(rollout: Rollout) -> bytes:
    """The rollout as bytes a worker can ``unpack``; ``ConfigError`` naming the part that cannot travel."""
    try:
        return _dumps(rollout)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(
            f"RayExecutor sends the team and the environment factory to Ray workers by pickling, and "
            f"{_culprit(rollout)} cannot be pickled ({type(e).__name__}: {e}). Make it picklable (no open "
            "files, sockets or database connections in it; a response cache must stay in memory), "
            "or use executor='inprocess'"
        ) from e


def unpack(payload: bytes) -> Rollout:
    """The rollout ``pack`` made, with its stores reopened in this process."""
    rollout = pickle.loads(payload)
    if not isinstance(rollout, Rollout):
        raise ConfigError(f"unpack expected a packed Rollout, got {type(rollout).__name__}")
    return rollout


def _parts(rollout: Rollout) -> Iterator[tuple[str, object]]:
    yield "the environment factory", rollout.env_factory
    for name, agent in rollout.team.agents.items():
        backend = getattr(agent.model, "backend", agent.model)
        yield f"agent {name!r}'s model ({type(backend).__name__})", agent.model
        yield f"agent {name!r}'s memory view", agent.memory
        yield f"agent {name!r}'s params", agent.params


def _culprit(rollout: Rollout) -> str:
    """The first part of the rollout that does not pickle on its own."""
    for what, part in _parts(rollout):
        try:
            _dumps(part)
        except Exception:
            return what
    return "some part of the team"


def run_chunk(payload: bytes, tasks: list[Task]) -> list[Episode]:
    """A Ray task: one chunk of a batch's episodes."""
    return unpack(payload)(tasks)


class RayExecutor:
    """Runs each batch as Ray tasks, one chunk of its tasks per worker, memory shared through its database.

    Ray starts on the first batch: an already initialised Ray is used as it is; otherwise
    ``ray.init(address, **init)`` connects to ``address`` (``"auto"``, ``"ray://head:10001"``; None:
    ``$RAY_ADDRESS`` or a fresh local cluster), and ``close`` shuts down what this executor started.

    Args:
        address: the Ray cluster to connect to when Ray is not initialised yet.
        workers: chunks per batch, run in parallel; None: one per CPU of the cluster.
        num_cpus: CPUs each chunk reserves (fractions allowed).
        max_retries: times Ray re-runs a chunk whose worker died before the batch fails.
        options: other Ray task options (``num_gpus``, ``resources``, ``runtime_env``...).
        init: other ``ray.init`` arguments, used only when this executor starts Ray.

    Example:
        >>> executor = RayExecutor(workers=4, max_retries=1)
        >>> executor.workers, executor.max_retries
        (4, 1)
        >>> # Evolver(team, tasks, memory=MemoryStore("postgresql+psycopg://…", embedder=e), executor=executor)
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        workers: int | None = None,
        num_cpus: float = 1.0,
        max_retries: int = 2,
        options: Mapping[str, Any] | None = None,
        init: Mapping[str, Any] | None = None,
    ) -> None:
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ConfigError(f"RayExecutor workers must be an int >= 1 or None (one per CPU), got {workers!r}")
        if num_cpus < 0 or max_retries < 0:
            raise ConfigError(f"RayExecutor num_cpus and max_retries must be >= 0, got {num_cpus} and {max_retries}")
        self.address = address
        self.workers = workers
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self.options = dict(options or {})
        self.init = dict(init or {})
        self._task: Any = None
        self._started = False

    def check(self, rollout: Rollout) -> None:
        """Raise the ``ConfigError`` a batch would raise: Ray missing, or a rollout that cannot be sent."""
        _ray()
        pack(rollout)

    def run(self, rollout: Rollout, tasks: Sequence[Task]) -> list[Episode]:
        """The episodes of ``tasks`` in order, run in chunks on the cluster's workers."""
        tasks = list(tasks)
        if not tasks:
            return []
        payload = pack(rollout)
        ray = self._connect()
        ref = ray.put(payload)
        chunks = split(tasks, self.workers or max(1, int(ray.cluster_resources().get("CPU", 1))))
        refs = [self._remote(ray).remote(ref, chunk) for chunk in chunks]
        out: list[Episode] = []
        try:
            for r, chunk in zip(refs, chunks, strict=True):
                out.extend(self._get(ray, r, chunk, rollout.round))
        except BaseException:
            for r in refs:
                with contextlib.suppress(Exception):  # a finished chunk has nothing to cancel
                    ray.cancel(r)
            raise
        return out

    def close(self) -> None:
        """Shut Ray down if this executor started it. Idempotent."""
        if self._started:
            self._started = False
            _ray().shutdown()

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.address!r}, workers={self.workers}, max_retries={self.max_retries})"

    def _connect(self) -> Any:
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=self.address, **self.init)
            self._started = True
        return ray

    def _remote(self, ray: Any) -> Any:
        if self._task is None:
            opts = {"num_cpus": self.num_cpus, "max_retries": self.max_retries, **self.options}
            self._task = ray.remote(run_chunk).options(**opts)
        return self._task

    def _get(self, ray: Any, ref: Any, chunk: list[Task], round_: int) -> list[Episode]:
        try:
            episodes: list[Episode] = ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            raise e.as_instanceof_cause() from None  # the episode code's own error, as in-process
        except ray.exceptions.RayError as e:
            ids = ", ".join(t.id for t in chunk)
            raise ConnectorError(
                f"a Ray worker was lost running the episodes of tasks [{ids}] in round {round_} "
                f"(after {self.max_retries} retries): {type(e).__name__}: {e}. Nothing of this batch was recorded "
                "or learned from: run again to resume from the last checkpoint, or allow more retries "
                "(RayExecutor(max_retries=...))",
                retryable=True,
            ) from e
        return episodes


def make_executor(executor: str | Executor = "inprocess", **options: Any) -> Executor:
    """An executor by name (``"inprocess"``, ``"ray"``; ``options`` go to ``RayExecutor``), or the
    given object when it has ``run(rollout, tasks)``."""
    if isinstance(executor, str):
        if executor == "inprocess":
            if options:
                raise ConfigError(f"the inprocess executor takes no options, got {sorted(options)}")
            return InProcess()
        if executor == "ray":
            return RayExecutor(**options)
        raise ConfigError(f"unknown executor {executor!r}; expected one of {list(EXECUTORS)} or an Executor object")
    if not isinstance(executor, Executor):
        raise ConfigError(
            f"executor must be one of {list(EXECUTORS)} or an object with run(rollout, tasks), got {executor!r}"
        )
    if options:
        raise ConfigError(f"executor options {sorted(options)} apply only to an executor given by name")
    return executor


__all__ = [
    "EXECUTORS",
    "OPEN_STORES",
    "RayExecutor",
    "StoreAddress",
    "make_executor",
    "open_store",
    "pack",
    "run_chunk",
    "store_address",
    "unpack",
]
