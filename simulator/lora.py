"""LoRA adapters of one simulated server: registry and GPU slots (sans-I/O, times passed in).

* *Registered* adapters (``--lora-modules``, ``/v1/load_lora_adapter``) are the ones a request may name
  and the ones ``/v1/models`` lists.
* At most ``max_loras`` adapters are *resident* (in a GPU slot). A request for a non-resident adapter
  can start when a slot is free or a resident adapter is idle (no running request uses it; the least
  recently used idle one is evicted). Loading takes ``load_time`` simulated seconds: :meth:`acquire`
  returns the time the adapter is ready, and requests admitted meanwhile wait for it.
* Otherwise :meth:`can_acquire` is False and the request stays queued (LoRA-aware skipping).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LoraSlots"]


@dataclass(slots=True)
class _Resident:
    ready_at: float
    active: int = 0
    last_used: float = 0.0


class LoraSlots:
    """Registry of known adapters and the resident set bounded by ``max_loras``."""

    __slots__ = ("_registered", "_resident", "load_time", "loads", "max_loras")

    def __init__(self, max_loras: int, load_time: float, registered: dict[str, str] | None = None) -> None:
        self.max_loras = max_loras
        self.load_time = load_time
        self._registered: dict[str, str] = dict(registered or {})  # name -> path
        self._resident: dict[str, _Resident] = {}
        self.loads = 0

    # -- registry -----------------------------------------------------------------------------------
    def register(self, name: str, path: str) -> bool:
        """Register an adapter; False if already registered."""
        if name in self._registered:
            return False
        self._registered[name] = path
        return True

    def unregister(self, name: str) -> bool:
        """Forget an adapter (and free its slot if idle); False if unknown or in use."""
        if name not in self._registered:
            return False
        res = self._resident.get(name)
        if res is not None and res.active > 0:
            return False
        self._resident.pop(name, None)
        del self._registered[name]
        return True

    def is_registered(self, name: str) -> bool:
        return name in self._registered

    @property
    def registered(self) -> dict[str, str]:
        return dict(self._registered)

    # -- slots --------------------------------------------------------------------------------------
    def resident(self) -> list[str]:
        return list(self._resident)

    def running(self) -> list[str]:
        """Adapters with at least one running request."""
        return [n for n, r in self._resident.items() if r.active > 0]

    def can_acquire(self, name: str) -> bool:
        if name in self._resident or len(self._resident) < self.max_loras:
            return True
        return any(r.active == 0 for r in self._resident.values())

    def acquire(self, name: str, now: float) -> float:
        """Count a running request on ``name`` (loading it if needed); return when it is ready.

        Precondition: :meth:`can_acquire` is True.
        """
        res = self._resident.get(name)
        if res is None:
            if len(self._resident) >= self.max_loras:
                idle = [(r.last_used, n) for n, r in self._resident.items() if r.active == 0]
                if not idle:
                    raise RuntimeError(f"no LoRA slot for {name!r}: check can_acquire first")
                del self._resident[min(idle)[1]]
            res = _Resident(ready_at=now + self.load_time)
            self._resident[name] = res
            self.loads += 1
        res.active += 1
        res.last_used = now
        return res.ready_at

    def release(self, name: str, now: float) -> None:
        res = self._resident[name]
        res.active -= 1
        res.last_used = now
