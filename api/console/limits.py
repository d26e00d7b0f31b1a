"""How often a sign-in may fail: per client address and per attempted identity.

After `max_failures` failed sign-ins within `window_seconds` from one address, or naming
one identity, further attempts are refused (429, `Retry-After`) until the oldest failure
leaves the window, without checking the credential at all. Memory is bounded: at most
`max_keys` addresses and as many identities are remembered (the least recently failed is
forgotten first), each with at most `max_failures` times.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

MAX_FAILURES = 5
WINDOW_SECONDS = 60.0
MAX_KEYS = 10_000


class _Window:
    """Failure times per key, bounded in keys and in times per key."""

    def __init__(self, max_failures: int, window: float, max_keys: int) -> None:
        self.max_failures = max_failures
        self.window = window
        self.max_keys = max_keys
        self.times: OrderedDict[str, deque[float]] = OrderedDict()

    def wait(self, key: str, now: float) -> float:
        """Seconds until `key` may try again (0: now)."""
        times = self.times.get(key)
        if times is None:
            return 0.0
        while times and now - times[0] >= self.window:
            times.popleft()
        if not times:
            del self.times[key]
            return 0.0
        if len(times) < self.max_failures:
            return 0.0
        return times[0] + self.window - now

    def add(self, key: str, now: float) -> None:
        times = self.times.get(key)
        if times is None:
            while len(self.times) >= self.max_keys:
                self.times.popitem(last=False)
            times = self.times[key] = deque(maxlen=self.max_failures)
        times.append(now)
        self.times.move_to_end(key)


class SignInLimiter:
    """Failed sign-ins per client address and per attempted identity; thread-safe."""

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        window_seconds: float = WINDOW_SECONDS,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._ips = _Window(max_failures, window_seconds, max_keys)
        self._ids = _Window(max_failures, window_seconds, max_keys)

    def retry_after(self, ip: str, identity: str | None) -> int:
        """Whole seconds until an attempt from `ip` naming `identity` may be made (0: now)."""
        now = self._clock()
        with self._lock:
            wait = self._ips.wait(ip, now)
            if identity:
                wait = max(wait, self._ids.wait(identity, now))
        return math.ceil(wait) if wait > 0 else 0

    def failed(self, ip: str, identity: str | None) -> None:
        now = self._clock()
        with self._lock:
            self._ips.add(ip, now)
            if identity:
                self._ids.add(identity, now)
