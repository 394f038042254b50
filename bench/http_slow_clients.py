"""Scrape latency of a real agent while 1,500 clients send request heads a byte a second.

Starts `ray-accel agent --simulate hgx-h200 --no-ray` as a subprocess, measures
GET /metrics alone, then again while SLOW_CLIENTS connections each trickle a
request head at one byte a second and reconnect whenever the agent cuts them
off (the attacker keeps the pressure up). Prints one JSON line: latencies on a
kept-alive and on fresh connections, failures, how long slow clients were held.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

import aiohttp

from ray_accel.exporter.serving import raise_open_file_limit

SLOW_CLIENTS = 1500
UNDER_LOAD_S = 25.0
SCRAPE_EVERY_S = 0.25
_URL = re.compile(r"serving (http://\S+)/metrics")


def start_agent() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_accel.exporter.cli", "agent", "--no-ray", "--port", "0",
         "--simulate", "hgx-h200"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if match := _URL.search(line):
            return proc, match.group(1)
    raise RuntimeError("agent did not start")


async def scrapes(url: str, seconds: float) -> dict:
    """GET /metrics every SCRAPE_EVERY_S over one kept connection and over fresh ones."""
    kept_s, fresh_s, failures = [], [], 0
    timeout = aiohttp.ClientTimeout(total=10)
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession(timeout=timeout) as kept:
        while time.monotonic() < deadline:
            for session, figures in ((kept, kept_s), (None, fresh_s)):
                started = time.monotonic()
                try:
                    if session is None:
                        async with aiohttp.ClientSession(timeout=timeout) as fresh, \
                                fresh.get(url, headers={"Connection": "close"}) as reply:
                            ok = reply.status == 200 and bool(await reply.read())
                    else:
                        async with session.get(url) as reply:
                            ok = reply.status == 200 and bool(await reply.read())
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                if ok:
                    figures.append(time.monotonic() - started)
                else:
                    failures += 1
            await asyncio.sleep(SCRAPE_EVERY_S)
    return {"kept": _summary(kept_s), "fresh": _summary(fresh_s), "failures": failures}


def _summary(seconds: list[float]) -> dict:
    ordered = sorted(seconds)
    return {"count": len(ordered),
            "p50_ms": statistics.median(ordered) * 1e3 if ordered else None,
            "p99_ms": ordered[int(len(ordered) * 0.99)] * 1e3 if ordered else None,
            "max_ms": ordered[-1] * 1e3 if ordered else None}


async def slow_client(host: str, port: int, until: float, held: list[float]) -> None:
    """Trickles a request head byte by byte; reconnects when cut off, until `until`."""
    head = b"GET /metrics HTTP/1.1\r\nHost: agent\r\nX-Slow: " + b"z" * 200
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        opened = time.monotonic()
        answer = asyncio.ensure_future(reader.read())
        try:
            for byte in head:
                if answer.done() or time.monotonic() >= until:
                    break
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.wait([answer], timeout=1.0)
        except ConnectionError:
            pass
        if answer.done():
            held.append(time.monotonic() - opened)
        answer.cancel()
        writer.close()


async def measure(url: str) -> dict:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    metrics = url + "/metrics"
    alone = await scrapes(metrics, 5.0)
    until = time.monotonic() + UNDER_LOAD_S
    held: list[float] = []
    slow = [asyncio.ensure_future(slow_client(host, int(port), until, held))
            for _ in range(SLOW_CLIENTS)]
    await asyncio.sleep(2.0)  # let the slow clients connect
    loaded = await scrapes(metrics, UNDER_LOAD_S - 3.0)
    await asyncio.gather(*slow)
    return {"slow_clients": SLOW_CLIENTS, "alone": alone, "under_load": loaded,
            "slow_connections_cut": len(held),
            "slow_held_median_s": statistics.median(held) if held else None,
            "slow_held_max_s": max(held) if held else None}


def main() -> int:
    raise_open_file_limit()
    proc, url = start_agent()
    try:
        time.sleep(3.0)  # first cycles
        result = asyncio.run(measure(url))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    result["cpus"] = os.cpu_count()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
