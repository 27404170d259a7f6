// The dashboard in a real browser (Debian's chromium, headless, driven by playwright-core):
// loads the page, checks the graph and the edges' request counts against the proxies' own
// /metrics, selects a service with the keyboard, runs both calculators with the seed's samples
// (27; 9.20 s), makes a sample app fail through the page's fault knobs and watches the edge
// turn red, then clears the fault. With HOPWISE_SCREENSHOT=path, saves a screenshot there.
//
//   node tests/browser/dashboard.mjs '{"url":"http://127.0.0.1:P/",
//     "proxies":[{"service":"a","admin":"127.0.0.1:Q"},…],
//     "edges":[["a","b"],…], "fault":{"service":"b","copy":0,"knobs":"127.0.0.1:R"},
//     "traffic":"127.0.0.1:S", "warmup":30}'
//
// `warmup`: requests sent to `traffic` first (GET /), when nothing else sends any.
// Prints one line per check and ends with `N passed, M failed`; exits 1 on any failure.

import { check, finish, request, until, withPage } from './lib.mjs';

const cfg = JSON.parse(process.argv[2] || '{}');

/// Requests sent from `from`'s proxies to `to`, by their own /metrics.
async function metricRequests(from, to) {
  let sum = 0;
  for (const p of cfg.proxies.filter((x) => x.service === from)) {
    const { text } = await request(p.admin, '/metrics');
    for (const line of text.split('\n')) {
      if (line.startsWith('hopwise_requests_total{') && line.includes('direction="outbound"') &&
          line.includes(`service="${to}"`)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return sum;
}

await withPage(cfg.url, async (page) => {
  for (let i = 0; i < (cfg.warmup || 0); i += 1) await request(cfg.traffic, '/');
  await page.goto(cfg.url);

  // --- live: the page updates itself (the reading count grows without a reload) --------------
  const first = Number(await page.getAttribute('body', 'data-rounds').catch(() => '0')) || 0;
  check('the page updates without reloading', await until('two more readings', async () =>
    Number(await page.getAttribute('body', 'data-rounds')) >= first + 2));

  // --- the graph: every service and every edge of the mesh ------------------------------------
  for (const p of new Set(cfg.proxies.map((x) => x.service))) {
    check(`graph shows service ${p}`, await page.locator(`#graph-svg [data-service="${p}"]`).count() === 1);
  }
  for (const [from, to] of cfg.edges) {
    const edge = page.locator(`#graph-svg [data-from="${from}"][data-to="${to}"]`);
    check(`graph shows edge ${from} → ${to}`, await edge.count() === 1);
    // The numbers: the page's request count is what the callers' proxies count.
    let want = -1;
    const same = await until(`${from} → ${to} to match /metrics`, async () => {
      want = await metricRequests(from, to);
      const shown = await page.locator(`#edges-table tr[data-from="${from}"][data-to="${to}"] [data-field="requests"]`).textContent();
      const svg = await edge.getAttribute('data-requests');
      return (Number(shown.replace(/,/g, '')) === want && Number(svg) === want) || { want, shown, svg };
    });
    check(`edge ${from} → ${to}: requests equal the proxies' /metrics (${want})`, same && want > 0);
    const label = await edge.getAttribute('aria-label');
    check(`edge ${from} → ${to} has a spoken label`, label.includes(`from ${from} to ${to}`) && label.includes('requests'), label);
  }

  // --- keyboard: Tab to a service, Enter shows its policy --------------------------------------
  const [firstFrom, firstTo] = cfg.edges[0];
  const node = page.locator(`#graph-svg [data-service="${firstFrom}"]`);
  await page.locator('#graph-svg').evaluate((svg) => svg.scrollIntoView());
  let tabbed = false;
  for (let i = 0; i < 30 && !tabbed; i += 1) {
    await page.keyboard.press('Tab');
    tabbed = await node.evaluate((n) => document.activeElement === n);
  }
  check(`Tab reaches service ${firstFrom} in the graph`, tabbed);
  await page.keyboard.press('Enter');
  check(`Enter shows ${firstFrom}'s policy`, await until('the policy card to be selected', async () =>
    (await page.locator(`#policy-${firstFrom}.selected`).count()) === 1));
  const policyText = await page.locator(`#policy-${firstFrom}`).textContent();
  check(`${firstFrom}'s policy names its call to ${firstTo}`, policyText.includes(firstTo), policyText);
  check('the findings of hopwise check are shown', await until('findings', async () =>
    (await page.locator('#findings-list li').count()) > 0));

  // --- calculators: the seed's samples, by keyboard ----------------------------------------------
  await page.locator('#fanout-form [data-sample="fanout"]').focus();
  await page.keyboard.press('Enter');
  check('retry fan-out: the seed sample gives 27', await until('27', async () =>
    (await page.locator('#fanout-answer').textContent()) === '27'));
  // Change a field and submit with Enter: the answer follows.
  await page.locator('#fanout-form input[name="proxy_retries"]').fill('1');
  await page.locator('#fanout-form input[name="proxy_retries"]').press('Enter');
  check('retry fan-out: 1 proxy retry gives 8', await until('8', async () =>
    (await page.locator('#fanout-answer').textContent()) === '8'));
  await page.locator('#fanout-form [data-sample="fanout"]').click();
  await until('27 again', async () => (await page.locator('#fanout-answer').textContent()) === '27');
  await page.locator('#timeouts-form [data-sample="timeouts"]').focus();
  await page.keyboard.press('Enter');
  check('timeout budgets: the seed sample gives 9.20 s', await until('9.20 s', async () =>
    (await page.locator('#timeouts-answer').textContent()) === '9.20 s'));

  // --- fault knobs: make the sample fail through the page, watch the edge ----------------------
  if (cfg.fault) {
    const { service, copy, knobs } = cfg.fault;
    const form = page.locator(`#fault-${service}-${copy}`);
    check(`fault knobs of ${service} copy ${copy} are shown`, await until('the knob form', async () =>
      (await form.count()) === 1));
    await form.locator('input[name="error_rate"]').fill('1');
    await form.locator('input[name="error_rate"]').press('Enter');
    const set = await until('the knob to be set', async () => {
      const { text } = await request(knobs, '/fault');
      return JSON.parse(text).error_rate === 1 || text;
    });
    check(`Enter in the form sets ${service}'s error rate to 1 (read back from its knobs)`, set);
    check('the page shows the new fault state', await until('state text', async () =>
      (await form.locator('[data-field="state"]').textContent()).includes('100 % errors')));
    const edgeRow = page.locator(`#edges-table tr[data-to="${service}"]`).first();
    if (cfg.traffic) {
      for (let i = 0; i < 20; i += 1) await request(cfg.traffic, '/');
      check(`the edge into ${service} shows the failures`, await until('success below 100 %', async () => {
        const s = await edgeRow.locator('[data-field="success"]').textContent();
        return !s.startsWith('100') || s;
      }));
    }
    if (process.env.HOPWISE_SCREENSHOT) {
      await page.evaluate(() => window.scrollTo(0, 0));
      await page.screenshot({ path: process.env.HOPWISE_SCREENSHOT, fullPage: true });
      console.log(`     screenshot: ${process.env.HOPWISE_SCREENSHOT}`);
    }
    await form.locator('[data-quick="clear"]').click();
    check(`Clear puts ${service} back to no fault`, await until('cleared', async () => {
      const { text } = await request(knobs, '/fault');
      return JSON.parse(text).error_rate === 0 || text;
    }));
  } else if (process.env.HOPWISE_SCREENSHOT) {
    await page.screenshot({ path: process.env.HOPWISE_SCREENSHOT, fullPage: true });
  }

  // --- the charts come in the chain's order, from the entry down, not the alphabet's ----------
  if (cfg.chain) {
    const charted = () => page.$$eval('#charts-list .chart-row', (els) => els.map((e) => `${e.dataset.from}>${e.dataset.to}`));
    const want = cfg.chain.map(([a, b]) => `${a}>${b}`);
    await until('every edge of the chain charted', async () =>
      (await charted()).filter((c) => want.includes(c)).length === want.length);
    const got = (await charted()).filter((c) => want.includes(c));
    check('the charts follow the chain from the entry down', JSON.stringify(got) === JSON.stringify(want), JSON.stringify(got));
  }
});
finish();
