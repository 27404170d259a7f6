// The hopwise dashboard: polls the control plane's JSON API every second and draws the service
// graph (inline SVG), the tables, the calculators and the fault knobs. No framework, no build
// step, nothing loaded from outside.
'use strict';

const $ = (sel, root = document) => root.querySelector(sel);
const SVG = 'http://www.w3.org/2000/svg';

function esc(text) {
  return String(text ?? '').replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  }[c]));
}

// --- number formats -------------------------------------------------------------------------
function fmtMs(ms) {
  if (ms === null || ms === undefined) return '–';
  if (ms >= 1000) return (ms / 1000).toFixed(2) + ' s';
  if (ms >= 100) return ms.toFixed(0) + ' ms';
  if (ms >= 10) return ms.toFixed(1) + ' ms';
  if (ms >= 1) return ms.toFixed(2) + ' ms';
  return (ms * 1000).toFixed(0) + ' µs';
}
function fmtRate(r) {
  if (!r) return '0';
  return r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2);
}
function fmtPct(x) {
  if (x === null || x === undefined) return '–';
  if (x >= 1) return '100 %';
  return (Math.floor(x * 1000) / 10).toFixed(1) + ' %';
}
function fmtCount(n) { return Number(n || 0).toLocaleString('en-US'); }
function fmtMap(m) {
  const entries = Object.entries(m || {});
  if (!entries.length) return '–';
  return entries.map(([k, v]) => `${k} ${fmtCount(v)}`).join(', ');
}
function health(success, requests) {
  if (!requests || success === null || success === undefined) return 'idle';
  return success >= 0.99 ? 'ok' : success >= 0.95 ? 'warn' : 'bad';
}

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  };
  const resp = await fetch(path, init);
  let data = null;
  try { data = await resp.json(); } catch (_) { data = { error: `answer ${resp.status}` }; }
  if (!resp.ok) throw new Error((data && data.error) || `answer ${resp.status}`);
  return data;
}

// --- the graph --------------------------------------------------------------------------------
const state = { graph: null, paused: false, selected: null, configVersion: null, lastOk: 0 };

/// Layers by longest path from the services nobody calls (the mesh has no cycles).
function layout(services, edges) {
  const names = services.map((s) => s.name);
  const callers = new Map(names.map((n) => [n, []]));
  for (const e of edges) if (callers.has(e.to) && callers.has(e.from)) callers.get(e.to).push(e.from);
  const depth = new Map();
  const visit = (n, seen) => {
    if (depth.has(n)) return depth.get(n);
    if (seen.has(n)) return 0;
    seen.add(n);
    const d = Math.max(-1, ...callers.get(n).map((c) => visit(c, seen))) + 1;
    depth.set(n, d);
    return d;
  };
  names.forEach((n) => visit(n, new Set()));
  const layers = [];
  for (const n of names) (layers[depth.get(n)] ||= []).push(n);
  const W = 170, H = 74, GX = 250, GY = 48, PAD = 24;
  const pos = new Map();
  const tallest = Math.max(...layers.map((l) => l.length));
  const height = PAD * 2 + tallest * H + (tallest - 1) * GY;
  layers.forEach((layer, i) => {
    const top = (height - (layer.length * H + (layer.length - 1) * GY)) / 2;
    layer.forEach((n, j) => pos.set(n, { x: PAD + i * (W + GX), y: top + j * (H + GY), w: W, h: H }));
  });
  const width = PAD * 2 + layers.length * W + (layers.length - 1) * GX;
  return { pos, width: Math.max(width, 400), height: Math.max(height, 140) };
}

function el(name, attrs = {}, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function edgeLabel(e) {
  if (!e.requests) return 'no traffic yet';
  return `${fmtRate(e.rps)} req/s · ${fmtPct(e.success)} · p99 ${fmtMs(e.p99_ms)}`;
}

/// Draws the graph. When the services and calls are the ones already drawn, each service and
/// edge is updated in place (same elements), so keyboard focus and screen-reader position stay
/// where they are while the numbers change every second.
function drawGraph(g) {
  const svg = $('#graph-svg');
  const fresh = buildGraph(g);
  const shape = JSON.stringify([g.services.map((s) => s.name), g.edges.map((e) => [e.from, e.to])]);
  if (svg.dataset.shape !== shape) {
    for (const a of ['viewBox', 'width', 'height']) svg.setAttribute(a, fresh.getAttribute(a));
    svg.replaceChildren(...fresh.childNodes);
    svg.dataset.shape = shape;
    return;
  }
  for (const neu of fresh.querySelectorAll('[data-key]')) {
    const old = svg.querySelector(`[data-key="${CSS.escape(neu.dataset.key)}"]`);
    if (!old) continue;
    for (const a of [...old.attributes]) if (!neu.hasAttribute(a.name)) old.removeAttribute(a.name);
    for (const a of [...neu.attributes]) old.setAttribute(a.name, a.value);
    old.replaceChildren(...neu.childNodes);
  }
}

/// The graph as a detached <svg>: edges (a wire and a label each), then services.
function buildGraph(g) {
  const svg = document.createElementNS(SVG, 'svg');
  const { pos, width, height } = layout(g.services, g.edges);
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  // A little larger than life, never wider than the panel.
  svg.setAttribute('width', String(Math.round(width * 1.2)));
  svg.setAttribute('height', String(Math.round(height * 1.2)));
  const defs = el('defs');
  for (const h of ['ok', 'warn', 'bad', 'idle']) {
    const m = el('marker', { id: `arrow-${h}`, viewBox: '0 0 10 10', refX: '10', refY: '5',
      markerWidth: '7', markerHeight: '7', orient: 'auto-start-reverse' });
    m.appendChild(el('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: `arrowhead ${h}` }));
    defs.appendChild(m);
  }
  svg.appendChild(defs);
  const edgeGroup = el('g', { class: 'edges' });
  const nodeGroup = el('g', { class: 'nodes' });
  // Edges paint below the nodes, so they come first in the tab order too.
  svg.append(edgeGroup, nodeGroup);
  for (const e of g.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const h = health(e.success, e.requests);
    const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
    const mx = (x1 + x2) / 2;
    const label = edgeLabel(e);
    const grp = el('g', {
      class: `edge ${h}`, tabindex: '0', role: 'img', 'data-key': `edge:${e.from}>${e.to}`,
      'data-from': e.from, 'data-to': e.to, 'data-requests': String(e.requests),
      'aria-label': `Calls from ${e.from} to ${e.to}: ${fmtCount(e.requests)} requests, ${label}` +
        (Object.keys(e.retries).length ? `, retries ${fmtMap(e.retries)}` : '') +
        (Object.keys(e.limits).length ? `, limits tripped ${fmtMap(e.limits)}` : ''),
    });
    const width = e.rps > 0 ? Math.min(2 + Math.log10(1 + e.rps) * 2, 7) : 2;
    grp.appendChild(el('path', {
      d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2 - 2} ${y2}`,
      class: 'wire', 'stroke-width': width.toFixed(1), 'marker-end': `url(#arrow-${h})`,
    }));
    // The label: a pill on the middle of the curve, the numbers on top, the rest below.
    const extra = [];
    const retries = Object.values(e.retries).reduce((s, v) => s + v, 0);
    if (retries) extra.push(`${fmtCount(retries)} retries`);
    const limits = Object.values(e.limits).reduce((s, v) => s + v, 0);
    if (limits) extra.push(`${fmtCount(limits)} limits tripped`);
    if (e.ejections) extra.push(`${fmtCount(e.ejections)} ejected`);
    if (e.proxy_p50_ms !== null && e.requests) extra.push(`proxies +${fmtMs(e.proxy_p50_ms)}`);
    const lines = [label, extra.join(' · ')].filter(Boolean);
    const boxW = Math.max(...lines.map((l) => l.length)) * 6.9 + 18, boxH = lines.length * 15 + 8;
    // On a curve, the pill sits on its middle; on a straight wire, above it (the wire stays seen).
    const lx = mx, ly = Math.abs(y2 - y1) < 4 ? y1 - boxH / 2 - 6 : (y1 + y2) / 2;
    grp.appendChild(el('rect', { x: lx - boxW / 2, y: ly - boxH / 2, width: boxW, height: boxH, rx: 6, class: 'edge-pill' }));
    const t = el('text', { x: lx, y: ly - boxH / 2 + 16, class: 'edge-label', 'text-anchor': 'middle' });
    lines.forEach((line, i) => t.appendChild(el('tspan', { x: lx, dy: i ? '15' : '0', class: i ? 'edge-extra' : '' }, line)));
    grp.appendChild(t);
    edgeGroup.appendChild(grp);
  }
  for (const s of g.services) {
    const p = pos.get(s.name);
    const copies = s.proxies.filter((c) => c.inbound);
    const healthy = copies.filter((c) => c.healthy).length;
    const clients = s.proxies.length - copies.length;
    const stats = s.stats || {};
    const copiesText = s.external ? 'outside the mesh'
      : copies.length || !clients ? `${healthy}/${copies.length} copies healthy`
        : `${clients} client prox${clients === 1 ? 'y' : 'ies'}, no inbound`;
    const grp = el('g', {
      class: `node${s.name === state.selected ? ' selected' : ''}${s.external ? ' external' : ''}`,
      tabindex: '0', role: 'button', 'data-key': `node:${s.name}`, 'data-service': s.name,
      'aria-label': `Service ${s.name} (${s.protocol}${s.entry ? ', entry' : ''}): ${copiesText}` +
        (stats.rps !== undefined ? `, ${fmtRate(stats.rps)} requests per second in` : '') +
        '. Press Enter to show its policy.',
      'aria-pressed': s.name === state.selected ? 'true' : 'false',
    });
    grp.appendChild(el('rect', { x: p.x, y: p.y, width: p.w, height: p.h, rx: 10 }));
    grp.appendChild(el('text', { x: p.x + 14, y: p.y + 24, class: 'node-name' }, s.name));
    grp.appendChild(el('text', { x: p.x + 14, y: p.y + 63, class: 'node-proto' },
      (s.entry ? 'entry · ' : '') + s.protocol + (s.external ? ' · external' : '')));
    const line2 = s.external ? 'outside the mesh'
      : (copies.length || !clients ? `${healthy}/${copies.length} healthy` : `${clients} client proxy`) +
        (copies.length && stats.rps !== undefined ? ` · ${fmtRate(stats.rps)} req/s` : '');
    grp.appendChild(el('text', { x: p.x + 14, y: p.y + 44, class: 'node-sub' }, line2));
    const select = () => selectService(s.name);
    grp.addEventListener('click', select);
    grp.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); select(); }
    });
    nodeGroup.appendChild(grp);
  }
  return svg;
}

function drawEdgesTable(g) {
  const body = $('#edges-table tbody');
  if (!g.edges.length) {
    body.innerHTML = '<tr><td colspan="12" class="empty">The mesh file has no calls.</td></tr>';
    return;
  }
  body.innerHTML = g.edges.map((e) => {
    const h = health(e.success, e.requests);
    const when = e.live ? '' : ' <span class="muted" title="no traffic in the last 10 s: since start">(all)</span>';
    return `<tr data-from="${esc(e.from)}" data-to="${esc(e.to)}">
      <th scope="row"><span class="badge ${h}" aria-hidden="true"></span>${esc(e.from)} → ${esc(e.to)}</th>
      <td class="num" data-field="requests">${fmtCount(e.requests)}</td>
      <td class="num" data-field="rps">${fmtRate(e.rps)}</td>
      <td class="num" data-field="success">${fmtPct(e.success)}${e.requests ? when : ''}</td>
      <td class="num" data-field="p50">${fmtMs(e.p50_ms)}</td>
      <td class="num" data-field="p99">${fmtMs(e.p99_ms)}</td>
      <td data-field="retries">${esc(fmtMap(e.retries))}</td>
      <td data-field="skipped">${esc(fmtMap(e.retries_skipped))}</td>
      <td data-field="limits">${esc(fmtMap(e.limits))}</td>
      <td data-field="local">${esc(fmtMap(e.local_replies))}</td>
      <td class="num" data-field="ejections">${e.ejections ? fmtCount(e.ejections) : '–'}</td>
      <td class="num" data-field="proxy">${fmtMs(e.proxy_p50_ms)} / ${fmtMs(e.proxy_p99_ms)}</td>
    </tr>`;
  }).join('');
}

function drawServicesTable(g) {
  $('#services-table tbody').innerHTML = g.services.map((s) => {
    const st = s.stats || {};
    const copies = s.external ? '<span class="muted">outside the mesh</span>'
      : s.proxies.length ? s.proxies.map((c) => {
        const up = c.healthy !== false;
        const name = c.inbound ? c.inbound : `${c.proxy || 'proxy'} (client only)`;
        return `<span class="copy ${up ? 'up' : 'down'}" title="admin ${esc(c.admin || 'none')}; metrics: ${esc(c.metrics)}">${esc(name)}${up ? '' : ' (unhealthy)'}${c.metrics === 'ok' ? '' : ' · ' + esc(c.metrics)}</span>`;
      }).join(' ')
        : '<span class="muted">none registered</span>';
    const seen = st.app || {};
    const calls = (seen.carried || 0) + (seen.absent || 0);
    const carries = (s.carries && s.carries.disagrees)
      ? `<div class="warn-text" data-field="carries">${esc(s.carries.disagrees)}</div>`
      : calls ? `<div class="muted" data-field="carries" title="calls its app made while serving requests">trace context on ${fmtCount(seen.carried || 0)} of ${fmtCount(calls)} calls</div>` : '';
    return `<tr data-service="${esc(s.name)}">
      <th scope="row">${esc(s.name)}</th>
      <td>${copies}${carries}</td>
      <td class="num">${st.rps !== undefined ? fmtRate(st.rps) : '–'}</td>
      <td class="num">${st.requests !== undefined ? fmtCount(st.requests) : '–'}</td>
      <td class="num">${fmtPct(st.success)}</td>
      <td class="num">${fmtMs(st.inbound_overhead_p50_ms)} / ${fmtMs(st.inbound_overhead_p99_ms)}</td>
      <td class="num">${fmtMs(st.outbound_overhead_p50_ms)} / ${fmtMs(st.outbound_overhead_p99_ms)}</td>
    </tr>`;
  }).join('');
}

async function poll() {
  if (state.paused) return;
  try {
    const g = await api('/api/graph');
    state.graph = g;
    state.lastOk = Date.now();
    $('#mesh-name').textContent = g.mesh;
    $('#config-version').textContent = `v${g.config_version}`;
    $('#snapshot-version').textContent = g.version;
    const all = g.services.flatMap((s) => s.proxies);
    $('#copies-read').textContent = `${all.filter((c) => c.metrics === 'ok').length} of ${all.length}`;
    $('#live-text').textContent = `live · reading ${g.rounds}`;
    $('#live-dot').className = 'dot on';
    document.body.dataset.rounds = String(g.rounds);
    drawGraph(g);
    drawEdgesTable(g);
    drawServicesTable(g);
    if (g.config_version !== state.configVersion) {
      state.configVersion = g.config_version;
      loadPolicy();
      loadFindings();
    }
  } catch (err) {
    $('#live-text').textContent = `cannot reach the control plane (${err.message})`;
    $('#live-dot').className = 'dot off';
  }
}

// --- policy and findings ---------------------------------------------------------------------
let policyData = [];

function selectService(name) {
  state.selected = state.selected === name ? null : name;
  $('#policy-service').value = state.selected || '';
  drawPolicy();
  if (state.graph) drawGraph(state.graph);
  if (state.selected) {
    const card = document.getElementById(`policy-${state.selected}`);
    if (card) card.scrollIntoView({ behavior: 'smooth', block: 'nearest' });
  }
}

function dur(v) { return v === null || v === undefined ? 'none' : v; }
function cap(v) { return v >= 4294967295 ? 'unlimited' : fmtCount(v); }

function policyRow(c) {
  const p = c.policy;
  const r = p.retry;
  const backoff = r.backoff ? `${r.backoff.strategy || ''} ${r.backoff.base || ''}`.trim() : '';
  const retry = r.count === 0 ? 'no retries'
    : `${r.count} on ${r.on.join(', ')}${r.status_codes.length ? ` (codes ${r.status_codes.join(', ')})` : ''}` +
      `${backoff ? `; back-off ${backoff}` : ''}${r.single_hop ? '; single hop' : ''}`;
  const budget = p.budget ? `${Math.round(p.budget.ratio * 100)} % (min ${p.budget.min_per_second}/s over ${p.budget.window})` : 'none';
  const l = p.limits;
  const limits = `conns ${cap(l.max_connections)}, pending ${cap(l.max_pending)}, requests ${cap(l.max_requests)}, retries ${cap(l.max_retries)}`;
  const safety = c.idempotent ? `safe to repeat (${c.safety_from})` : `not safe to repeat (${c.safety_from})` + (r.only_if_safe ? ' — retried only if safe' : '');
  const route = c.route ? ` / ${esc(c.route)}${c.route_path ? ` <code>${esc(c.route_path)}</code>` : ''}` : '';
  return `<tr>
    <th scope="row">${esc(c.to)}${route}</th>
    <td>${esc(c.method)}<br><span class="${c.idempotent ? 'muted' : 'warn-text'}">${esc(safety)}</span></td>
    <td>${esc(dur(p.timeout))}</td>
    <td>${esc(dur(p.per_try_timeout))}</td>
    <td>${esc(retry)}${c.app_retries ? `<br><span class="muted">+ ${c.app_retries} by the app</span>` : ''}</td>
    <td>${esc(budget)}</td>
    <td>${esc(limits)}</td>
    <td>${p.outlier ? `after ${p.outlier.consecutive_gateway_failures} failures, ${esc(p.outlier.base_ejection_time)}` : 'off'}<br><span class="muted">${esc(p.balancer)}</span></td>
  </tr>`;
}

function drawPolicy() {
  const only = $('#policy-service').value;
  const list = policyData.filter((s) => !only || s.name === only);
  $('#policy-list').innerHTML = list.map((s) => {
    const entry = s.entry ? ` · entry (client waits ${esc(dur(s.entry.timeout))}, retries ${s.entry.retries})` : '';
    const head = `<h3>${esc(s.name)} <span class="muted">${esc(s.protocol)}${entry}${s.external ? ' · outside the mesh' : ''}</span></h3>`;
    if (!s.calls.length) return `<div class="card policy${s.name === state.selected ? ' selected' : ''}" id="policy-${esc(s.name)}">${head}<p class="muted">Calls no other service.</p></div>`;
    return `<div class="card policy${s.name === state.selected ? ' selected' : ''}" id="policy-${esc(s.name)}">${head}
      <div class="table-wrap"><table>
      <thead><tr><th scope="col">Calls</th><th scope="col">Method · safety</th><th scope="col">Timeout</th><th scope="col">Per try</th><th scope="col">Retries</th><th scope="col">Budget</th><th scope="col">Limits</th><th scope="col">Ejection · balancer</th></tr></thead>
      <tbody>${s.calls.map(policyRow).join('')}</tbody></table></div></div>`;
  }).join('');
}

async function loadPolicy() {
  try {
    policyData = await api('/api/policy');
    const sel = $('#policy-service');
    const current = sel.value;
    sel.innerHTML = '<option value="">all services</option>' +
      policyData.map((s) => `<option value="${esc(s.name)}">${esc(s.name)}</option>`).join('');
    sel.value = current;
    drawPolicy();
  } catch (err) {
    $('#policy-list').innerHTML = `<p class="error">${esc(err.message)}</p>`;
  }
}

async function loadFindings() {
  try {
    const f = await api('/api/findings');
    $('#findings-summary').textContent = `On the mesh file in force (${f.mesh}, config v${f.config_version}): ` +
      `${f.errors} error(s), ${f.warnings} warning(s), ${f.findings.length - f.errors - f.warnings} note(s).`;
    $('#findings-list').innerHTML = f.findings.length ? f.findings.map((x) => `<li class="${esc(x.severity)}">
      <span class="sev">${esc(x.severity)}</span> <code>${esc(x.code)}</code> <strong>${esc(x.subject)}</strong>
      <p>${esc(x.message)}</p>${x.fix ? `<p class="fix">Fix: ${esc(x.fix)}</p>` : ''}</li>`).join('')
      : '<li class="info">Nothing found: the mesh is sound.</li>';
  } catch (err) {
    $('#findings-list').innerHTML = `<li class="error">${esc(err.message)}</li>`;
  }
}

// --- calculators -----------------------------------------------------------------------------
let samples = null;

function fillFanout(s) {
  const f = $('#fanout-form');
  f.depth.value = s.depth;
  f.proxy_retries.value = s.proxy_retries;
  f.code_retries.value = s.code_retries;
  f.failure.value = s.failure;
  f.protocol.value = s.protocol;
  f.retriable_status_codes.value = s.retriable_status_codes.join(', ');
  f.budget.value = s.budget === null ? '' : Math.round(s.budget * 100);
  f.top_only.checked = s.top_only;
}

function readFanout() {
  const f = $('#fanout-form');
  const codes = f.retriable_status_codes.value.split(/[\s,]+/).filter(Boolean).map(Number);
  return {
    depth: Number(f.depth.value), proxy_retries: Number(f.proxy_retries.value),
    code_retries: Number(f.code_retries.value), failure: f.failure.value, protocol: f.protocol.value,
    retriable_status_codes: codes, budget: f.budget.value === '' ? null : Number(f.budget.value) / 100,
    top_only: f.top_only.checked,
  };
}

async function computeFanout() {
  const out = $('#fanout-answer');
  try {
    const a = await api('/api/calc/fanout', readFanout());
    out.textContent = String(a.attempts);
    out.dataset.value = String(a.attempts);
    const top = Object.keys(a.received)[0];
    $('#fanout-answer-text').textContent = `attempts reach ${a.bottom} for each request at ${top}` +
      (readFanout().budget !== null ? ` (about ${a.with_budget.toFixed(1)} with the budget at steady load)` : '');
    const chain = Object.entries(a.received).map(([n, v], i) => `${i ? '<li class="arrow" aria-hidden="true">→</li>' : ''}<li><span>${esc(n)}</span><strong>${fmtCount(v)}</strong></li>`).join('');
    $('#fanout-detail').innerHTML = `<ol class="chain-view" aria-label="Calls each service receives">${chain}</ol>
      <p class="muted">${a.factors.join(' × ')} = ${fmtCount(a.attempts)}</p>
      <table><caption>What each change leaves at ${esc(a.bottom)}</caption><tbody>${a.changes.map((c) =>
        `<tr><th scope="row">${esc(c.change)}</th><td class="num">${Number.isInteger(c.attempts) ? fmtCount(c.attempts) : 'about ' + c.attempts.toFixed(1)}</td></tr>`).join('')}</tbody></table>`;
  } catch (err) {
    out.textContent = '–';
    delete out.dataset.value;
    $('#fanout-answer-text').textContent = err.message;
    $('#fanout-detail').innerHTML = '';
  }
}

function callRow(from, to, c, i) {
  return `<tr>
    <td><input aria-label="Caller of call ${i + 1}" name="svc-${i}" value="${esc(from)}" ${i > 0 ? 'readonly tabindex="-1" class="linked"' : ''}></td>
    <td><input aria-label="Callee of call ${i + 1}" name="svc-${i + 1}" value="${esc(to)}"></td>
    <td><input aria-label="Per-try timeout of call ${i + 1}" name="per-try-${i}" value="${esc(c.per_try_timeout)}" placeholder="none"></td>
    <td><input aria-label="Retries of call ${i + 1}" name="retries-${i}" type="number" min="0" max="10" value="${c.retries}"></td>
    <td><button type="button" class="remove" data-remove="${i}" aria-label="Remove call ${i + 1}" ${i === 0 ? 'disabled' : ''}>✕</button></td>
  </tr>`;
}

function fillTimeouts(s) {
  const f = $('#timeouts-form');
  f.client_timeout.value = s.client_timeout;
  f.backoff.value = s.backoff;
  $('#timeouts-calls').innerHTML = s.calls.map((c, i) => callRow(s.services[i], s.services[i + 1], c, i)).join('');
  // A caller is the previous callee: keep them in step.
  $('#timeouts-calls').querySelectorAll('input[name^="svc-"]').forEach((input) => {
    input.addEventListener('input', () => {
      f.querySelectorAll(`input[name="${input.name}"]`).forEach((o) => { if (o !== input) o.value = input.value; });
    });
  });
}

function readTimeouts() {
  const f = $('#timeouts-form');
  const rows = $('#timeouts-calls').querySelectorAll('tr');
  const services = [];
  const calls = [];
  rows.forEach((row, i) => {
    if (i === 0) services.push(row.querySelector(`input[name="svc-0"]`).value);
    services.push(row.querySelector(`input[name="svc-${i + 1}"]`).value);
    calls.push({
      per_try_timeout: row.querySelector(`input[name="per-try-${i}"]`).value || 'none',
      timeout: 'none',
      retries: Number(row.querySelector(`input[name="retries-${i}"]`).value),
    });
  });
  return { services, calls, client_timeout: f.client_timeout.value, backoff: f.backoff.value };
}

async function computeTimeouts() {
  const out = $('#timeouts-answer');
  try {
    const a = await api('/api/calc/timeouts', readTimeouts());
    const worst = a.worst_case_ms === null ? 'never ends' : fmtMs(a.worst_case_ms);
    out.textContent = worst;
    out.dataset.value = a.worst_case_ms === null ? 'never' : String(a.worst_case_ms);
    const top = readTimeouts().services[0];
    $('#timeouts-answer-text').textContent = `worst case at ${top} when the bottom hangs` +
      (a.client_waits_ms !== null ? `; its client waits ${fmtMs(a.client_waits_ms)}` : '') +
      (a.client_waits_ms !== null && (a.worst_case_ms === null || a.worst_case_ms > a.client_waits_ms) ? ' — too long' : '');
    out.className = a.client_waits_ms !== null && (a.worst_case_ms === null || a.worst_case_ms > a.client_waits_ms) ? 'over' : 'fits';
    $('#timeouts-detail').innerHTML = `<div class="table-wrap"><table><thead><tr><th scope="col">Call</th><th scope="col" class="num" title="Tries made when everything below hangs, of those configured">Tries</th><th scope="col" class="num">Worst case</th><th scope="col" class="num" title="The time the caller gives this call">Window</th><th scope="col" class="num" title="Tries that finish inside the window">Fit</th><th scope="col" class="num" title="The largest per-try timeout that would let every try fit">Per try to fit</th></tr></thead><tbody>` +
      a.calls.map((c) => `<tr><th scope="row">${esc(c.call)}</th>
        <td class="num">${c.tries_when_hung} of ${c.tries}</td><td class="num">${c.worst_case_ms === null ? 'never ends' : fmtMs(c.worst_case_ms)}</td>
        <td class="num">${c.caller_window_ms === null ? '–' : fmtMs(c.caller_window_ms)}</td><td class="num">${c.tries_that_fit}</td>
        <td class="num">${c.largest_fitting_per_try_ms === null ? '–' : '≤ ' + fmtMs(c.largest_fitting_per_try_ms)}</td></tr>`).join('') +
      `</tbody></table></div>` +
      (a.findings.filter((x) => x.severity !== 'info').length ? `<ul class="findings compact">${a.findings.filter((x) => x.severity !== 'info').map((x) =>
        `<li class="${esc(x.severity)}"><span class="sev">${esc(x.severity)}</span> <code>${esc(x.code)}</code> ${esc(x.message)}</li>`).join('')}</ul>` : '') +
      `<details><summary>The mesh file this is computed on</summary><pre>${esc(a.mesh_yaml)}</pre></details>`;
  } catch (err) {
    out.textContent = '–';
    delete out.dataset.value;
    out.className = '';
    $('#timeouts-answer-text').textContent = err.message;
    $('#timeouts-detail').innerHTML = '';
  }
}

function setupCalculators() {
  $('#fanout-form').addEventListener('submit', (ev) => { ev.preventDefault(); computeFanout(); });
  $('#timeouts-form').addEventListener('submit', (ev) => { ev.preventDefault(); computeTimeouts(); });
  document.querySelectorAll('[data-sample]').forEach((b) => b.addEventListener('click', () => {
    if (!samples) return;
    if (b.dataset.sample === 'fanout') { fillFanout(samples.fanout); computeFanout(); } else { fillTimeouts(samples.timeouts); computeTimeouts(); }
  }));
  $('#add-call').addEventListener('click', () => {
    const t = readTimeouts();
    t.services.push(`service-${t.services.length}`);
    t.calls.push({ per_try_timeout: '200ms', timeout: 'none', retries: 2 });
    fillTimeouts(t);
  });
  $('#timeouts-calls').addEventListener('click', (ev) => {
    const b = ev.target.closest('[data-remove]');
    if (!b) return;
    const i = Number(b.dataset.remove);
    const t = readTimeouts();
    t.calls.splice(i, 1);
    t.services.splice(i + 1, 1);
    fillTimeouts(t);
  });
  api('/api/calc/samples').then((s) => {
    samples = s;
    fillFanout(s.fanout);
    fillTimeouts(s.timeouts);
    computeFanout();
    computeTimeouts();
  }).catch((err) => { $('#fanout-answer-text').textContent = err.message; });
}

// --- fault knobs -----------------------------------------------------------------------------
const KNOBS = [
  ['error_rate', 'Error rate (0–1)', 'number', '0.05'],
  ['latency_ms', 'Added latency (ms)', 'number', '10'],
  ['fail_first', 'Fail the first N', 'number', '1'],
  ['down', 'Down (refuse)', 'checkbox'],
  ['hang', 'Hang (never answer)', 'checkbox'],
  ['lose_response', 'Lose the response', 'checkbox'],
];

function faultSummary(st) {
  if (!st) return 'state unknown';
  const on = [];
  if (st.down) on.push('down');
  if (st.hang) on.push('hanging');
  if (st.lose_response) on.push('losing responses');
  if (st.error_rate) on.push(`${Math.round(st.error_rate * 100)} % errors`);
  if (st.latency_ms) on.push(`+${st.latency_ms} ms`);
  if (st.fail_first) on.push(`failing the first ${st.fail_first}`);
  return on.length ? on.join(', ') : 'healthy (no fault)';
}

function faultForm(c) {
  const id = `fault-${c.service}-${c.copy}`;
  const st = c.state || {};
  const fields = KNOBS.map(([k, label, type, step]) => type === 'checkbox'
    ? `<label class="check"><input type="checkbox" name="${k}" ${st[k] ? 'checked' : ''}> ${label}</label>`
    : `<label>${label} <input type="number" name="${k}" min="0" ${k === 'error_rate' ? 'max="1"' : ''} step="${step}" value="${st[k] ?? 0}"></label>`).join('');
  return `<form class="card fault" id="${esc(id)}" data-service="${esc(c.service)}" data-copy="${c.copy}" aria-label="Fault knobs of ${esc(c.service)} copy ${c.copy}">
    <h3>${esc(c.service)} <span class="muted">copy ${c.copy}${c.sample ? ` · sample ${esc(c.sample)}` : ''}</span></h3>
    <p class="fault-state" data-field="state">${c.error ? `<span class="error">${esc(c.error)}</span>` : esc(faultSummary(c.state))}</p>
    <div class="grid">${fields}</div>
    <div class="buttons">
      <button type="submit" class="primary">Apply</button>
      <button type="button" data-quick="hang">Hang</button>
      <button type="button" data-quick="clear">Clear</button>
    </div>
  </form>`;
}

async function faultAction(form, body, clear) {
  const base = `/api/fault/${encodeURIComponent(form.dataset.service)}/${form.dataset.copy}`;
  const status = $('#fault-status');
  try {
    const r = await api(clear ? `${base}/clear` : base, clear ? {} : body);
    const c = r.copies[0];
    form.querySelector('[data-field="state"]').textContent = faultSummary(c.state);
    status.textContent = `${form.dataset.service} copy ${form.dataset.copy}: ${faultSummary(c.state)}`;
    if (c.state) for (const [k, , type] of KNOBS) {
      const input = form.elements[k];
      if (type === 'checkbox') input.checked = !!c.state[k]; else input.value = c.state[k] ?? 0;
    }
  } catch (err) {
    status.textContent = `${form.dataset.service} copy ${form.dataset.copy}: ${err.message}`;
  }
}

async function loadFaults() {
  const list = $('#faults-list');
  try {
    const r = await api('/api/fault');
    if (!r.copies.length) {
      list.innerHTML = `<p class="empty">No fault knobs here. ${r.available ? 'The samples file lists no sample app yet.' : 'Start the control plane with <code>--samples FILE</code> (<code>hopwise up</code> does) to get the sample apps\' knobs.'}</p>`;
      return;
    }
    list.innerHTML = `<div class="faults">${r.copies.map(faultForm).join('')}</div>`;
    list.querySelectorAll('form.fault').forEach((form) => {
      form.addEventListener('submit', (ev) => {
        ev.preventDefault();
        const body = {};
        for (const [k, , type] of KNOBS) {
          const input = form.elements[k];
          body[k] = type === 'checkbox' ? input.checked : Number(input.value || 0);
        }
        faultAction(form, body, false);
      });
      form.querySelector('[data-quick="hang"]').addEventListener('click', () => faultAction(form, { hang: true }, false));
      form.querySelector('[data-quick="clear"]').addEventListener('click', () => faultAction(form, {}, true));
    });
  } catch (err) {
    list.innerHTML = `<p class="error">${esc(err.message)}</p>`;
  }
}

async function refreshFaultStates() {
  if (state.paused) return;
  const forms = document.querySelectorAll('form.fault');
  if (!forms.length) return;
  try {
    const r = await api('/api/fault');
    for (const c of r.copies) {
      const form = document.getElementById(`fault-${c.service}-${c.copy}`);
      if (form) form.querySelector('[data-field="state"]').textContent = c.error || faultSummary(c.state);
    }
  } catch (_) { /* the next round tells */ }
}

// --- start -----------------------------------------------------------------------------------
document.addEventListener('DOMContentLoaded', () => {
  $('#pause').addEventListener('click', (ev) => {
    state.paused = !state.paused;
    ev.currentTarget.setAttribute('aria-pressed', String(state.paused));
    ev.currentTarget.textContent = state.paused ? 'Resume updates' : 'Pause updates';
    $('#live-text').textContent = state.paused ? 'paused' : 'resuming…';
    $('#live-dot').className = state.paused ? 'dot paused' : 'dot on';
    if (!state.paused) poll();
  });
  $('#policy-service').addEventListener('change', (ev) => {
    state.selected = ev.target.value || null;
    drawPolicy();
    if (state.graph) drawGraph(state.graph);
  });
  setupCalculators();
  loadFaults();
  poll();
  setInterval(poll, 1000);
  setInterval(refreshFaultStates, 2000);
});
