// A server started with --token: the page asks for the token before runs start, says so
// in words when it is missing or wrong, and reading stays open.
import { expect, test } from "@playwright/test";
import { BIN, freePort, startServer, stopServer } from "./own-server";

test("starting runs needs the token; the page asks for it and explains a refusal", async ({ page }) => {
  test.skip(!BIN, "GRADLESS_BIN is not set (scripts/test.sh sets it)");
  const server = await startServer(freePort(2), ["--db", ":memory:", "--token", "team-secret"]);
  try {
    await page.goto(`${server.url}/?model=tiny_mlp&device=cpu&batch=2&warmup=0&iters=3`);
    await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
    await expect(page.getByTestId("token")).toBeVisible();

    await page.getByTestId("token").fill("wrong");
    await page.getByTestId("token").press("Tab");
    await page.getByTestId("run").click();
    await expect(page.getByTestId("run-error")).toContainText("access token");

    await page.getByTestId("token").fill("team-secret");
    await page.getByTestId("token").press("Tab");
    await page.getByTestId("run").click();
    await expect(page.getByTestId("status")).toContainText("Done", { timeout: 90_000 });
    // The token stays in this browser for the next visit.
    await page.reload();
    await expect(page.locator("html[data-hydrated=true]")).toHaveCount(1);
    await expect(page.getByTestId("token")).toHaveValue("team-secret");
  } finally {
    await stopServer(server);
  }
});
