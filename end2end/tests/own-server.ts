// For tests that need a server of their own (a restart, other settings): starts the
// release binary scripts/test.sh names in GRADLESS_BIN on a free-ish port.
import { ChildProcess, spawn } from "node:child_process";

export const BIN = process.env.GRADLESS_BIN;
const SITE = process.env.GRADLESS_SITE_ROOT ?? "../target/site";

export interface OwnServer {
  child: ChildProcess;
  url: string;
}

export async function startServer(port: number, args: string[]): Promise<OwnServer> {
  const child = spawn(BIN!, ["serve", "--addr", `127.0.0.1:${port}`, "--site-root", SITE, ...args], {
    env: { ...process.env, GRADLESS_THREADS: "1", RUST_LOG: "info" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const url = `http://127.0.0.1:${port}`;
  let log = "";
  child.stderr!.on("data", (d) => (log += d));
  for (let i = 0; i < 240; i++) {
    if (child.exitCode !== null) throw new Error(`gradless exited: ${log}`);
    try {
      if ((await fetch(`${url}/healthz`)).ok) return { child, url };
    } catch {}
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`gradless did not start: ${log}`);
}

/** SIGTERM, as a service manager stops it, and wait for the clean exit. */
export async function stopServer(server: OwnServer) {
  await stopChild(server.child);
}

/**
 * A port for a test's own server, away from the shared one: `GRADLESS_OWN_PORTS` + offset
 * where that is set (a machine whose ports are shared out between people), else a random
 * one of 8000 + offset * 100 ... + 99.
 */
export function freePort(offset: number): number {
  const base = Number(process.env.GRADLESS_OWN_PORTS ?? 0);
  if (base > 0) return base + offset;
  return 8000 + offset * 100 + Math.floor(Math.random() * 100);
}

/** A fleet worker (`gradless worker`) on NATS `nats`, measuring on the CPU. */
export function startWorker(name: string, nats: string): ChildProcess {
  const child = spawn(BIN!, ["worker", "--nats", nats, "--name", name, "--device", "cpu", "--heartbeat-s", "2",
    "--default-threads", "1"], {
    env: { ...process.env, RUST_LOG: "info" },
    stdio: ["ignore", "ignore", "ignore"],
  });
  return child;
}

/** SIGTERM a child and wait for it to exit. */
export async function stopChild(child: ChildProcess) {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  await exited;
}
