// Every picture README.md and docs/*.md embed, taken from a running server (issue 65): one
// scene per flow, each naming the files it writes and the viewport each is taken at (1440 px
// wide, or a 390 px phone). A tall page is clipped to a viewport or to one element, never a
// 4,000-px full page nobody can read at a doc's width. A picture that must change is retaken
// here, never edited. `scripts/check-screenshots.py` (scripts/test.sh) checks that every image
// the docs embed is one this script writes.
//
// Usage (in end2end/, against a server freshly started on an empty database):
//   GRADLESS_URL=http://127.0.0.1:3000 node screenshots.mjs [OUT_DIR]   every picture (default ../docs)
//   node screenshots.mjs --list                                          the files it writes (no browser)
//   GRADLESS_URL=... node screenshots.mjs --only card-question.png       one picture (its scene's flow runs)
// Scenes marked `server: "models"` need a server at GRADLESS_MODELS_URL started with
// `--models-dir` holding engine/tests/fixtures' folders: make_team_models.py's (token_mask),
// make_hf_text_decoders.py's text_llama_sharded_bf16 and make_hf_decoders.py's
// hf_llama_sharded_bf16; `server: "fleet"` a fleet front
// with two CPU workers (end2end/tests/fleet.spec.ts starts one) at GRADLESS_FLEET_URL. Without
// the address, the run names those scenes as not taken and exits 2. A full run (47 files on
// the 2-core development machine, shared with builds) takes about 12 minutes: the quality
// table (~3 min), half-weights (~2 min) and a compiled ResNet-18 (1 min from the AOTInductor
// cache, several without it) are most of it.

const DESKTOP = { width: 1440, height: 900 };
const PHONE = { width: 390, height: 844 };

/** Waits for the page's hydration. */
async function hydrated(page) {
  await page.waitForSelector("html[data-hydrated=true]", { timeout: 60000 });
}

/** A card's prediction set: its first choice, or the slider moved off "not set". */
async function predict(page, id) {
  const box = page.getByTestId(`predict-${id}`);
  const radio = box.locator("input[type=radio]");
  if (await radio.count()) await radio.first().check();
  else {
    const slider = page.getByTestId(`predict-slider-${id}`);
    await slider.focus();
    await slider.press("ArrowRight");
  }
}

/** A card opened cold (no earlier answer in this browser), in its question state. */
async function coldCard(page, url, id) {
  await page.goto(`${url}/pitfalls#${id}`);
  await hydrated(page);
  await page.evaluate(() => localStorage.clear());
  await page.reload();
  await hydrated(page);
  const card = page.getByTestId(`card-${id}`);
  await card.scrollIntoViewIfNeeded();
  return card;
}

/** Predicts, locks in and waits for the verdict: the card in its lesson state. */
async function lockIn(page, id) {
  await predict(page, id);
  await page.getByTestId(`run-${id}`).click();
  await page.getByTestId(`verdict-${id}`).waitFor({ timeout: 600000 });
  await page.waitForTimeout(800);
}

/** A card's question, then its lesson after the lock-in, as element pictures. */
function cardStates(id, viewport, question, lesson, maxHeight) {
  return {
    viewport,
    files: [question, lesson].filter(Boolean),
    async take({ page, url, shot }) {
      const card = await coldCard(page, url, id);
      if (question) await shot(question, card);
      await lockIn(page, id);
      if (lesson) await shot(lesson, card, { maxHeight });
    },
  };
}

/** Posts a run and waits for its report: the id of a recorded run. */
async function recordedRun(url, spec) {
  const r = await fetch(`${url}/api/runs`, {
    method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(spec),
  });
  const { id } = await r.json();
  for (let i = 0; i < 600; i++) {
    const s = await fetch(`${url}/api/runs/${id}`);
    if (s.status === 200) return id;
    if (s.status !== 409) throw new Error(`run ${id}: ${s.status} ${await s.text()}`);
    await new Promise((res) => setTimeout(res, 500));
  }
  throw new Error(`run ${id} did not finish`);
}

const LAB_RUN = { model: "resnet18", device: "cpu", batch: 8, input_size: 96, eval: true, grad: "no_grad", warmup: 2, iters: 15 };

const GEN = "model=llama_tiny&device=cpu&batch=1&prompt=16&new_tokens=24&cache=dynamic&eval=1&grad=no_grad&autocast=off";

/** Waits until the Generate page's latency chart has `n` series (one per compared mode). */
async function genSeries(page, n) {
  await page.waitForFunction((n) => {
    const c = window.echarts?.getInstanceByDom(document.getElementById("gen-latency-chart"));
    return (c?.getOption()?.series?.length ?? 0) >= n;
  }, n, { timeout: 300000 });
}

export const scenes = {
  guide: {
    doc: "guide.md: the first view, and the guided start after its step 2 of 3",
    viewport: { width: 1440, height: 1000 },
    files: ["first-view.png", "guided-start.png"],
    take: guideTour(""),
  },
  "guide-phone": {
    doc: "guide.md: the same on a phone (2 device pixels per px)",
    viewport: PHONE, scale: 2,
    files: ["first-view-phone.png", "guided-start-phone.png"],
    take: guideTour("-phone"),
  },
  "lab-predict": {
    doc: "guide.md: a change of one setting predicted in the Lab, then scored",
    viewport: DESKTOP,
    files: ["lab-predict-before.png", "lab-predict-after.png"],
    take: labPredict("lab-predict-before.png", "lab-predict-after.png"),
  },
  "lab-predict-phone": {
    doc: "guide.md: the scored predictions on a phone",
    viewport: PHONE,
    files: ["lab-predict-after-phone.png"],
    take: labPredict(null, "lab-predict-after-phone.png"),
  },
  "lab-compiled": {
    doc: "guide.md: a compiled ResNet-18 run's summary on the CPU",
    viewport: DESKTOP,
    files: ["lab-compiled.png"],
    async take({ page, url, shot }) {
      await page.goto(`${url}/?model=resnet18&device=cpu&batch=8&eval=1&grad=no_grad&autocast=off&compiled=1`);
      await hydrated(page);
      await page.getByTestId("run").click();
      await page.getByTestId("status").filter({ hasText: "Done" }).waitFor({ timeout: 600000 });
      await page.waitForTimeout(800);
      await shot("lab-compiled.png", page.getByTestId("summary"));
    },
  },
  inside: {
    doc: "guide.md: memory through one forward pass, grad against no_grad; the breakdown and the roofline",
    viewport: { width: 1440, height: 1400 },
    files: ["inside-forward-pass.png", "inside-breakdown.png"],
    async take({ page, url, shot }) {
      await page.goto(url);
      await hydrated(page);
      const done = () => page.getByTestId("status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
      // The first view: a recorded run of the defaults, or the automatic first run.
      await page.getByTestId("status").filter({ hasText: /Recorded|Done/ }).waitFor({ timeout: 300000 });
      await page.getByTestId("run").click();
      await page.waitForTimeout(300);
      await done();
      await page.getByTestId("grad-no_grad").check();
      await page.getByTestId("run").click();
      await page.waitForTimeout(300);
      await done();
      await page.waitForFunction(() => {
        const c = window.echarts.getInstanceByDom(document.getElementById("trace-chart"));
        return (c?.getOption()?.series?.length ?? 0) >= 2;
      }, null, { timeout: 60000 });
      await page.waitForTimeout(800);
      // One point hovered, so the picture shows what the hover names.
      await page.evaluate(() => {
        const c = window.echarts.getInstanceByDom(document.getElementById("trace-chart"));
        const n = c.getOption().series[0].data.length;
        c.dispatchAction({ type: "showTip", seriesIndex: 0, dataIndex: Math.floor(n * 0.7) });
      });
      await page.waitForTimeout(300);
      await shot("inside-forward-pass.png", page.locator(".inside-row"));
      await page.locator(".inside .charts").scrollIntoViewIfNeeded();
      await shot("inside-breakdown.png", page.locator(".inside"));
    },
  },
  "card-states": {
    doc: "guide.md: a card before the lock-in (slider not set) and after it",
    ...cardStates("eval-and-autograd", { width: 1440, height: 1200 }, "card-question.png", "card-lesson.png"),
  },
  "half-weights": {
    doc: "guide.md: half-weights before and after the lock-in",
    ...cardStates("half-weights", { width: 1440, height: 1200 }, "lesson-half-weights-question.png", "lesson-half-weights-lesson.png"),
  },
  "seed-table-phone": {
    doc: "guide.md: seed-table's lesson on a phone: the card's first 1,400 px (its claim and statements)",
    ...cardStates("seed-table", PHONE, null, "lesson-seed-table-phone.png", 1400),
  },
  "pitfall-card": {
    doc: "guide.md: a pitfall card after its experiment (nograd-and-dropout)",
    ...cardStates("nograd-and-dropout", { width: 1440, height: 1200 }, null, "pitfall-card.png"),
  },
  predict: {
    doc: "guide.md: a card's question before its run (gqa), then the prediction against the measurement",
    ...cardStates("gqa", { width: 1440, height: 1200 }, "predict-before.png", "predict-after.png"),
  },
  "card-generate-no-grad": {
    doc: "generation.md: generate-no-grad after the lock-in",
    ...cardStates("generate-no-grad", { width: 1440, height: 1200 }, null, "card-generate-no-grad.png"),
  },
  "card-use-cache-off": {
    doc: "generation.md: use-cache-off after the lock-in",
    ...cardStates("use-cache-off", { width: 1440, height: 1200 }, null, "card-use-cache-off.png"),
  },
  "card-fp16-and-bf16-range": {
    doc: "generation.md: fp16-and-bf16-range after the lock-in",
    ...cardStates("fp16-and-bf16-range", { width: 1440, height: 1200 }, null, "card-fp16-overflow.png"),
  },
  "card-sdpa-backend": {
    doc: "generation.md: sdpa-backend after the lock-in",
    ...cardStates("sdpa-backend", { width: 1440, height: 1200 }, null, "card-sdpa-backend.png"),
  },
  "path-step-phone": {
    doc: "guide.md: a path step's question and, after the lock-in, its lesson, on a phone",
    viewport: PHONE,
    files: ["path-step-question-phone.png", "path-step-lesson-phone.png"],
    async take({ page, url, shot }) {
      await page.goto(`${url}/learn/inference-settings`);
      await hydrated(page);
      await page.evaluate(() => localStorage.clear());
      await page.reload();
      await hydrated(page);
      const step = page.getByTestId("step-1");
      await step.scrollIntoViewIfNeeded();
      await shot("path-step-question-phone.png", step);
      await step.getByLabel("Your prediction").focus();
      await page.keyboard.press("ArrowLeft");
      await step.getByTestId("lock-1").click();
      await step.getByTestId("step-outcome").waitFor({ timeout: 300000 });
      await page.waitForTimeout(800);
      await step.scrollIntoViewIfNeeded();
      await shot("path-step-lesson-phone.png", step);
    },
  },
  learn: {
    doc: "guide.md: the shipped path, its first step walked, and its answers page (some answers posted first)",
    viewport: { width: 1440, height: 1300 },
    files: ["learn-path.png", "learn-answers.png"],
    async take({ page, url, shot }) {
      await learnAnswers(url);
      await page.goto(`${url}/learn/inference-settings`);
      await hydrated(page);
      // Its first step walked: the prediction against its measurement.
      const step = page.getByTestId("step-1");
      await step.getByLabel("Your prediction").focus();
      await page.keyboard.press("ArrowLeft");
      await step.getByTestId("lock-1").click();
      await step.getByTestId("step-outcome").waitFor({ timeout: 300000 });
      await page.waitForTimeout(800);
      await page.evaluate(() => window.scrollTo(0, 0));
      await shot("learn-path.png", page);
      await page.goto(`${url}/learn/inference-settings/answers`);
      await hydrated(page);
      await page.waitForTimeout(500);
      await shot("learn-answers.png", page);
    },
  },
  "learn-phone": {
    doc: "guide.md: the shipped path on a phone",
    viewport: PHONE,
    files: ["learn-path-phone.png"],
    async take({ page, url, shot }) {
      await page.goto(`${url}/learn/inference-settings`);
      await hydrated(page);
      await page.waitForTimeout(500);
      await shot("learn-path-phone.png", page);
    },
  },
  permalink: {
    doc: "guide.md: a recorded run's permalink, and its pictures (light, dark) as the server draws them",
    viewport: { width: 1200, height: 1000 },
    files: ["permalink.png", "embed-run-light.png", "embed-run-dark.png"],
    async take({ page, url, shot, save }) {
      const id = await recordedRun(url, LAB_RUN);
      await page.goto(`${url}/runs/${id}`);
      await hydrated(page);
      await page.waitForTimeout(800);
      await shot("permalink.png", page);
      for (const theme of ["light", "dark"]) {
        const r = await fetch(`${url}/runs/${id}.png?theme=${theme}`);
        await save(`embed-run-${theme}.png`, Buffer.from(await r.arrayBuffer()));
      }
    },
  },
  "embed-recorded-run": {
    doc: "guide.md: a recorded run's embed at 900 px",
    viewport: { width: 900, height: 1200 },
    files: ["embed-recorded-run.png"],
    async take({ page, url, shot }) {
      const id = await recordedRun(url, LAB_RUN);
      await page.goto(`${url}/embed/runs/${id}`);
      await page.waitForTimeout(1500);
      await shot("embed-recorded-run.png", page);
    },
  },
  "embed-recorded-card-phone": {
    doc: "guide.md: a recorded pitfall experiment's embed on a phone",
    viewport: { width: 390, height: 1400 },
    files: ["embed-recorded-card-phone.png"],
    async take({ page, url, shot }) {
      const r = await fetch(`${url}/api/pitfalls/nograd-and-dropout`, {
        method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ device: "cpu" }),
      });
      const { record_id } = await r.json();
      await page.goto(`${url}/embed/runs/${record_id}`);
      await page.waitForTimeout(1500);
      await shot("embed-recorded-card-phone.png", page);
    },
  },
  embed: {
    doc: "guide.md: the Lab embedded in a doc page (an iframe of /embed/lab), after a run",
    viewport: { width: 1000, height: 1320 },
    files: ["embed.png"],
    async take({ page, url, shot }) {
      const src = `${url}/embed/lab?model=tiny_mlp&device=cpu&batch=4&warmup=1&iters=8&hide=snippet,advanced,history&lock=model,batch`;
      // The doc page, served (by the browser, intercepted) from the server's own origin: a
      // server frames its embeds for the origins --embed-origins names, and itself.
      const doc = `${url}/doc-page-for-the-screenshot.html`;
      await page.route(doc, (route) => route.fulfill({ contentType: "text/html", body: `<!doctype html>
        <body style="font:16px sans-serif;max-width:960px;margin:16px auto">
        <h1>Onboarding: inference settings</h1><p>Run it here: the figures are measured on our server.</p>
        <iframe id="g" src="${src}" title="Gradless" style="width:100%;border:0" height="1200"></iframe></body>` }));
      await page.goto(doc);
      const frame = page.frameLocator("#g");
      await frame.locator("html[data-hydrated=true]").waitFor({ timeout: 60000 });
      await frame.getByTestId("run").click();
      await frame.getByTestId("status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
      await page.waitForTimeout(1000);
      await shot("embed.png", page);
    },
  },
  generate: {
    doc: "generation.md: the Generate page after Compare cache modes, 1440 px (the first screen of it)",
    viewport: DESKTOP,
    files: ["generate.png"],
    take: genCompare("generate.png"),
  },
  "generate-phone": {
    doc: "generation.md: the same on a phone: the results come first",
    viewport: PHONE,
    files: ["generate-phone.png"],
    take: genCompare("generate-phone.png"),
  },
  "generate-phone-int4": {
    doc: "generation.md: the first screen on a phone, then after an int4 run on bf16 weights",
    viewport: PHONE,
    files: ["generate-phone-first-screen.png", "generate-phone-int4-bf16.png"],
    async take({ page, url, shot }) {
      await page.goto(`${url}/generate?model=llama_tiny&device=cpu&batch=1&prompt=8&new_tokens=6&cache=dynamic&eval=1&grad=no_grad&autocast=off`);
      await hydrated(page);
      await page.waitForTimeout(500);
      await shot("generate-phone-first-screen.png", page);
      await page.getByTestId("gen-dtype").selectOption("bf16");
      await page.getByTestId("gen-quant").selectOption("int4");
      await page.getByTestId("gen-group-size").selectOption("32");
      await page.getByTestId("gen-kv-dtype").selectOption("bf16");
      await page.getByTestId("gen-run").click();
      await page.getByTestId("gen-status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
      await page.waitForTimeout(800);
      // The status, which names every setting that differs from the defaults, mid-screen.
      await page.getByTestId("gen-status").evaluate((e) => e.scrollIntoView({ block: "center" }));
      await page.waitForTimeout(300);
      await shot("generate-phone-int4-bf16.png", page);
    },
  },
  "generate-quant": {
    doc: "generation.md: int4 in groups of 32 on llama_tiny, the summary's weights split",
    viewport: DESKTOP,
    files: ["generate-quant.png"],
    async take({ page, url, shot }) {
      await page.goto(`${url}/generate?${GEN}&quant=int4&group_size=32`);
      await hydrated(page);
      await page.getByTestId("gen-run").click();
      await page.getByTestId("gen-status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
      await page.waitForTimeout(800);
      await page.getByTestId("gen-weights-split").scrollIntoViewIfNeeded();
      await shot("generate-quant.png", page);
    },
  },
  "generate-quant-phone": {
    doc: "generation.md: the quantization and KV cache dtype choices on a phone",
    viewport: PHONE,
    files: ["generate-quant-phone.png"],
    async take({ page, url, shot }) {
      await page.goto(`${url}/generate?${GEN}&quant=int4&group_size=32`);
      await hydrated(page);
      await page.getByTestId("gen-quant").scrollIntoViewIfNeeded();
      await page.waitForTimeout(300);
      await shot("generate-quant-phone.png", page);
    },
  },
  "generate-quality": {
    doc: "generation.md: the quality table (torch_bytes, Measure quality on held-out text)",
    viewport: DESKTOP,
    files: ["generate-quality.png"],
    async take({ page, url, shot }) {
      await page.goto(`${url}/generate?model=torch_bytes&device=cpu&batch=1&new_tokens=8&cache=dynamic&eval=1&grad=no_grad&autocast=off&quality=1&prompt_text=def%20f(x)%3A`);
      await hydrated(page);
      await page.getByTestId("gen-run").click();
      await page.getByTestId("gen-status").filter({ hasText: "Done" }).waitFor({ timeout: 600000 });
      await page.waitForTimeout(800);
      await shot("generate-quality.png", page.getByTestId("gen-quality"));
    },
  },
  "generate-trained": {
    doc: "generation.md: the trained model after a run, at 1440 px and on a phone",
    viewport: DESKTOP,
    files: ["generate-trained.png", "generate-trained-phone.png"],
    async take({ page, url, shot }) {
      await page.goto(`${url}/generate?model=torch_bytes&device=cpu&batch=1&new_tokens=48&cache=dynamic&eval=1&grad=no_grad&autocast=off`);
      await hydrated(page);
      const box = page.getByTestId("gen-prompt-text");
      await box.fill("class Linear(Module):");
      await box.dispatchEvent("change");
      await page.getByTestId("gen-run").click();
      await page.getByTestId("gen-status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
      await page.waitForTimeout(800);
      const text = page.getByTestId("gen-text");
      for (const [file, viewport] of [["generate-trained.png", DESKTOP], ["generate-trained-phone.png", PHONE]]) {
        await page.setViewportSize(viewport);
        await text.scrollIntoViewIfNeeded();
        await page.waitForTimeout(300);
        await shot(file, page);
      }
    },
  },
  models: {
    doc: "generation.md, README.md, operating.md: a team's folders (--models-dir): the sharded bf16 Llamas (one with its tokenizer.json), the two-input team model",
    server: "models",
    viewport: { width: 1440, height: 1350 },
    files: ["generate-tokenized-text.png", "generate-sharded-checkpoint.png", "team-model.png"],
    async take({ page, url, shot }) {
      const gen = "device=cpu&batch=1&new_tokens=24&cache=dynamic&eval=1&grad=no_grad&autocast=off";
      await page.goto(`${url}/generate?model=text_llama_sharded_bf16&${gen}&prompt_text=${encodeURIComponent("def forward(self, x):")}`);
      await hydrated(page);
      await page.getByTestId("gen-run").click();
      await page.getByTestId("gen-status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
      await page.waitForTimeout(800);
      await page.evaluate(() => window.scrollTo(0, 0));
      await shot("generate-tokenized-text.png", page);
      await page.goto(`${url}/generate?model=hf_llama_sharded_bf16&${gen}&prompt=16`);
      await hydrated(page);
      await page.getByTestId("gen-run").click();
      await page.getByTestId("gen-status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
      await page.waitForTimeout(800);
      await shot("generate-sharded-checkpoint.png", page.getByTestId("gen-summary"));
      await page.goto(`${url}/?model=token_mask&device=cpu&batch=2&eval=1&grad=no_grad&autocast=off`);
      await hydrated(page);
      await page.getByTestId("run").click();
      await page.getByTestId("status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
      await page.waitForTimeout(800);
      await shot("team-model.png", page);
    },
  },
  fleet: {
    doc: "operating.md: the Lab on a fleet front, then /compare after Run on every device",
    server: "fleet",
    viewport: { width: 1440, height: 1100 },
    files: ["fleet-lab.png", "fleet-compare.png"],
    async take({ page, url, shot }) {
      await page.goto(url);
      await hydrated(page);
      await page.getByTestId("fleet").waitFor();
      await page.getByTestId("fleet").scrollIntoViewIfNeeded();
      await shot("fleet-lab.png", page);
      await page.getByTestId("run-everywhere").click();
      await page.waitForURL(/\/compare\?runs=/, { timeout: 300000 });
      await hydrated(page);
      await page.waitForTimeout(1500);
      await shot("fleet-compare.png", page);
    },
  },
};

function guideTour(tag) {
  return async ({ page, url, shot }) => {
    await page.goto(url);
    await hydrated(page);
    // The first view: a recorded run of the default settings (or the first run on a fresh server).
    await page.getByTestId("shown-note").waitFor({ timeout: 60000 });
    await page.getByTestId("status").filter({ hasText: /Recorded|Done/ }).waitFor({ timeout: 120000 });
    await page.waitForTimeout(500);
    await shot(`first-view${tag}.png`, page);
    // The guided start: steps 1 and 2 clicked; step 3 of 3 is next.
    for (const [step, after] of [[1, "1 of 3"], [2, "2 of 3"]]) {
      await page.getByTestId(`guide-step-${step}`).click();
      await page.getByTestId("guide-progress").filter({ hasText: after }).waitFor({ timeout: 120000 });
    }
    await page.waitForTimeout(500);
    if (tag) {
      // On a phone the charts are below the controls: the memory chart with its reading.
      await page.locator("#memory-chart").scrollIntoViewIfNeeded();
      await page.evaluate(() => window.scrollBy(0, -120));
    }
    await shot(`guided-start${tag}.png`, page);
  };
}

function labPredict(before, after) {
  return async ({ page, url, shot }) => {
    await page.goto(`${url}/?model=tiny_mlp&device=cpu&eval=1&grad=enabled&autocast=off&batch=64&warmup=1&iters=20`);
    await hydrated(page);
    const done = () => page.getByTestId("status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
    await page.getByTestId("run").click();
    await page.waitForTimeout(300);
    await done();
    await page.getByTestId("grad-no_grad").check();
    const box = page.getByTestId("lab-predict");
    await box.waitFor();
    await box.scrollIntoViewIfNeeded();
    if (before) await shot(before, box);
    await box.getByTestId("predict-lab-peak").getByLabel("lower").check();
    await box.getByTestId("predict-lab-p50").getByLabel("about the same").check();
    await page.getByTestId("run").click();
    await page.waitForTimeout(300);
    await done();
    const scored = page.getByTestId("lab-predict-scored");
    await scored.waitFor();
    await page.waitForTimeout(800);
    await scored.scrollIntoViewIfNeeded();
    await shot(after, after.includes("phone") ? page : scored);
  };
}

function genCompare(file) {
  return async ({ page, url, shot }) => {
    await page.goto(`${url}/generate?${GEN}`);
    await hydrated(page);
    await page.getByTestId("gen-compare-cache").scrollIntoViewIfNeeded();
    await page.getByTestId("gen-compare-cache").click();
    await genSeries(page, 3);
    await page.getByTestId("gen-status").filter({ hasText: "Done" }).waitFor({ timeout: 300000 });
    await page.waitForTimeout(800);
    await page.evaluate(() => window.scrollTo(0, 0));
    await shot(file, page);
  };
}

async function learnAnswers(url) {
  // Step 4 of the shipped path answered a few times (some right, some wrong), so the answers
  // page has something to show.
  for (const choice of ["higher", "higher", "same", "lower"]) {
    const r = await fetch(`${url}/api/learn/inference-settings/steps/4`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ prediction: { choice } }),
    });
    if (!r.ok) throw new Error(`step 4, predicted ${choice}: ${r.status}`);
  }
}

/** Every file the scenes write, with its scene and viewport. */
export function listing() {
  return Object.entries(scenes).flatMap(([name, s]) =>
    s.files.map((file) => ({ file, scene: name, viewport: `${s.viewport.width}x${s.viewport.height}${s.scale ? `@${s.scale}x` : ""}`, server: s.server ?? "plain" })));
}

async function main() {
  const args = process.argv.slice(2);
  if (args.includes("--list")) {
    for (const l of listing()) console.log(`${l.file}\t${l.scene}\t${l.viewport}\t${l.server}`);
    return;
  }
  const only = args.includes("--only") ? args[args.indexOf("--only") + 1] : null;
  const rest = args.filter((a, i) => a !== "--only" && args[i - 1] !== "--only");
  const out = rest[0] ?? new URL("../docs", import.meta.url).pathname;
  if (only && !listing().some((l) => l.file === only || l.scene === only)) {
    console.error(`error: no scene writes ${only} (node screenshots.mjs --list)`);
    process.exit(1);
  }
  const urls = { plain: process.env.GRADLESS_URL, models: process.env.GRADLESS_MODELS_URL, fleet: process.env.GRADLESS_FLEET_URL };
  if (!urls.plain) { console.error("error: set GRADLESS_URL"); process.exit(1); }
  const { chromium } = await import("@playwright/test");
  const { writeFile } = await import("node:fs/promises");
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const started = Date.now();
  const written = [], skipped = [], failed = [];
  for (const [name, s] of Object.entries(scenes)) {
    const wanted = only ? s.files.filter((f) => f === only || name === only) : s.files;
    if (!wanted.length) continue;
    const url = urls[s.server ?? "plain"];
    if (!url) { skipped.push(...wanted.map((f) => `${f} (needs GRADLESS_${s.server.toUpperCase()}_URL)`)); continue; }
    const context = await browser.newContext({ viewport: s.viewport, deviceScaleFactor: s.scale ?? 1 });
    const page = await context.newPage();
    const t0 = Date.now();
    // `maxHeight`: an element taller than a reader reads at once is clipped to its top.
    const shot = async (file, target, { maxHeight } = {}) => {
      if (!wanted.includes(file)) return;
      const box = maxHeight && (await target.boundingBox());
      if (box && box.height > maxHeight) {
        const [sx, sy] = await page.evaluate(() => [window.scrollX, window.scrollY]);
        await page.screenshot({ path: `${out}/${file}`, fullPage: true,
          clip: { x: box.x + sx, y: box.y + sy, width: box.width, height: maxHeight } });
      } else await target.screenshot({ path: `${out}/${file}` });
      written.push(file);
    };
    const save = async (file, bytes) => {
      if (!wanted.includes(file)) return;
      await writeFile(`${out}/${file}`, bytes);
      written.push(file);
    };
    try {
      await s.take({ page, url: url.replace(/\/$/, ""), shot, save });
      console.log(`${name}: ${wanted.join(", ")} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    } catch (e) {
      failed.push(`${name}: ${e.message.split("\n")[0]}`);
      console.error(`${name} failed: ${e.message.split("\n")[0]}`);
    }
    await context.close();
  }
  await browser.close();
  console.log(`wrote ${written.length} files in ${((Date.now() - started) / 1000).toFixed(0)} s to ${out}`);
  if (skipped.length) console.log(`not taken: ${skipped.join("; ")}`);
  if (failed.length) { console.error(`failed: ${failed.join("; ")}`); process.exit(1); }
  if (skipped.length) process.exit(2);
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
