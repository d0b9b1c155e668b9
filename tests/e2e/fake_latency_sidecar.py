"""A small stand-in for upstream's latency predictor servers (GIE ``latencypredictor/prediction_server.py``
and ``training_server.py``), run as its own process by the sidecar end-to-end test: one aiohttp server
on 127.0.0.1 serving both roles.

* ``POST /predict/bulk/strict``: ``{"requests": [row, ...]}`` checked against upstream's
  ``PredictionRequest`` fields (a 422 otherwise, as FastAPI); answers one prediction per row, in
  order: ``ttft_ms`` 5 for the row at index ``--favourite``, 5000 for the others (``tpot_ms`` 10);
* ``POST /add_training_data_bulk``: ``{"entries": [...]}`` checked against upstream's
  ``TrainingEntry``; answers 202 as upstream;
* ``GET /stats``: what it received (calls, rows per call, training posts and entries, the last entry);
* ``GET /healthz``, ``GET /readyz``.

Usage: ``python fake_latency_sidecar.py PORT [--favourite N]``.
"""

from __future__ import annotations

import argparse
from typing import Any

from aiohttp import web

ROW_FIELDS = {
    "kv_cache_percentage": float,
    "input_token_length": int,
    "num_request_waiting": int,
    "num_request_running": int,
    "num_tokens_generated": int,
    "prefix_cache_score": float,
    "prefill_tokens_in_flight": int,
    "decode_tokens_in_flight": int,
}
TRAIN_FIELDS = {**ROW_FIELDS, "actual_ttft_ms": float, "actual_tpot_ms": float}
FRACTIONS = ("kv_cache_percentage", "prefix_cache_score")


def problems(item: Any, fields: dict[str, type]) -> list[str]:
    if not isinstance(item, dict):
        return ["not an object"]
    out = []
    for name, kind in fields.items():
        value = item.get(name)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (kind is int and not isinstance(value, int))
        ):
            out.append(f"{name}: {value!r} is not a {kind.__name__}")
        elif value < 0 or (name in FRACTIONS and value > 1):
            out.append(f"{name}: {value!r} out of range")
    if item.get("pod_type", "") not in ("", "prefill", "decode"):
        out.append(f"pod_type: {item.get('pod_type')!r}")
    return out


def make_app(favourite: int) -> web.Application:
    stats: dict[str, Any] = {"predictCalls": 0, "rowsPerCall": [], "trainingPosts": 0, "trainingEntries": 0}

    async def predict(request: web.Request) -> web.Response:
        body = await request.json()
        rows = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(rows, list) or not rows:
            return web.json_response({"detail": "requests: a non-empty list"}, status=422)
        bad = [f"requests[{i}].{p}" for i, r in enumerate(rows) for p in problems(r, ROW_FIELDS)]
        if bad:
            return web.json_response({"detail": bad}, status=422)
        stats["predictCalls"] += 1
        stats["rowsPerCall"] = (stats["rowsPerCall"] + [len(rows)])[-50:]
        preds = [
            {"ttft_ms": 5.0 if i == favourite else 5000.0, "tpot_ms": 10.0, "model_type": "fake"}
            for i in range(len(rows))
        ]
        return web.json_response(
            {"predictions": preds, "total_requests": len(rows), "successful_predictions": len(rows)}
        )

    async def train(request: web.Request) -> web.Response:
        body = await request.json()
        entries = body.get("entries") if isinstance(body, dict) else None
        if not isinstance(entries, list):
            return web.json_response({"detail": "entries: a list"}, status=422)
        bad = [f"entries[{i}].{p}" for i, e in enumerate(entries) for p in problems(e, TRAIN_FIELDS)]
        if bad or not all(isinstance(e.get("timestamp"), str) for e in entries):
            return web.json_response({"detail": bad or "timestamp"}, status=422)
        stats["trainingPosts"] += 1
        stats["trainingEntries"] += len(entries)
        if entries:
            stats["lastEntry"] = entries[-1]
        return web.json_response({"message": f"Accepted {len(entries)} training samples."}, status=202)

    async def get_stats(_: web.Request) -> web.Response:
        return web.json_response(stats)

    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/predict/bulk/strict", predict)
    app.router.add_post("/add_training_data_bulk", train)
    app.router.add_get("/stats", get_stats)
    app.router.add_get("/healthz", ok)
    app.router.add_get("/readyz", ok)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("port", type=int)
    parser.add_argument("--favourite", type=int, default=0, help="the row predicted fast (default 0)")
    args = parser.parse_args()
    web.run_app(make_app(args.favourite), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
