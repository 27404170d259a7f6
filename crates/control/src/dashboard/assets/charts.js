// The charts over time: per edge, requests/s, success rate, p50/p99 latency and retries/s over
// the last 15 minutes, one point per scrape round (the control plane's /api/timeline), drawn
// here as inline SVG. The page keeps the 15 minutes itself and asks only for newer points.
// Each chart carries what it plots (data-values, data-last) so a test can read it back.
'use strict';

const CHART = { w: 300, h: 110, left: 44, right: 8, top: 10, bottom: 20 };
const SERIES = [
  { key: 'rps', title: 'Requests/s', lines: [['rps', 'line']], fmt: (v) => fmtRate(v) },
  { key: 'success', title: 'Success', lines: [['success', 'line ok']], fmt: (v) => fmtPct(v), max: 1 },
  { key: 'latency', title: 'Latency p50 / p99', lines: [['p50_ms', 'line'], ['p99_ms', 'line p99']], fmt: (v) => fmtMs(v) },
  { key: 'retries', title: 'Retries/s', lines: [['retries_per_s', 'line warn']], fmt: (v) => fmtRate(v) },
];
const timeline = { edges: new Map(), since: 0, windowMs: 15 * 60 * 1000, busy: false, order: [] };

// The mesh's calls in chain order (the control plane's /api/timeline `order`: from the entry
// down): a chart's place. An edge the mesh file does not declare comes after, by name.
function chainRank(e) {
  const i = timeline.order.findIndex(([from, to]) => from === e.from && to === e.to);
  return i < 0 ? timeline.order.length : i;
}

function svgEl(name, attrs = {}, text) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

/// A round upper bound for the y axis: 1, 2 or 5 × 10ⁿ at or above `v`.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  return [1, 2, 5, 10].map((m) => m * p).find((m) => m >= v);
}

/// The path of one series: a gap wherever a point has no value (no request in that round); a
/// point alone between gaps is a dot (a zero-length segment with round caps).
function pathOf(points, field, x, y) {
  const parts = [];
  let run = [];
  const flush = () => {
    if (run.length === 1) parts.push(`${run[0]} h 0.01`);
    else if (run.length) parts.push(run.join(' '));
    run = [];
  };
  for (const p of points) {
    const v = p[field];
    if (v === null || v === undefined) { flush(); continue; }
    run.push(`${run.length ? 'L' : 'M'} ${x(p.t).toFixed(1)} ${y(v).toFixed(1)}`);
  }
  flush();
  return parts.join(' ');
}

/// The x axis' span: the readings kept, at least a minute, at most the 15 minutes.
function spanOf(edges, now) {
  const oldest = Math.min(...edges.map((e) => e.points[0].t));
  return Math.min(timeline.windowMs, Math.max(60 * 1000, now - oldest));
}

function ago(ms) {
  return ms >= 60 * 1000 ? `−${Math.round(ms / 60000)} min` : `−${Math.round(ms / 1000)} s`;
}

function chart(edge, series, now, span) {
  const { w, h, left, right, top, bottom } = CHART;
  const points = edge.points;
  const values = series.lines.flatMap(([f]) => points.map((p) => p[f]).filter((v) => v !== null && v !== undefined));
  const max = series.max || niceMax(Math.max(0, ...values));
  const t0 = now - span;
  const x = (t) => left + ((Math.max(t, t0) - t0) / span) * (w - left - right);
  const y = (v) => top + (1 - Math.min(v, max) / max) * (h - top - bottom);
  const last = points.length ? points[points.length - 1] : null;
  const lastValues = series.lines.map(([f]) => (last ? last[f] : null));
  const spoken = lastValues.map((v) => (v === null || v === undefined ? 'none' : series.fmt(v))).join(' / ');
  const svg = svgEl('svg', {
    viewBox: `0 0 ${w} ${h}`, class: 'chart', role: 'img', 'data-series': series.key,
    'data-from': edge.from, 'data-to': edge.to, 'data-count': points.length,
    'data-last': JSON.stringify(lastValues), 'data-last-t': last ? last.t : '',
    'aria-label': `${series.title} from ${edge.from} to ${edge.to} over the last ${ago(span).slice(1)}: last ${spoken}, axis up to ${series.fmt(max)}`,
  });
  for (const frac of [0, 0.5, 1]) {
    const gy = top + frac * (h - top - bottom);
    svg.appendChild(svgEl('line', { x1: left, x2: w - right, y1: gy, y2: gy, class: 'grid' }));
  }
  svg.appendChild(svgEl('text', { x: left - 4, y: top + 4, class: 'axis', 'text-anchor': 'end' }, series.fmt(max)));
  svg.appendChild(svgEl('text', { x: left - 4, y: h - bottom + 4, class: 'axis', 'text-anchor': 'end' }, series.max ? '0 %' : '0'));
  svg.appendChild(svgEl('text', { x: left, y: h - 5, class: 'axis' }, ago(span)));
  svg.appendChild(svgEl('text', { x: w - right, y: h - 5, class: 'axis', 'text-anchor': 'end' }, 'now'));
  for (const [field, cls] of series.lines) {
    svg.appendChild(svgEl('path', {
      d: pathOf(points, field, x, y), class: cls, 'data-field': field,
      'data-values': JSON.stringify(points.map((p) => [p.t, p[field]])),
    }));
  }
  const fig = document.createElement('figure');
  fig.className = 'chart-fig';
  const cap = document.createElement('figcaption');
  cap.innerHTML = `<span>${esc(series.title)}</span> <strong data-field="last">${esc(spoken)}</strong>`;
  fig.append(cap, svg);
  return fig;
}

function drawCharts() {
  const list = document.getElementById('charts-list');
  const edges = [...timeline.edges.values()].filter((e) => e.points.length)
    .sort((a, b) => chainRank(a) - chainRank(b) || `${a.from}>${a.to}`.localeCompare(`${b.from}>${b.to}`));
  if (!edges.length) {
    list.innerHTML = '<p class="empty">No readings yet: the charts start with the second reading of a caller\'s proxy.</p>';
    return;
  }
  // The x axis ends at the newest reading: the control plane's clock, not the browser's.
  const now = Math.max(...edges.map((e) => e.points[e.points.length - 1].t));
  // Until 15 minutes are kept, the axis spans what is (at least a minute).
  const span = spanOf(edges, now);
  const rows = edges.map((e) => {
    const row = document.createElement('div');
    row.className = 'chart-row';
    row.dataset.from = e.from;
    row.dataset.to = e.to;
    const title = document.createElement('h3');
    title.textContent = `${e.from} → ${e.to}`;
    const charts = document.createElement('div');
    charts.className = 'charts';
    charts.append(...SERIES.map((s) => chart(e, s, now, span)));
    row.append(title, charts);
    return row;
  });
  list.replaceChildren(...rows);
}

async function pollTimeline() {
  if ((typeof state !== 'undefined' && state.paused) || timeline.busy) return;
  timeline.busy = true;
  try {
    const r = await api(`/api/timeline?since=${timeline.since}`);
    timeline.windowMs = r.window_ms;
    timeline.order = r.order || [];
    for (const e of r.edges) {
      const key = `${e.from}>${e.to}`;
      const known = timeline.edges.get(key) || { from: e.from, to: e.to, points: [] };
      known.points.push(...e.points);
      timeline.edges.set(key, known);
      for (const p of e.points) timeline.since = Math.max(timeline.since, p.t);
    }
    const oldest = timeline.since - timeline.windowMs;
    for (const e of timeline.edges.values()) e.points = e.points.filter((p) => p.t >= oldest);
    document.body.dataset.timeline = String(timeline.since);
    drawCharts();
  } catch (err) {
    document.getElementById('charts-list').innerHTML = `<p class="error">${esc(err.message)}</p>`;
  } finally {
    timeline.busy = false;
  }
}

document.addEventListener('DOMContentLoaded', () => {
  pollTimeline();
  setInterval(pollTimeline, 1000);
});
