// The dashboard's traces in a real browser (Debian's chromium, headless, through
// playwright-core), against what /api/traces/<id> reported to the Rust test
// (crates/hopwise/tests/dashboard_traces.rs): the page lists both traces in a scrolling box of
// its own; the filter for errors lists the failed one alone, and "all" both again; chosen, a
// trace's waterfall is drawn beside the list (not below it), under a time axis from 0 to the
// trace's length, with one row per span in the API's (parent) order, the same services,
// directions and depths, every label whole and naming its copy, and each bar carrying the
// proxies' and the app's time the API computed, its two segments drawn in that proportion and
// the bar placed and sized on the trace's time line.
// With HOPWISE_SCREENSHOT_TRACES=path, saves the traces section there.
//
//   node tests/browser/traces.mjs '{"url":"http://127.0.0.1:P/","trace":"<32 hex>","failed":"<32 hex>","rows":[…]}'

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
  const rowsListed = async () => page.$$eval('#traces-table tbody tr[data-trace]', (els) => els.map((e) => e.dataset.trace));
  await until('both traces listed', async () => (await rowsListed()).length === 2);
  const box = await page.$eval('.traces-list', (e) => {
    const cs = getComputedStyle(e);
    return { overflow: cs.overflowY, maxHeight: cs.maxHeight };
  });
  check('the list scrolls in a box of its own', box.overflow === 'auto' && box.maxHeight !== 'none', JSON.stringify(box));
  await page.locator('.traces-filter [data-show="errors"]').click();
  const onlyFailed = await until('the errors alone', async () => {
    const ids = await rowsListed();
    return ids.length === 1 && ids[0] === cfg.failed;
  });
  check('the filter for errors lists the failed trace alone', onlyFailed, JSON.stringify(await rowsListed()));
  check('the failed trace says so',
    (await page.textContent(`#traces-table tr[data-trace="${cfg.failed}"]`)).includes('error'));
  await page.locator('.traces-filter [data-show="all"]').click();
  check('"all" lists both again', await until('both again', async () => (await rowsListed()).length === 2));
  await page.locator(`#traces-table button[data-trace="${cfg.trace}"]`).click();
  const drawn = await until('its waterfall', async () =>
    (await page.locator(`#waterfall[data-trace="${cfg.trace}"] .wf-row`).count()) === cfg.rows.length);
  check(`the waterfall has one row per span (${cfg.rows.length})`, drawn);
  const [list, fall] = await Promise.all(['.traces-list', '#waterfall'].map((sel) =>
    page.$eval(sel, (e) => { const r = e.getBoundingClientRect(); return { left: r.left, right: r.right, top: r.top, bottom: r.bottom }; })));
  check('the waterfall is beside the list, not below it',
    fall.left >= list.right - 1 && fall.top < list.bottom, JSON.stringify({ list, fall }));
  const ticks = await page.$$eval('#waterfall .wf-axis .wf-tick', (els) => els.map((e) => ({ ns: Number(e.dataset.ns), text: e.textContent })));
  const length = Math.max(...cfg.rows.map((r) => r.offset_ns + r.drawn_ns));
  check('a time axis from 0 to the trace\'s length, every tick labelled',
    ticks.length >= 3 && ticks[0].ns === 0 && Math.abs(ticks[ticks.length - 1].ns - length) <= 1
    && ticks.every((t, i) => t.text.length > 0 && (i === 0 || t.ns > ticks[i - 1].ns)), JSON.stringify(ticks));
  const labels = await page.$$eval('#waterfall .wf-row .wf-label', (els) => els.map((e) => ({
    text: e.textContent, whole: e.scrollWidth <= e.clientWidth + 1 && e.scrollHeight <= e.clientHeight + 1 })));
  check('every label is shown whole', labels.every((l) => l.whole), JSON.stringify(labels));
  check('a try names the copy it reached', labels.some((l) => l.text.includes('→ checkout[0] (')), JSON.stringify(labels));
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
