"""``ModelThread``: every call of a model runs on its one thread, whichever thread asks; work on that
thread may call it again without waiting on itself; errors reach the caller."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from connectors.errors import ConnectorError
from connectors.model_thread import ModelThread


def test_calls_from_many_threads_all_run_on_the_one_model_thread() -> None:
    worker = ModelThread("modèle-Zürich")
    with ThreadPoolExecutor(8) as callers:
        idents = set(callers.map(lambda _: worker.run(threading.get_ident), range(32)))
    assert len(idents) == 1 and threading.get_ident() not in idents


def test_work_on_the_model_thread_may_call_it_again() -> None:
    worker = ModelThread("nested")
    assert worker.run(lambda: worker.run(lambda: 41) + 1) == 42  # no deadlock: it runs in place


def test_an_error_reaches_the_caller_and_the_thread_goes_on() -> None:
    worker = ModelThread("errors")

    def fail() -> None:
        raise ConnectorError("the model fell over")

    with pytest.raises(ConnectorError, match="fell over"):
        worker.run(fail)
    assert worker.run(lambda: "again") == "again"


def test_the_shared_torch_thread_is_one_for_the_process() -> None:
    assert ModelThread.shared() is ModelThread.shared()
    assert ModelThread.shared().run(lambda: threading.current_thread().name).startswith("torch")
