"""A fixed pool of threads that takes urgent work before routine work.

``concurrent.futures.ThreadPoolExecutor`` serves its queue first come, first served: under
load the agent API's database threads (``portal.fleet.api.dbthread``) hold a queue of
routine reports, and the one report a lease is waiting for (a node saying it converged)
or the long-poll read that carries new desired state waits behind all of them. This pool
keeps two queues and always takes from the urgent one first (first come, first served
within each). It is an ``Executor``: ``submit`` is routine, ``submit_urgent`` urgent, and
a future cancelled before a thread takes it is never run (``asyncio.wrap_future`` cancels
it when the awaiting request is cancelled, as ``run_in_executor`` did).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")
_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class PriorityThreadPool(Executor):
    def __init__(self, max_workers: int, thread_name_prefix: str = "priority") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers, self.prefix = max_workers, thread_name_prefix
        self._urgent: deque[_Item] = deque()
        self._routine: deque[_Item] = deque()
        self._cv = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._shutdown = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self._put(self._routine, fn, args, kwargs)

    def submit_urgent(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self._put(self._urgent, fn, args, kwargs)

    def queued(self) -> tuple[int, int]:
        """(urgent, routine) items waiting for a thread."""
        with self._cv:
            return len(self._urgent), len(self._routine)

    def _put(self, queue: deque[_Item], fn: Callable[..., T], args: tuple[Any, ...],
             kwargs: dict[str, Any]) -> Future[T]:
        future: Future[T] = Future()
        with self._cv:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            queue.append((future, fn, args, kwargs))
            waiting = len(self._urgent) + len(self._routine)
            if self._idle < waiting and len(self._threads) < self.max_workers:
                self._start_thread()
            self._cv.notify()
        return future

    def _start_thread(self) -> None:
        thread = threading.Thread(target=self._work, daemon=True,
                                  name=f"{self.prefix}_{len(self._threads)}")
        self._threads.append(thread)
        thread.start()

    def _next(self) -> _Item | None:
        with self._cv:
            while not self._urgent and not self._routine:
                if self._shutdown:
                    return None
                self._idle += 1
                self._cv.wait()
                self._idle -= 1
            return self._urgent.popleft() if self._urgent else self._routine.popleft()

    def _work(self) -> None:
        while (item := self._next()) is not None:
            future, fn, args, kwargs = item
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while queued: never run
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # the caller sees it, as with ThreadPoolExecutor
                future.set_exception(exc)
            else:
                future.set_result(result)
            del item, future, fn, args, kwargs

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._cv:
            self._shutdown = True
            if cancel_futures:
                for queue in (self._urgent, self._routine):
                    while queue:
                        queue.popleft()[0].cancel()
            self._cv.notify_all()
        if wait:
            for thread in list(self._threads):
                if thread is not threading.current_thread():
                    thread.join()
