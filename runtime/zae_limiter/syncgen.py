"""One mechanism that makes the sync facade from the async classes (docs/sync.md).

Every coroutine runs on one background event-loop thread, shared by all caller threads, so
requests the async code sends together are still sent together. A sync class is generated from
its async twin: same public names, signatures and docstrings, results wrapped in sync twins.
"""

from __future__ import annotations

import asyncio
import atexit
import builtins
import functools
import inspect
import os
import re
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
_GENERATED: dict[type, set[str]] = {}  # sync class -> the members `twin` set on it


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


def async_of(value: Any) -> Any:
    """The async object a sync twin wraps (the value itself when it is not a twin)."""
    return getattr(value, "_async", value)


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
    register_twin(async_cls, sync_cls)
    generated = _GENERATED.setdefault(sync_cls, set())
    for name, member in inspect.getmembers(async_cls):
        if name.startswith("_") or name in skip or name in sync_cls.__dict__:
            continue
        generated.add(name)
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


def register_twin(async_cls: type, sync_cls: type) -> None:
    """`wrap` turns instances of `async_cls` into `sync_cls` twins."""
    _TWINS[async_cls] = sync_cls


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


# --- stubs: the generated facade as type checkers see it ------------------------------------------

#: Stub files, each with the (async class, sync class) pairs it declares, in order. A pair with
#: no async class declares only the sync class's own members.
STUBS: dict[str, tuple[tuple[str, str], ...]] = {
    "sync.pyi": (
        ("zae_limiter.repository:Repository", "zae_limiter.sync:SyncRepository"),
        ("", "zae_limiter.sync:SyncAcquisition"),
        ("zae_limiter.limiter:RateLimiter", "zae_limiter.sync:SyncRateLimiter"),
    ),
    "sync_lease.pyi": (
        ("zae_limiter.acquire.lease:LeaseResource", "zae_limiter.sync_lease:SyncLeaseResource"),
        ("zae_limiter.acquire.lease:Lease", "zae_limiter.sync_lease:SyncLease"),
    ),
}

_STUB_HEADER = '"""Generated by `python -m zae_limiter.syncgen` from the async API: do not edit."""'
_DUNDERS = ("__init__", "__enter__", "__exit__")
_BUILTIN_NAMES = frozenset(dir(builtins))


def _load(path: str) -> type:
    import importlib

    module, _, name = path.partition(":")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


def _twin_names() -> dict[str, str]:
    """Async class name -> sync class name, for every twin (the acquisition context too)."""
    out = {"Acquisition": "SyncAcquisition"}
    for pairs in STUBS.values():
        for async_path, sync_path in pairs:
            if async_path:
                out[async_path.partition(":")[2]] = sync_path.partition(":")[2]
    return out


class _StubWriter:
    """Renders one stub file; collects the imports its annotations need."""

    def __init__(self, file_name: str) -> None:
        self.twins = _twin_names()
        self.defined = {path.partition(":")[2] for _, path in STUBS[file_name]}
        self.elsewhere = {  # sync classes other stubs declare: sync name -> module
            path.partition(":")[2]: path.partition(":")[0]
            for other, pairs in STUBS.items()
            if other != file_name
            for _, path in pairs
        }
        self.imports: dict[str, set[str]] = {}
        self.lines: list[str] = []

    def annotation(self, raw: Any, where: dict[str, Any], *, rename: bool = True) -> str:
        """An annotation (string form) with async twins renamed; records imports it needs."""
        text: str = raw if isinstance(raw, str) else str(inspect.formatannotation(raw))
        for async_name, sync_name in self.twins.items() if rename else ():
            text = re.sub(rf"\b{async_name}\b", sync_name, text)
        for name in set(re.findall(r"\b[A-Za-z_]\w*\b", text)):
            self._import(name, where)
        return text

    def _import(self, name: str, where: dict[str, Any]) -> None:
        if name in self.elsewhere:
            self.imports.setdefault(self.elsewhere[name], set()).add(name)
            return
        if name in self.defined or name in _BUILTIN_NAMES or name not in where:
            return
        import sys

        obj = where[name]
        if inspect.ismodule(obj):
            parent, _, leaf = obj.__name__.rpartition(".")
            alias = leaf if leaf == name else f"{leaf} as {name}"
            self.imports.setdefault(parent, set()).add(alias)
            return
        package = sys.modules["zae_limiter"]
        if name in getattr(package, "__all__", ()) and getattr(package, name) is obj:
            self.imports.setdefault("zae_limiter", set()).add(name)  # the public name
            return
        # where the object is defined, else (a type alias) the module whose globals named it
        home = getattr(obj, "__module__", None)
        if home == "builtins":
            home = "types"
        if home not in sys.modules or getattr(sys.modules[home], name, None) is not obj:
            home = where["__name__"]
        self.imports.setdefault(home, set()).add(name)

    def signature(self, fn: Callable[..., Any], first: str, *, rename_params: bool) -> str:
        sig = inspect.signature(fn)
        where = getattr(inspect.unwrap(fn), "__globals__", {})
        params: list[str] = []
        star_done = False
        for p in sig.parameters.values():
            if not params and p.name in ("self", "cls"):
                params.append(first)
                continue
            text = p.name
            if p.kind is p.VAR_POSITIONAL:
                text, star_done = f"*{p.name}", True
            elif p.kind is p.VAR_KEYWORD:
                text = f"**{p.name}"
            elif p.kind is p.KEYWORD_ONLY and not star_done:
                params.append("*")
                star_done = True
            if p.annotation is not p.empty:
                text += f": {self.annotation(p.annotation, where, rename=rename_params)}"
            if p.default is not p.empty:
                text += " = ..."
            params.append(text)
        ret = ""
        if sig.return_annotation is not sig.empty:
            ret = f" -> {self.annotation(sig.return_annotation, where)}"
        return f"({', '.join(params)}){ret}"

    def member(self, name: str, raw: Any, owner: type, *, rename_params: bool = True) -> None:
        """One member: the sync twin of an async one, or (rename_params False) the sync class's
        own, whose parameters already name sync types or the async ones they wrap."""
        if isinstance(raw, property):
            assert raw.fget is not None
            text = self.signature(raw.fget, "self", rename_params=rename_params)
            self.lines += ["    @property", f"    def {name}{text}: ..."]
        elif isinstance(raw, classmethod):
            text = self.signature(raw.__func__, "cls", rename_params=rename_params)
            self.lines += ["    @classmethod", f"    def {name}{text}: ..."]
        elif inspect.isfunction(raw):
            text = self.signature(getattr(owner, name), "self", rename_params=rename_params)
            self.lines.append(f"    def {name}{text}: ...")

    def sync_class(self, async_cls: type | None, sync_cls: type) -> None:
        self.lines += ["", "", f"class {sync_cls.__name__}:"]
        if sync_cls.__doc__:
            self.lines.append(f'    """{inspect.cleandoc(sync_cls.__doc__)}"""')
        generated = _GENERATED.get(sync_cls, set())
        own = {
            n: m
            for n, m in vars(sync_cls).items()
            if n not in generated and (n in _DUNDERS or not n.startswith("_"))
        }
        for name, raw in own.items():
            self.member(name, raw, sync_cls, rename_params=False)
        for name in sorted(generated):
            assert async_cls is not None
            self.member(name, inspect.getattr_static(async_cls, name), async_cls)

    def render(self, exports: list[str]) -> str:
        """The stub, formatted as `ruff format` would (so the tree's formatter leaves it be)."""
        for name in exports:  # re-exported from another stub: explicitly
            if name in self.elsewhere:
                self.imports.setdefault(self.elsewhere[name], set()).add(f"{name} as {name}")
                self.imports[self.elsewhere[name]].discard(name)
        head = [_STUB_HEADER, "", "from __future__ import annotations", ""]
        ours = sorted(m for m in self.imports if m.split(".")[0] == "zae_limiter")
        theirs = sorted(m for m in self.imports if m not in ours)
        for group in (theirs, ours):
            for module in group:
                names = sorted(n for n in self.imports[module] if " as " not in n)
                if names:
                    head.append(f"from {module} import {', '.join(names)}")
                aliased = sorted(n for n in self.imports[module] if " as " in n)
                head += [f"from {module} import {alias}" for alias in aliased]
            head.append("")
        tail = ["", f"__all__ = {exports!r}"] if exports else []
        return _ruff_format("\n".join(head + self.lines + tail) + "\n")


def _ruff_format(text: str) -> str:
    """`text` through `ruff format` (a development tool: stubs are generated in a dev setup)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        raise RuntimeError("generating the sync stubs needs ruff (pip install -e '.[dev]')")
    done = subprocess.run(
        [ruff, "format", "--stdin-filename", "stub.pyi", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def render_stub(file_name: str) -> str:
    """The text of one generated stub file of the sync facade."""
    import importlib

    writer = _StubWriter(file_name)
    exports: list[str] = []
    for async_path, sync_path in STUBS[file_name]:
        sync_cls = _load(sync_path)
        exports = list(getattr(importlib.import_module(sync_cls.__module__), "__all__", []))
        writer.sync_class(_load(async_path) if async_path else None, sync_cls)
    return writer.render(exports)


def write_stubs() -> list[str]:
    """Write every stub next to its module; returns the paths written."""
    from pathlib import Path

    here = Path(__file__).parent
    written = []
    for name in STUBS:
        (here / name).write_text(render_stub(name), encoding="utf-8")
        written.append(str(here / name))
    return written


if __name__ == "__main__":
    # run as a script this is a second copy of the module: use the one the facade filled
    from zae_limiter import syncgen as _facade

    for written_path in _facade.write_stubs():
        print(written_path)
