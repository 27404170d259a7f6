// The recent traces (the dashboard's own OTLP receiver, /api/traces) in a list of their own,
// filtered (all, errors, retried, the slowest tenth), and beside it the chosen one's waterfall
// (/api/traces/<id>): a row per span in parent order under a time axis, each bar placed on the
// trace's time line and split into the proxies' time and the app's time of everything under
// it, as the control plane computed them. Drawn in the DOM; each row carries its numbers
// (data-proxy-ns, data-app-ns, …) so a test can read them back.
'use strict';

const traces = { chosen: null, shownSpans: -1, busy: false, show: 'all', last: null };

// What a filter keeps of the listed traces; `slow` is the slowest tenth of those listed.
function slowFrom(list) {
  const d = list.map((t) => t.duration_ns).sort((a, b) => a - b);
  return d.length ? d[Math.min(d.length - 1, Math.floor(d.length * 0.9))] : 0;
}

function shown(list) {
  const slow = slowFrom(list);
  const keep = {
    all: () => true,
    errors: (t) => t.error,
    retried: (t) => t.retries > 0,
    slow: (t) => t.duration_ns >= slow,
  }[traces.show] || (() => true);
  return { list: list.filter(keep), slow };
}

function statusCell(t) {
  if (t.receiving) return '<span class="muted-text">receiving…</span>';
  if (t.error) return '<span class="bad-text">error</span>';
  if (t.retries) return `ok after ${t.retries} ${t.retries === 1 ? 'retry' : 'retries'}`;
  return 'ok';
}

function fmtNs(ns) {
  if (ns === null || ns === undefined) return '–';
  return fmtMs(ns / 1e6);
}

function tracesWhere(r) {
  const t = r.tracing || {};
  const ratio = t.ratio === undefined ? '' : ` (sampling ${fmtPct(t.ratio)})`;
  if (!r.receiver) return 'This dashboard has no trace receiver (start it with `hopwise control --traces-listen ADDR`).';
  switch (t.state) {
    case 'here': return `The proxies send their spans here, to ${r.receiver}${ratio}. The ${r.max_traces} most recent traces are kept, up to ${r.max_spans} spans each.`;
    case 'elsewhere': return `The mesh file sends spans to ${t.collector}, not to this dashboard (${r.receiver}): look for the traces there.`;
    case 'not-exported': return 'mesh.tracing has no collector: trace context is passed on, no span is exported.';
    default: return 'Tracing is off in the mesh file in force (no mesh.tracing).';
  }
}

function spanLabel(s) {
  const route = s.route ? `/${s.route}` : '';
  if (s.direction === 'inbound') return `${s.service}${route === '/inbound' ? '' : route} inbound`;
  if (s.direction === 'outbound') return `${s.service} → ${s.upstream || '?'}${route}`;
  const why = s.retry_condition ? `, retry after ${s.retry_condition}` : '';
  return `try ${s.try_number} → ${s.copy || '?'} (${s.outcome || '?'}${why})`;
}

function drawTraceList(r) {
  traces.last = r;
  $('#traces-where').textContent = tracesWhere(r);
  const body = $('#traces-table tbody');
  const { list, slow } = shown(r.traces);
  const what = traces.show === 'slow' ? ` (${fmtNs(slow)} or more)` : '';
  $('#traces-count').textContent = r.traces.length
    ? `${list.length} of ${r.traces.length} kept${what}; failed and slow traces are kept longer than the rest`
    : '';
  if (!list.length) {
    const why = r.traces.length ? 'No trace kept matches.' : 'No trace yet: send a request through the entry service.';
    body.innerHTML = `<tr><td colspan="5" class="empty">${why}</td></tr>`;
    return list;
  }
  body.innerHTML = '';
  for (const t of list) {
    const tr = document.createElement('tr');
    tr.dataset.trace = t.id;
    tr.dataset.error = String(t.error);
    tr.dataset.retries = String(t.retries);
    tr.dataset.receiving = String(t.receiving);
    if (t.id === traces.chosen) tr.className = 'chosen';
    const when = new Date(t.start / 1e6).toLocaleTimeString('en-GB');
    const name = `${t.service}${t.route ? '/' + t.route : ''}`;
    tr.innerHTML = `<td>${esc(when)}</td><td><button type="button" class="link" data-trace="${esc(t.id)}">${esc(name)}</button></td>`
      + `<td class="num">${esc(fmtNs(t.duration_ns))}</td><td class="num">${t.spans}</td>`
      + `<td>${statusCell(t)}</td>`;
    body.appendChild(tr);
  }
  return list;
}

// A time axis over `total` ns: ticks at a round step (1, 2 or 5 × 10^k), about five of them,
// and the end.
function drawAxis(total) {
  const axis = document.createElement('div');
  axis.className = 'wf-axis';
  const ticks = document.createElement('div');
  ticks.className = 'wf-ticks';
  const raw = total / 5;
  const mag = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((v) => v >= raw) || raw;
  const at = (ns, end) => {
    const t = document.createElement('span');
    t.className = 'wf-tick' + (end ? ' end' : '');
    t.dataset.ns = String(Math.round(ns));
    t.style.left = `${(100 * ns) / total}%`;
    t.textContent = fmtNs(ns);
    ticks.appendChild(t);
  };
  // No tick so near the end that their labels would meet.
  for (let ns = 0; ns < total * 0.8; ns += step) at(ns, false);
  at(total, true);
  axis.append(document.createElement('div'), ticks, document.createElement('div'));
  return axis;
}

function drawWaterfall(w) {
  const box = $('#waterfall');
  box.innerHTML = '';
  box.dataset.trace = w.id;
  const head = document.createElement('p');
  head.className = 'hint';
  head.innerHTML = `Trace <code>${esc(w.id)}</code>, ${esc(fmtNs(w.duration_ns))}, ${w.rows.length} spans`
    + ' <span class="legend"><i class="wf-proxy"></i>the proxies\' time <i class="wf-app"></i>the app\'s time</span>';
  box.appendChild(head);
  const total = Math.max(w.duration_ns, 1);
  box.appendChild(drawAxis(total));
  for (const s of w.rows) {
    const row = document.createElement('div');
    row.className = 'wf-row' + (s.error ? ' error' : '');
    Object.assign(row.dataset, {
      span: s.span_id, parent: s.parent || '', service: s.service, direction: s.direction,
      depth: String(s.depth), durationNs: String(s.duration_ns), proxyNs: String(s.proxy_ns),
      appNs: String(s.app_ns), offsetNs: String(s.offset_ns),
    });
    const label = document.createElement('div');
    label.className = 'wf-label';
    label.style.paddingLeft = `${s.depth * 0.9}em`;
    label.textContent = spanLabel(s) + (s.orphan ? ' (parent not here)' : '') + (s.unseen ? ' (no span from the called side)' : '');
    label.title = label.textContent + (s.copy_address ? `; the copy at ${s.copy_address}` : '');
    const track = document.createElement('div');
    track.className = 'wf-track';
    const bar = document.createElement('div');
    bar.className = 'wf-bar';
    bar.style.left = `${(100 * s.offset_ns) / total}%`;
    bar.style.width = `${Math.max((100 * s.drawn_ns) / total, 0.2)}%`;
    const whole = Math.max(s.proxy_ns + s.app_ns, 1);
    for (const [cls, ns] of [['wf-proxy', s.proxy_ns], ['wf-app', s.app_ns]]) {
      const seg = document.createElement('span');
      seg.className = cls;
      seg.dataset.ns = String(ns);
      seg.style.width = `${(100 * ns) / whole}%`;
      bar.appendChild(seg);
    }
    bar.title = `${spanLabel(s)}: ${fmtNs(s.duration_ns)}; proxies ${fmtNs(s.proxy_ns)}, app ${fmtNs(s.app_ns)}`
      + (s.status ? `; status ${s.status}` : '') + (s.shift_ns ? `; moved ${fmtNs(Math.abs(s.shift_ns))} for clock skew` : '');
    track.appendChild(bar);
    const nums = document.createElement('div');
    nums.className = 'wf-nums num';
    nums.textContent = `${fmtNs(s.duration_ns)} · proxies ${fmtNs(s.proxy_ns)} · app ${fmtNs(s.app_ns)}`;
    nums.title = 'the span\'s time, the proxies\' share and the app\'s';
    row.append(label, track, nums);
    box.appendChild(row);
  }
  traces.shownSpans = w.rows.length;
}

async function showTrace(id) {
  traces.chosen = id;
  for (const tr of document.querySelectorAll('#traces-table tbody tr')) {
    tr.classList.toggle('chosen', tr.dataset.trace === id);
  }
  try {
    drawWaterfall(await api(`/api/traces/${encodeURIComponent(id)}`));
  } catch (err) {
    $('#waterfall').innerHTML = `<p class="error">${esc(err.message)}</p>`;
  }
}

async function pollTraces() {
  if ((typeof state !== 'undefined' && state.paused) || traces.busy) return;
  traces.busy = true;
  try {
    const r = await api('/api/traces');
    await listed(r);
    document.body.dataset.traces = String(r.traces.length);
  } catch (err) {
    $('#traces-where').textContent = err.message;
  } finally {
    traces.busy = false;
  }
}

// The list drawn, and the waterfall kept in step: until a trace is clicked, the one shown
// stays while the filter lists it, else the newest listed; the shown one is drawn again while
// more of its spans come (each proxy exports its own).
async function listed(r) {
  const list = drawTraceList(r);
  const chosen = r.traces.find((t) => t.id === traces.chosen);
  const listedToo = list.some((t) => t.id === traces.chosen);
  if (!traces.pinned && !listedToo && list.length) await showTrace(list[0].id);
  else if (chosen && chosen.spans !== traces.shownSpans) await showTrace(chosen.id);
}

function choose(show) {
  traces.show = show;
  for (const b of document.querySelectorAll('.traces-filter [data-show]')) {
    b.setAttribute('aria-pressed', String(b.dataset.show === show));
  }
  if (traces.last) listed(traces.last);
}

document.addEventListener('DOMContentLoaded', () => {
  $('#traces-table').addEventListener('click', (ev) => {
    const id = ev.target.closest('[data-trace]')?.dataset.trace;
    if (!id) return;
    traces.pinned = true;
    showTrace(id);
    // Stacked on a narrow screen, the waterfall is below the list: bring it into view.
    if (getComputedStyle($('.traces-split')).gridTemplateColumns.split(' ').length < 2) {
      $('#waterfall').scrollIntoView({ block: 'start', behavior: 'smooth' });
    }
  });
  for (const b of document.querySelectorAll('.traces-filter [data-show]')) {
    b.addEventListener('click', () => choose(b.dataset.show));
  }
  pollTraces();
  setInterval(pollTraces, 2000);
});
