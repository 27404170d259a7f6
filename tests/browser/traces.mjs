// The dashboard's waterfall in a real browser (Debian's chromium, headless, through
// playwright-core), against what /api/traces/<id> reported to the Rust test
// (crates/hopwise/tests/dashboard_traces.rs): the page lists the trace; chosen, its waterfall
// has one row per span in the API's (parent) order, with the same services, directions and
// depths, and each bar carries the proxies' and the app's time the API computed, its two
// segments drawn in that proportion and the bar placed and sized on the trace's time line.
// With HOPWISE_SCREENSHOT_TRACES=path, saves the traces section there.
//
//   node tests/browser/traces.mjs '{"url":"http://127.0.0.1:P/","trace":"<32 hex>","rows":[…]}'

import { check, finish, until, withPage } from './lib.mjs';

const cfg = JSON.parse(process.argv[2] || '{}');
const near = (a, b) => Math.abs(a - b) < 0.05;

await withPage(cfg.url, async (page) => {
  await page.goto(cfg.url);
  const listed = await until('the trace in the list', async () =>
    (await page.locator(`#traces-table tr[data-trace="${cfg.trace}"]`).count()) === 1);
  check('the page lists the trace', listed);
  check('the page says the spans come here',
    (await page.textContent('#traces-where')).includes('send their spans here'));
  await page.locator(`#traces-table button[data-trace="${cfg.trace}"]`).click();
  const drawn = await until('its waterfall', async () =>
    (await page.locator(`#waterfall[data-trace="${cfg.trace}"] .wf-row`).count()) === cfg.rows.length);
  check(`the waterfall has one row per span (${cfg.rows.length})`, drawn);
  const rows = await page.$$eval('#waterfall .wf-row', (els) => els.map((e) => {
    const bar = e.querySelector('.wf-bar');
    const seg = (c) => e.querySelector(`.wf-bar > .${c}`);
    return {
      ...e.dataset,
      label: e.querySelector('.wf-label').textContent,
      left: parseFloat(bar.style.left), width: parseFloat(bar.style.width),
      proxySeg: Number(seg('wf-proxy').dataset.ns), appSeg: Number(seg('wf-app').dataset.ns),
      proxyPct: parseFloat(seg('wf-proxy').style.width), appPct: parseFloat(seg('wf-app').style.width),
    };
  }));
  const total = Math.max(...cfg.rows.map((r) => r.offset_ns + r.drawn_ns)) - Math.min(...cfg.rows.map((r) => r.offset_ns));
  cfg.rows.forEach((want, i) => {
    const got = rows[i] || {};
    const name = `row ${i + 1} (${want.service} ${want.direction})`;
    check(`${name}: the span, in parent order`, got.span === want.span_id && got.service === want.service
      && got.direction === want.direction && Number(got.depth) === want.depth, JSON.stringify(got));
    check(`${name}: the proxies' and the app's time are the API's`,
      Number(got.proxyNs) === want.proxy_ns && Number(got.appNs) === want.app_ns
      && got.proxySeg === want.proxy_ns && got.appSeg === want.app_ns, JSON.stringify(got));
    const whole = want.proxy_ns + want.app_ns;
    check(`${name}: its segments are drawn in that proportion`,
      near(got.proxyPct, (100 * want.proxy_ns) / whole) && near(got.appPct, (100 * want.app_ns) / whole),
      JSON.stringify(got));
    check(`${name}: its bar sits where the API placed it`,
      near(got.left, (100 * want.offset_ns) / total)
      && near(got.width, Math.max((100 * want.drawn_ns) / total, 0.2)), JSON.stringify(got));
  });
  if (process.env.HOPWISE_SCREENSHOT_TRACES) {
    await page.locator('#traces').screenshot({ path: process.env.HOPWISE_SCREENSHOT_TRACES });
    console.log(`     screenshot: ${process.env.HOPWISE_SCREENSHOT_TRACES}`);
  }
});
finish();
