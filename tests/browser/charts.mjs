// The dashboard's charts over time in a real browser (Debian's chromium, headless, through
// playwright-core), against the caller's proxies' own /metrics. For each phase (no fault, then
// the callee failing a quarter of its requests), the script reads /metrics, waits until the page
// has charted a round that read the proxies after that, sends a burst of requests, reads
// /metrics again and waits for such a round again. The charted points in between then cover exactly the two
// /metrics readings' difference (no other traffic crosses the edge), so:
//
// - requests/s: Σ rate × interval over those points equals the growth of
//   hopwise_requests_total; the tolerance is the f32 rounding of a rate (≤ 1e-4 of the count,
//   plus 0.01 per point), not anything about time;
// - success: Σ ok and Σ failed equal the growth of hopwise_responses_total by class, and each
//   point's drawn success rate is its own ok / (ok + failed) (to 1e-6);
// - retries/s: Σ retries equals the growth of hopwise_retries_total;
// - p50/p99: each point lies inside the bucket range /metrics' histogram difference spans;
// - the last point, after the burst, is 0 req/s: /metrics did not move either.
// The drawn values (each chart's data-values) are compared with /api/timeline, read by the page.
// With HOPWISE_SCREENSHOT_CHARTS=path, saves the charts' section there.
//
//   node tests/browser/charts.mjs '{"url":"http://127.0.0.1:P/","from":"a","to":"c",
//     "admins":["127.0.0.1:Q"],"traffic":"127.0.0.1:S","knobs":"127.0.0.1:R","burst":150}'

import { check, finish, request, until, withPage } from './lib.mjs';

const cfg = JSON.parse(process.argv[2] || '{}');
const { from, to } = cfg;

function labelsOf(line) {
  return line.slice(line.indexOf('{') + 1, line.lastIndexOf('}'));
}

/// The edge's counters at the callers' proxies, summed: requests, ok/failed responses,
/// retries, and the latency histogram (cumulative, by `le`).
async function readMetrics() {
  const m = { requests: 0, ok: 0, failed: 0, retries: 0, buckets: new Map() };
  for (const admin of cfg.admins) {
    const { text } = await request(admin, '/metrics');
    for (const line of text.split('\n')) {
      if (!line.includes(`service="${to}"`) || line.startsWith('#')) continue;
      const labels = labelsOf(line);
      const value = Number(line.slice(line.lastIndexOf(' ') + 1));
      const outbound = labels.includes('direction="outbound"');
      if (line.startsWith('hopwise_requests_total{') && outbound) m.requests += value;
      else if (line.startsWith('hopwise_responses_total{') && outbound) {
        if (/class="(5xx|grpc-error)"/.test(labels)) m.failed += value; else m.ok += value;
      } else if (line.startsWith('hopwise_retries_total{')) m.retries += value;
      else if (line.startsWith('hopwise_request_duration_seconds_bucket{') && outbound) {
        const le = labels.match(/le="([^"]+)"/)[1];
        const bound = le === '+Inf' ? Infinity : Number(le);
        m.buckets.set(bound, (m.buckets.get(bound) || 0) + value);
      }
    }
  }
  return m;
}

/// The range (ms) of the buckets that grew between two readings: every quantile of the
/// observations in between lies inside it.
function grownRange(before, after) {
  const bounds = [...after.buckets.keys()].sort((a, b) => a - b);
  let lo = null, hi = null, prev = 0, prevGrowth = 0;
  for (const b of bounds) {
    const growth = after.buckets.get(b) - (before.buckets.get(b) || 0);
    if (growth > prevGrowth) { if (lo === null) lo = prev; hi = b; }
    prev = b;
    prevGrowth = growth;
  }
  // In +Inf, the dashboard (as histogram_quantile) answers the largest finite bound.
  if (hi === Infinity) hi = bounds[bounds.length - 2];
  return [lo * 1000, hi * 1000];
}

/// The newest charted reading's time (Unix ms), as the page says.
async function chartedUpTo(page) {
  return Number(await page.getAttribute('body', 'data-timeline')) || 0;
}

/// Waits for the second charted round after `ms` and gives its time. A round stamps its points
/// when all its reads are done, so only the second one surely read the proxies after `ms`.
async function secondRoundAfter(page, what, ms) {
  let first = 0;
  const ok = await until(`${what}: a charted round`, async () => (first = await chartedUpTo(page)) > ms) &&
    await until(`${what}: one more`, async () => (await chartedUpTo(page)) > first);
  return ok ? chartedUpTo(page) : null;
}

/// What the page drew for the edge: per series field, [t, value] pairs.
async function drawn(page) {
  return page.evaluate(({ from, to }) => {
    const out = {};
    for (const path of document.querySelectorAll(`#charts-list svg[data-from="${from}"][data-to="${to}"] path[data-field]`)) {
      out[path.dataset.field] = JSON.parse(path.dataset.values);
    }
    return out;
  }, { from, to });
}

/// Sends `n` requests through the caller's proxy, one after the other.
async function burst(n) {
  const statuses = {};
  for (let i = 0; i < n; i += 1) {
    const { status } = await request(cfg.traffic, '/');
    statuses[status] = (statuses[status] || 0) + 1;
  }
  return statuses;
}

async function phase(page, name, errorRate) {
  const set = await request(cfg.knobs, '/fault', { method: 'POST', body: JSON.stringify({ error_rate: errorRate }) });
  check(`${name}: ${to}'s error rate set to ${errorRate}`, set.status === 200 && JSON.parse(set.text).error_rate === errorRate, set.text);
  const before = await readMetrics();
  const start = await secondRoundAfter(page, 'before the burst', Date.now());
  const sent = await burst(cfg.burst);
  const after = await readMetrics();
  const end = await secondRoundAfter(page, 'after the burst', Date.now());
  check(`${name}: charted readings before and after the burst`, start !== null && end !== null);
  const api = await page.evaluate(async ({ since }) => (await fetch(`/api/timeline?since=${since}`)).json(), { since: start });
  const edge = api.edges.find((e) => e.from === from && e.to === to);
  const points = edge ? edge.points.filter((p) => p.t <= end) : [];
  const d = { requests: after.requests - before.requests, ok: after.ok - before.ok,
    failed: after.failed - before.failed, retries: after.retries - before.retries };
  console.log(`     ${name}: sent ${JSON.stringify(sent)}; /metrics grew ${JSON.stringify(d)} over ${points.length} charted points`);
  check(`${name}: requests went through`, d.requests >= cfg.burst && points.length >= 1);
  const sum = (f) => points.reduce((s, p) => s + f(p), 0);
  check(`${name}: the points' requests add up to /metrics' growth (${d.requests})`, sum((p) => p.requests) === d.requests,
    String(sum((p) => p.requests)));
  const integral = sum((p) => p.rps * p.secs);
  const slack = 1e-4 * d.requests + 0.01 * points.length;
  check(`${name}: requests/s × interval integrates to /metrics' growth (${integral.toFixed(2)} vs ${d.requests}, ± ${slack.toFixed(2)})`,
    Math.abs(integral - d.requests) <= slack);
  check(`${name}: ok and failed add up to /metrics' responses (${d.ok} ok, ${d.failed} failed)`,
    sum((p) => p.ok) === d.ok && sum((p) => p.failed) === d.failed, `${sum((p) => p.ok)} ${sum((p) => p.failed)}`);
  check(`${name}: retries add up to /metrics' (${d.retries})`, sum((p) => p.retries) === d.retries, String(sum((p) => p.retries)));
  const [lo, hi] = grownRange(before, after);
  // f32 on the wire: a bound may come back a few units in its 7th digit off.
  const inRange = (v) => v === null || (v >= lo * (1 - 1e-5) && v <= hi * (1 + 1e-5));
  check(`${name}: p50 and p99 lie in the buckets /metrics' histogram grew in (${lo}–${hi} ms)`,
    points.every((p) => inRange(p.p50_ms) && inRange(p.p99_ms)), JSON.stringify(points.map((p) => [p.p50_ms, p.p99_ms])));
  // What the page drew is what the API served, point by point.
  const lines = await drawn(page);
  const same = (field, value) => points.every((p) => {
    const hit = (lines[field] || []).find(([t]) => t === p.t);
    const want = value(p);
    return hit && (want === null ? hit[1] === null : Math.abs(hit[1] - want) <= 1e-6 * Math.max(1, Math.abs(want)));
  });
  check(`${name}: the requests/s chart draws each point's rate`, same('rps', (p) => p.rps));
  check(`${name}: the success chart draws each point's ok / (ok + failed)`,
    same('success', (p) => (p.ok + p.failed ? p.ok / (p.ok + p.failed) : null)));
  check(`${name}: the latency chart draws p50 and p99`, same('p50_ms', (p) => p.p50_ms) && same('p99_ms', (p) => p.p99_ms));
  check(`${name}: the retries chart draws retries/s`, same('retries_per_s', (p) => p.retries_per_s));
  if (errorRate > 0) {
    const rate = d.ok / (d.ok + d.failed);
    check(`${name}: the success rate /metrics shows (${rate.toFixed(3)}) is below 100 %`, rate < 1);
  }
  return d;
}

await withPage(cfg.url, async (page) => {
  await page.goto(cfg.url);
  const row = page.locator(`#charts-list .chart-row[data-from="${from}"][data-to="${to}"]`);
  check(`the page charts ${from} → ${to}`, await until('the chart row', async () => (await row.count()) === 1));
  check('four charts per edge, each with a spoken label', await until('four charts', async () =>
    (await row.locator('svg[role="img"][aria-label]').count()) === 4));
  await phase(page, 'healthy', 0);
  await phase(page, 'a quarter failing', 0.25);
  await request(cfg.knobs, '/fault/clear', { method: 'POST', body: '{}' });
  // Quiet now: the last charted point says 0 req/s, as /metrics, which stays where it was.
  const quietFrom = await readMetrics();
  await secondRoundAfter(page, 'quiet', Date.now());
  const quietTo = await readMetrics();
  const last = JSON.parse(await row.locator('svg[data-series="rps"]').getAttribute('data-last'));
  check(`the last point is 0 req/s while /metrics does not move (${quietTo.requests - quietFrom.requests})`,
    quietTo.requests === quietFrom.requests && last[0] === 0, JSON.stringify(last));
  if (process.env.HOPWISE_SCREENSHOT_CHARTS) {
    await page.locator('#charts').screenshot({ path: process.env.HOPWISE_SCREENSHOT_CHARTS });
    console.log(`     screenshot: ${process.env.HOPWISE_SCREENSHOT_CHARTS}`);
  }
});
finish();
