// A small recorded run made through the API, for specs that need records on the server.
import { expect, APIRequestContext } from "@playwright/test";

/** Starts a tiny CPU run with `grad` and waits until its report is recorded; its id. */
export async function recordedRun(request: APIRequestContext, grad: string): Promise<string> {
  const res = await request.post("/api/runs", {
    data: { model: "tiny_mlp", device: "cpu", batch: 4, grad, warmup: 1, iters: 4 },
  });
  expect(res.status()).toBe(202);
  const { id } = await res.json();
  await expect.poll(async () => (await request.get(`/api/runs/${id}`)).status(), { timeout: 60_000 }).toBe(200);
  return id;
}
