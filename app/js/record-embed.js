// Draws a page the server rendered without the app's wasm: an embedded recorded run
// (app/src/static_page.rs says why). The server wrote each chart's ECharts option, fitted
// to a few widths, into <script type="application/json" data-chart-for="ELEMENT-ID">; this
// draws the one for the element's width, in the page's theme, as the app's own drawing does
// (app/src/charts/draw.rs): redrawn on a resize or a change of the colour scheme, a chart
// that cannot be drawn replaced by a sentence saying why, PNG export at twice the screen's
// resolution, and the page's height posted to the document that frames it.
// Loaded `defer` (the page shell in app/src/lib.rs): it runs once the document is parsed.
// scripts/site-assets.mjs minifies it and gives it a content-hashed name.
(() => {
  const root = document.documentElement;
  const scheme = matchMedia('(prefers-color-scheme: dark)');
  const dark = () => (root.dataset.theme ? root.dataset.theme === 'dark' : scheme.matches);
  const charts = [...document.querySelectorAll('script[type="application/json"][data-chart-for]')]
    .map((script) => ({ element: document.getElementById(script.dataset.chartFor), fits: JSON.parse(script.textContent) }))
    .filter((c) => c.element && c.fits.length);

  // The option fitted to the widest width no wider than the element (the narrowest below it).
  const fitted = (c) => {
    const width = c.element.clientWidth;
    let best = c.fits[0];
    for (const fit of c.fits) if (fit[0] <= width) best = fit;
    return best;
  };

  // Draws `c` as its element's width and the theme now ask: afresh in a new theme, with
  // the option fitted to the new width where that changed, else only resized.
  function draw(c) {
    const [width, option] = fitted(c);
    const theme = dark() ? 'dark' : 'light';
    try {
      if (c.instance && c.theme !== theme) c.instance = void echarts.dispose(c.element);
      if (c.instance) c.instance.resize();
      else {
        // The sentence a previous failure left there.
        c.element.textContent = '';
        c.element.classList.remove('chart-error');
        c.instance = echarts.init(c.element, theme === 'dark' ? 'dark' : null);
        c.width = undefined;
      }
      // Not merged into the previous option: a series that is gone must not linger.
      if (c.width !== width) c.instance.setOption(option, { notMerge: true });
      Object.assign(c, { theme, width });
    } catch (e) {
      // Half-drawn state is worse than none: start afresh next time.
      if (c.instance) echarts.dispose(c.element);
      c.instance = undefined;
      c.element.classList.add('chart-error');
      c.element.textContent = `This chart could not be drawn: ${e?.message ?? e}`;
    }
  }

  function drawAll() {
    if (typeof window.echarts?.init !== 'function') {
      for (const c of charts) {
        c.element.classList.add('chart-error');
        c.element.textContent = 'This chart could not be drawn: the chart library (ECharts) did not load';
      }
    } else {
      charts.forEach(draw);
      addEventListener('resize', () => charts.forEach(draw));
      scheme.addEventListener('change', () => charts.forEach(draw));
    }
    // A marker for people and browser tests: from here on the page is drawn.
    root.dataset.static = 'drawn';
  }

  // Saves a drawn chart as PNG, on the page's background.
  document.addEventListener('click', (event) => {
    const button = event.target.closest?.('button[data-png-of]');
    const c = button && charts.find((c) => c.element.id === button.dataset.pngOf);
    if (!c?.instance) return;
    const link = document.createElement('a');
    link.href = c.instance.getDataURL({ type: 'png', pixelRatio: 2, backgroundColor: dark() ? '#1c1f24' : '#ffffff' });
    link.download = button.dataset.pngFile;
    link.click();
  });

  // The height, for the framing page's listener (the embed snippets' script).
  if (window.parent !== window) {
    let last = 0;
    new ResizeObserver(() => {
      const height = Math.ceil(document.body.scrollHeight);
      if (Math.abs(height - last) >= 1) {
        last = height;
        window.parent.postMessage({ type: 'gradless:height', height }, '*');
      }
    }).observe(document.body);
  }

  // ECharts is loaded async beside this script: draw once it has run (it says so with
  // `echarts-ready`), or at the window's load, which waits for it, loaded or failed.
  if (window.echarts) drawAll();
  else {
    let done = false;
    const once = () => done || ((done = true), drawAll());
    addEventListener('echarts-ready', once);
    addEventListener('load', once);
  }
})();
