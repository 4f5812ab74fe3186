"""``PerProcess``: one value per process, made once under a lock, never pickled or inherited by a fork."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading

from stream_plugin.storage.per_process import PerProcess


class Maker:
    """A picklable factory that counts what it made and tags each value with its process."""

    def __init__(self) -> None:
        self.made = 0

    def __call__(self) -> tuple[int, int]:
        self.made += 1
        return os.getpid(), self.made


def test_value_is_made_once_per_process_even_from_many_threads() -> None:
    maker = Maker()
    holder = PerProcess(maker)
    threads = [threading.Thread(target=holder.get) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert holder.get() == (os.getpid(), 1) and maker.made == 1


def test_pickled_holder_makes_its_own_value() -> None:
    holder = PerProcess(Maker())
    holder.get()
    copy = pickle.loads(pickle.dumps(holder))
    assert copy._value is None  # the value did not travel
    assert copy.get()[0] == os.getpid()


def _child_value(holder: PerProcess[tuple[int, int]], queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(holder.get())


def test_forked_process_does_not_reuse_the_parents_value() -> None:
    holder = PerProcess(Maker())
    parent = holder.get()
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_value, args=(holder, queue))
    child.start()
    value = queue.get(timeout=30)
    child.join(timeout=30)
    assert value[0] == child.pid and value[0] != parent[0]
