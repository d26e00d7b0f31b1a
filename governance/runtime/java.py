"""Java compiled in the driver's JVM by Janino, the compiler Spark itself uses.

The plan walker (`verify/plan.py`), the statement guard (`verify/guard.py`) and the Spark
Connect backend (`api/connect/backend.py`) each ship a Java source next to their module; this
compiles one instance of each class once per JVM and keeps it: py4j caches methods by class
name, so a second class of the same name (from another Janino loader) would be called through
the first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

_instances: dict[tuple[int, str], Any] = {}
_lock = threading.RLock()


def compiled(
    jvm: Any,
    gateway: Any,
    class_name: str,
    source: Callable[[], str],
    *,
    ready: Callable[[Any], None] | None = None,
) -> Any:
    """The JVM's one instance of `class_name`, compiled from `source()` on first use under
    the thread's context class loader (Spark's classes visible), built by its no-argument
    constructor; `ready` prepares it before any other thread can see it."""
    key = (id(jvm), class_name)
    found = _instances.get(key)
    if found is not None:
        return found
    with _lock:
        found = _instances.get(key)
        if found is None:
            compiler = jvm.org.codehaus.janino.SimpleCompiler()
            compiler.setParentClassLoader(
                jvm.java.lang.Thread.currentThread().getContextClassLoader()
            )
            compiler.cook(source())
            cls = compiler.getClassLoader().loadClass(class_name)
            ctor = cls.getDeclaredConstructor(gateway.new_array(jvm.java.lang.Class, 0))
            found = ctor.newInstance(gateway.new_array(jvm.java.lang.Object, 0))
            if ready is not None:
                ready(found)
            _instances[key] = found
    return found
