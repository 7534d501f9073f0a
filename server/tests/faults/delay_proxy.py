#!/usr/bin/env python3
"""A TCP proxy that delays what it forwards: the fault test's delay and jitter on a link
(this kernel has no netem qdisc, so delay cannot be put on the interface itself).

    delay_proxy.py CONTROL LISTEN_HOST:PORT=TARGET_HOST:PORT ...

Every chunk read from either side is forwarded after its own delay, drawn uniformly from
MEAN ± JITTER milliseconds, and never before the chunk ahead of it (a TCP stream stays in
order, as toxiproxy's latency toxic keeps it). The delay of listener N (0-based, in the
order given) is read from the file CONTROL.N as "MEAN_MS JITTER_MS", at most every 250 ms;
no file means no delay. Prints "ready" once every listener is bound.
"""
import asyncio
import random
import sys
import time


class Delay:
    def __init__(self, path):
        self.path, self.read_at, self.value = path, 0.0, (0.0, 0.0)

    def draw(self):
        now = time.monotonic()
        if now - self.read_at > 0.25:
            self.read_at = now
            try:
                with open(self.path) as f:
                    mean, jitter = (float(x) for x in f.read().split())
                self.value = (mean, jitter)
            except (OSError, ValueError):
                self.value = (0.0, 0.0)
        mean, jitter = self.value
        return max(0.0, random.uniform(mean - jitter, mean + jitter)) / 1000.0


async def pipe(reader, writer, delay):
    """Copies reader to writer, each chunk after its delay; half-closes at the end."""
    queue = asyncio.Queue()

    async def pump():
        last = 0.0
        while True:
            try:
                data = await reader.read(65536)
            except (ConnectionError, OSError):
                data = b""
            last = max(last, time.monotonic() + delay.draw())
            await queue.put((last, data))
            if not data:
                return

    async def drain():
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(pump(), drain())
    except (ConnectionError, OSError):
        pass


async def serve(listen, target, delay):
    lhost, lport = listen.rsplit(":", 1)
    thost, tport = target.rsplit(":", 1)

    async def handle(client_r, client_w):
        try:
            up_r, up_w = await asyncio.open_connection(thost, int(tport))
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, up_w, delay), pipe(up_r, client_w, delay))
        for w in (up_w, client_w):
            w.close()

    return await asyncio.start_server(handle, lhost, int(lport), reuse_address=True)


async def main():
    control, links = sys.argv[1], sys.argv[2:]
    servers = []
    for n, link in enumerate(links):
        listen, target = link.split("=", 1)
        servers.append(await serve(listen, target, Delay(f"{control}.{n}")))
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main())
