// "The same in PyTorch": every model's snippet, taken from the page as a reader would copy it,
// runs with PyTorch and exits 0 (a NameError here is the first thing a newcomer would meet).
import { expect, test } from "@playwright/test";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LabPage } from "./lab-page";

const PYTHON = process.env.GRADLESS_PYTHON;

test("each model's snippet, copied from the Lab, runs with PyTorch", async ({ page }) => {
  test.skip(!PYTHON, "GRADLESS_PYTHON is not set (scripts/test.sh points it at the venv)");
  test.setTimeout(300_000);
  const lab = new LabPage(page);
  await lab.open();
  const models = await lab.testid("model").locator("option").evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value));
  expect(models.length).toBeGreaterThanOrEqual(5);
  const dir = mkdtempSync(join(tmpdir(), "gradless-snippets-"));
  for (const model of models) {
    // Batch 1 and a small input keep it quick; the code is what is checked, not the speed.
    await lab.open(`model=${model}&device=cpu&batch=1&grad=no_grad`);
    const code = await lab.testid("snippet").innerText();
    expect(code, model).toContain("import torch");
    // The decoder presets share one snippet path; the tiny one stands for them (the 8B
    // shape's random weights alone would take 32 GB in Python).
    if (code.includes("import transformers") && model !== "llama_tiny") continue;
    const file = join(dir, `${model}.py`);
    writeFileSync(file, code);
    // Throws (failing the test with Python's traceback) on a non-zero exit.
    // A team model's snippet loads its TorchScript file by name, as it would beside the file:
    // run it in the server's models folder (scripts/test.sh exports it).
    const cwd = code.includes("torch.jit.load") ? process.env.GRADLESS_MODELS_DIR : undefined;
    if (code.includes("torch.jit.load") && !cwd) continue;
    execFileSync(PYTHON!, [file], { encoding: "utf8", timeout: 120_000, cwd });
  }
});
