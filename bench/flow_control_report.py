"""The verdict lines of ``epp-bench flow-control`` (:mod:`bench.flow_control_bench`): what one group of
clients measured (:class:`Tally`), what one mode measured (:class:`Mode`, flow control on or off) and
the PASS/MISS lines comparing the two (:func:`report`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["Mode", "Tally", "report", "verdict"]


@dataclass
class Tally:
    ttft: list[float] = field(default_factory=list)
    ok: int = 0
    rejected: int = 0  # 429/503 with a JSON reason
    lost: int = 0  # anything else
    queue_wait: float = math.nan  # mean seconds in the picker's flow-control queue (nan: none counted)
    server_ttft: float = math.nan  # the phase's mean TTFT inside the simulators (every group), wall-clock
    client_lag: float = math.nan  # mean lateness of the measuring process's 10 ms timer

    def p90(self) -> float:
        return self._quantile(0.9)

    def p50(self) -> float:
        return self._quantile(0.5)

    def _quantile(self, q: float) -> float:
        if not self.ttft:
            return math.nan
        values = sorted(self.ttft)
        return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


@dataclass
class Mode:
    solo_b: Tally
    noisy: dict[str, Tally]
    solo_critical: Tally
    overload: dict[str, Tally]
    saturated: Tally
    seconds: float


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def _ms(seconds: float) -> str:
    return "n/a" if math.isnan(seconds) else f"{seconds * 1e3:.0f} ms"


def _change(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.0f}%" if old else "n/a"


def report(off: Mode, on: Mode) -> list[str]:
    out = []
    b_solo, b_on, b_off = on.solo_b.p90(), on.noisy["b"].p90(), off.noisy["b"].p90()
    out.append(
        f"noisy neighbour: B TTFT p90 solo {_ms(b_solo)}; with A at 5x: flow control on {_ms(b_on)}, "
        f"off {_ms(b_off)} (target on <= 1.5x solo): {verdict(b_on <= 1.5 * b_solo)}"
    )
    a_on, a_off = on.noisy["a"].ok / on.seconds, off.noisy["a"].ok / off.seconds
    b_on_thr, b_off_thr = on.noisy["b"].ok / on.seconds, off.noisy["b"].ok / off.seconds
    both_on, both_off = a_on + b_on_thr, a_off + b_off_thr
    out.append(
        f"  the reserve's cost: A's throughput with B, flow control on {a_on:.1f} / off {a_off:.1f} req/s "
        f"({_change(a_on, a_off)}); B's {b_on_thr:.1f} / {b_off_thr:.1f}; both "
        f"{both_on:.1f} / {both_off:.1f} req/s ({_change(both_on, both_off)})"
    )
    out.append(
        f"  mean wait in the picker's queue with flow control: B {_ms(on.noisy['b'].queue_wait)}, "
        f"A {_ms(on.noisy['a'].queue_wait)}; B TTFT p50 solo {_ms(on.solo_b.p50())}, "
        f"with A {_ms(on.noisy['b'].p50())}; mean TTFT inside the servers (all requests) solo "
        f"{_ms(on.solo_b.server_ttft)}, with A {_ms(on.noisy['b'].server_ttft)}; measuring process's "
        f"event-loop lag solo {_ms(on.solo_b.client_lag)}, with A {_ms(on.noisy['b'].client_lag)}"
    )
    crit_solo, crit, crit_off = on.solo_critical.p90(), on.overload["critical"], off.overload["critical"]
    shed_on, shed_off = on.overload["sheddable"], off.overload["sheddable"]
    out.append(
        f"priorities at 2x: critical TTFT p90 unloaded {_ms(crit_solo)}, loaded {_ms(crit.p90())} "
        f"(off: {_ms(crit_off.p90())}; target <= 1.3x): {verdict(crit.p90() <= 1.3 * crit_solo)}"
    )
    out.append(
        f"  mean wait in the picker's queue with flow control: critical {_ms(crit.queue_wait)}, "
        f"sheddable {_ms(shed_on.queue_wait)}; critical TTFT p50 unloaded {_ms(on.solo_critical.p50())}, "
        f"loaded {_ms(crit.p50())}; mean TTFT inside the servers (all requests) unloaded "
        f"{_ms(on.solo_critical.server_ttft)}, loaded {_ms(crit.server_ttft)}; measuring process's "
        f"event-loop lag unloaded {_ms(on.solo_critical.client_lag)}, loaded {_ms(crit.client_lag)}"
    )
    out.append(
        f"  shed: sheddable {shed_on.rejected} (off {shed_off.rejected}), critical {crit.rejected} "
        f"(off {crit_off.rejected}) (target: only sheddable): "
        f"{verdict(crit.rejected == 0 and shed_on.rejected > 0)}"
    )
    thr_on, thr_off = on.saturated.ok / on.seconds, off.saturated.ok / off.seconds
    p_on, p_off = on.saturated.p90(), off.saturated.p90()
    out.append(
        f"scheduling regret at 2x: TTFT p90 on {_ms(p_on)} / off {_ms(p_off)}, throughput on {thr_on:.1f} / "
        f"off {thr_off:.1f} req/s (target: no worse, 10% allowance): "
        f"{verdict(p_on <= 1.1 * p_off and thr_on >= 0.9 * thr_off)}"
    )
    lost = {n: sum(t.lost for t in _tallies(m)) for n, m in (("on", on), ("off", off))}
    total = {n: sum(t.ok + t.rejected + t.lost for t in _tallies(m)) for n, m in (("on", on), ("off", off))}
    out.append(
        f"zero lost requests: on {lost['on']} of {total['on']}, off {lost['off']} of {total['off']} "
        f"(all others: 200, or 429/503 with a reason): {verdict(not lost['on'] and not lost['off'])}"
    )
    return out


def _tallies(m: Mode) -> list[Tally]:
    return [m.solo_b, *m.noisy.values(), m.solo_critical, *m.overload.values(), m.saturated]
