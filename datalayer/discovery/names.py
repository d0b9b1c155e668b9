"""Declared endpoints whose host may be a name -> endpoints whose address is ``ip:port``.

:class:`NameResolution` expands declared :class:`~datalayer.records.EndpointSpec` objects (``address``
may be ``name:port``) into concrete ones. An IP-literal address is kept as it is; a host name becomes
one endpoint per address it resolves to (every A and AAAA record, as an Envoy STRICT_DNS cluster;
IPv6 bracketed, ``[fd00::1]:8000``), with the declared entry's labels and engine, named after the entry
(its ``name`` when the host has one address, ``<name>/<ip>`` when it has several). So the destination
written to the proxy is always an IP address, which Envoy's ORIGINAL_DST cluster needs.

* Bound: a name yields at most ``max_addresses`` endpoints (default :data:`MAX_ADDRESSES_PER_NAME`,
  256, the fleet size the scrapers are measured at); beyond it the first addresses in sorted order are
  kept and a warning is logged. At most ``concurrency`` lookups run at once.
* ``strict=True`` (start-up): a name that does not resolve, or two entries that resolve to the same
  ``ip:port``, raise :class:`ResolutionError` naming the entry and the name.
* ``strict=False`` (later rounds): a name that does not resolve keeps its last good addresses (none if
  it never resolved) and logs one warning per distinct problem; recovery and address changes are logged
  at info. Of two entries resolving to the same ``ip:port`` the first keeps it (one warning).

State is kept per name currently declared: names that leave the list are forgotten.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import replace

import structlog

from datalayer.discovery.base import is_ip_literal, join_address, split_address
from datalayer.discovery.resolve import ResolveError, Resolver
from datalayer.records import EndpointSpec

__all__ = ["MAX_ADDRESSES_PER_NAME", "NameResolution", "ResolutionError"]

log = structlog.get_logger("datalayer")

MAX_ADDRESSES_PER_NAME = 256


class ResolutionError(ValueError):
    """Start-up resolution failed for the entry whose declared address is ``declared``."""

    def __init__(self, declared: str, message: str) -> None:
        self.declared = declared
        super().__init__(message)


def _ip_order(ip: str) -> tuple[int, int]:
    parsed = ipaddress.ip_address(ip)
    return (parsed.version, int(parsed))


class NameResolution:
    def __init__(
        self, resolver: Resolver, *, max_addresses: int = MAX_ADDRESSES_PER_NAME, concurrency: int = 8
    ) -> None:
        if max_addresses < 1 or concurrency < 1:
            raise ValueError("NameResolution: max_addresses and concurrency must be at least 1")
        self.resolver = resolver
        self.max_addresses = max_addresses
        self._limit = asyncio.Semaphore(concurrency)
        self._good: dict[str, tuple[str, ...]] = {}  # name -> last good addresses
        self._problems: dict[str, str] = {}  # name -> the problem last logged
        self._truncated: set[str] = set()
        self._duplicates: frozenset[str] = frozenset()

    @staticmethod
    def has_names(specs: Sequence[EndpointSpec]) -> bool:
        return any(not is_ip_literal(split_address(s.address)[0]) for s in specs)

    async def expand(self, specs: Sequence[EndpointSpec], *, strict: bool = False) -> list[EndpointSpec]:
        """The concrete endpoints of ``specs`` (declared order; see the module docstring)."""
        entries = [(spec, *split_address(spec.address)) for spec in specs]
        spelled: dict[str, str] = {}  # name -> the first entry's spelling and declared address
        for spec, host, _ in entries:
            if not is_ip_literal(host):
                spelled.setdefault(host.lower().rstrip("."), spec.address)
        names = list(spelled)
        results = await asyncio.gather(*(self._lookup(name) for name in names))
        answers: dict[str, tuple[str, ...]] = {}
        for name, result in zip(names, results, strict=True):
            if isinstance(result, ResolveError):
                if strict:
                    host = split_address(spelled[name])[0]
                    raise ResolutionError(spelled[name], f"cannot resolve host name {host!r}: {result}")
                answers[name] = self._failed(name, str(result))
            else:
                answers[name] = self._resolved(name, result)
        for state in (self._good, self._problems):
            for gone in set(state) - set(names):
                del state[gone]
        self._truncated &= set(names)
        return self._concrete(entries, answers, strict)

    async def _lookup(self, name: str) -> tuple[str, ...] | ResolveError:
        async with self._limit:
            try:
                found = await self.resolver.resolve(name)
            except ResolveError as exc:
                return exc
        try:
            ips = sorted({str(ipaddress.ip_address(ip)) for ip in found}, key=_ip_order)
        except ValueError as exc:
            return ResolveError(f"the resolver answered something that is not an IP address ({exc})")
        return tuple(ips) if ips else ResolveError("no IPv4 or IPv6 address")

    def _resolved(self, name: str, ips: tuple[str, ...]) -> tuple[str, ...]:
        if len(ips) > self.max_addresses:
            if name not in self._truncated:
                self._truncated.add(name)
                log.warning(
                    "endpoint host name has more addresses than allowed; keeping the first",
                    name=name,
                    addresses=len(ips),
                    kept=self.max_addresses,
                )
            ips = ips[: self.max_addresses]
        else:
            self._truncated.discard(name)
        before = self._good.get(name)
        if name in self._problems:
            del self._problems[name]
            log.info("endpoint host name resolves again", name=name, addresses=list(ips))
        elif before is not None and before != ips:
            log.info(
                "endpoint host name re-resolved",
                name=name,
                added=[ip for ip in ips if ip not in before],
                removed=[ip for ip in before if ip not in ips],
            )
        self._good[name] = ips
        return ips

    def _failed(self, name: str, problem: str) -> tuple[str, ...]:
        kept = self._good.get(name, ())
        if self._problems.get(name) != problem:
            self._problems[name] = problem
            log.warning(
                "endpoint host name does not resolve; keeping its last good addresses",
                name=name,
                error=problem,
                kept=list(kept),
            )
        return kept

    def _concrete(
        self,
        entries: Sequence[tuple[EndpointSpec, str, int]],
        answers: Mapping[str, tuple[str, ...]],
        strict: bool,
    ) -> list[EndpointSpec]:
        out: list[EndpointSpec] = []
        owner: dict[str, str] = {}  # ip:port -> the declared address that has it
        duplicates: set[str] = set()
        for spec, host, port in entries:
            if is_ip_literal(host):
                candidates = [spec]
            else:
                ips = answers[host.lower().rstrip(".")]
                candidates = [
                    replace(
                        spec,
                        address=join_address(ip, port),
                        name=f"{spec.name}/{ip}" if len(ips) > 1 else spec.name,
                    )
                    for ip in ips
                ]
            for concrete in candidates:
                first = owner.setdefault(concrete.address, spec.address)
                if first == spec.address:
                    out.append(concrete)
                    continue
                problem = f"{spec.address} and {first} are the same endpoint {concrete.address}"
                if strict:
                    raise ResolutionError(spec.address, problem)
                duplicates.add(problem)
        new = duplicates - self._duplicates
        if new:
            log.warning(
                "endpoint entries resolve to the same address; keeping the first", problems=sorted(new)
            )
        self._duplicates = frozenset(duplicates)
        return out
