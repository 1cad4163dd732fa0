"""One mechanism that makes the sync facade from the async classes (docs/sync.md).

Every coroutine runs on one background event-loop thread, shared by all caller threads, so
requests the async code sends together are still sent together. A sync class is generated from
its async twin: same public names, signatures and docstrings, results wrapped in sync twins.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import inspect
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="zae-limiter-sync", daemon=True
                )
                thread.start()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        loop = self.loop()
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync zae-limiter call was made from its own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


_runner = _LoopThread()
atexit.register(lambda: None)
_TWINS: dict[type, type] = {}


def run(coro: Coroutine[Any, Any, T]) -> T:
    return _runner.run(coro)


def wrap(value: Any) -> Any:
    """An async object's sync twin (or the value itself)."""
    twin = _TWINS.get(type(value))
    if twin is not None:
        obj: Any = object.__new__(twin)
        obj._async = value
        return obj
    return value


def _sync_method(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return wrap(run(getattr(self._async, name)(*args, **kwargs)))

    return method


def _sync_classmethod(cls: type, name: str, fn: Callable[..., Any]) -> Any:
    @functools.wraps(fn)
    def method(_cls: Any, *args: Any, **kwargs: Any) -> Any:
        return wrap(run(getattr(cls, name)(*args, **kwargs)))

    return classmethod(method)


def _sync_property(name: str) -> property:
    return property(lambda self: wrap(getattr(self._async, name)))


def _sync_plain(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return wrap(getattr(self._async, name)(*args, **kwargs))

    return method


def twin(async_cls: type, sync_cls: type, *, skip: tuple[str, ...] = ()) -> type:
    """Fill `sync_cls` with sync versions of `async_cls`'s public members."""
    _TWINS[async_cls] = sync_cls
    for name, member in inspect.getmembers(async_cls):
        if name.startswith("_") or name in skip or name in sync_cls.__dict__:
            continue
        raw = inspect.getattr_static(async_cls, name)
        if isinstance(raw, classmethod):
            if inspect.iscoroutinefunction(raw.__func__):
                setattr(sync_cls, name, _sync_classmethod(async_cls, name, raw.__func__))
        elif isinstance(raw, property):
            setattr(sync_cls, name, _sync_property(name))
        elif inspect.iscoroutinefunction(member):
            setattr(sync_cls, name, _sync_method(name, member))
        elif inspect.isfunction(member):
            setattr(sync_cls, name, _sync_plain(name, member))
    return sync_cls


def public_signatures(cls: type) -> dict[str, str]:
    """Public members and their signatures (for the facade check)."""
    out = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, property):
            out[name] = "property"
        elif callable(member):
            try:
                out[name] = str(inspect.signature(member))
            except (TypeError, ValueError):
                out[name] = "?"
        else:
            out[name] = "attribute"
    return out
