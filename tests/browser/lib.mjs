// What the browser tests share: their checks and summary, plain HTTP to proxies and sample
// apps (Node's http), waiting for a condition, and Debian's chromium started headless.

import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import http from 'node:http';

const DEADLINE_MS = 30000;
const tally = { passed: 0, failed: 0 };

export function check(name, ok, detail = '') {
  if (ok) { tally.passed += 1; console.log(`ok   ${name}`); } else { tally.failed += 1; console.log(`FAIL ${name} ${detail}`); }
}

/// Prints `N passed, M failed` and exits 1 on any failure (or when nothing was checked).
export function finish() {
  console.log(`${tally.passed} passed, ${tally.failed} failed`);
  process.exit(tally.failed === 0 && tally.passed > 0 ? 0 : 1);
}

/// A plain GET or POST over HTTP/1.1 (Node's http), for /metrics, knobs and traffic.
export function request(addr, path, { method = 'GET', body } = {}) {
  const [host, port] = [addr.slice(0, addr.lastIndexOf(':')), Number(addr.slice(addr.lastIndexOf(':') + 1))];
  return new Promise((resolve) => {
    const req = http.request({ host, port, path, method, agent: false, timeout: 5000,
      // A length, not chunks: the test's knob servers read `content-length` only.
      headers: body ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } : {} }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ status: 0, text: String(e) }));
    req.setNoDelay(true);
    if (body) req.write(body);
    req.end();
  });
}

/// Waits until `fn` returns true (at most 30 s); says what it last saw if it never does.
export async function until(what, fn) {
  const end = Date.now() + DEADLINE_MS;
  let last;
  while (Date.now() < end) {
    try { last = await fn(); if (last === true) return true; } catch (e) { last = String(e); }
    await new Promise((r) => setTimeout(r, 250));
  }
  console.log(`     (waited for ${what}; last: ${JSON.stringify(last)})`);
  return false;
}

/// Runs `body(page, external)` in a fresh headless chromium: `external` collects every request
/// to anywhere but `url`'s server, page errors are checked at the end.
export async function withPage(url, body) {
  const userDir = mkdtempSync(join(tmpdir(), 'hopwise-chromium-'));
  const ctx = await chromium.launchPersistentContext(userDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1440, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const errors = [];
  try {
    const page = await ctx.newPage();
    page.on('pageerror', (e) => errors.push(e.message));
    const external = [];
    page.on('request', (r) => { if (!r.url().startsWith(url.replace(/\/$/, '')) && !r.url().startsWith('data:')) external.push(r.url()); });
    await body(page);
    check('nothing was fetched from outside the control plane', external.length === 0, external.join(' '));
    check('no script error on the page', errors.length === 0, errors.join(' | '));
  } catch (e) {
    check('the browser test ran to its end', false, String(e && e.stack || e));
  } finally {
    await ctx.close();
    rmSync(userDir, { recursive: true, force: true });
  }
}
