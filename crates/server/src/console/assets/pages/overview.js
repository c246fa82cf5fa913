// Overview: what this node runs, where each store keeps its data, instances by type,
// traffic from /_metrics and engine health from /_ready.

import { admin, publicText } from '../api.js';
import { h, table, errorBox } from '../ui.js';

export const title = 'Overview';

/**
 * Prometheus text → Map(metric name → Map(label text → value)). Every label set is kept,
 * so families that gain labels still sum correctly.
 */
export function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    if (!out.has(m[1])) out.set(m[1], new Map());
    out.get(m[1]).set(m[2] || '', Number(m[3]));
  }
  return out;
}

/** The sum of `name` over all label sets, optionally only those whose labels pass `keep`. */
export function sum(metrics, name, keep = () => true) {
  let s = 0;
  for (const [labels, v] of metrics.get(name) || []) if (keep(labels)) s += v;
  return s;
}

/** Latency quantile `q` from the histogram buckets summed over every label set. */
function quantile(metrics, base, q) {
  const byLe = new Map();
  for (const [labels, v] of metrics.get(`${base}_bucket`) || []) {
    const le = /le="([^"]*)"/.exec(labels);
    if (!le) continue;
    const bound = le[1] === '+Inf' ? Infinity : Number(le[1]);
    byLe.set(bound, (byLe.get(bound) || 0) + v);
  }
  const bounds = [...byLe.keys()].sort((a, b) => a - b);
  const total = byLe.get(Infinity) || 0;
  if (!total) return null;
  for (const b of bounds) if (byLe.get(b) >= q * total) return b;
  return null;
}

const REQ = 'quintet_http_requests_total';
const DUR = 'quintet_http_request_duration_seconds';

function fmtDuration(s) {
  if (s === null || !Number.isFinite(s)) return '—';
  return s < 1 ? `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms` : `${s.toFixed(2)} s`;
}

function fmtUptime(s) {
  const d = Math.floor(s / 86400); const hr = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  return d ? `${d} d ${hr} h` : hr ? `${hr} h ${m} min` : `${m} min ${s % 60} s`;
}

export async function render(body, ctx) {
  const node = await admin('GET', '/_admin/node');
  const ready = await publicText('/_ready');
  let checks = {};
  try { checks = JSON.parse(ready.text).checks || {}; } catch { /* shown below */ }
  const stores = ['registry', 'data', 'cache', 'search', 'queue', 'storage'];
  body.append(
    h('section', { class: 'cards' },
      h('div', { class: 'card stat' }, h('span', { class: 'muted' }, 'Version'), h('strong', { id: 'version' }, node.version)),
      h('div', { class: 'card stat' }, h('span', { class: 'muted' }, 'Uptime'), h('strong', { id: 'uptime' }, fmtUptime(node.uptime))),
      h('div', { class: 'card stat' }, h('span', { class: 'muted' }, 'Readiness'),
        h('strong', { class: ready.status === 200 ? 'good' : 'bad' }, ready.status === 200 ? 'ready' : 'not ready'))),
    h('h2', {}, 'Stores'),
    table([
      { label: 'Store', cell: (s) => s },
      { label: 'Keeps its data', cell: (s) => (node.places || {})[s] || '—' },
      { label: 'Instances', cell: (s) => (s === 'registry' ? '—' : String(node.instances[s] ?? 0)) },
      { label: 'Health', cell: (s) => h('span', { class: checks[s] === 'ok' ? 'good' : 'bad' }, checks[s] || 'unknown') },
    ], stores));
  const traffic = h('section', { id: 'traffic' });
  body.append(h('h2', {}, 'Traffic'), traffic);
  let last = null;
  async function sample() {
    let m;
    try { m = parseMetrics((await publicText('/_metrics')).text); } catch (e) { traffic.replaceChildren(errorBox(e)); return; }
    const now = performance.now();
    const total = sum(m, REQ);
    const errors = sum(m, REQ, (l) => /class="5xx"/.test(l));
    const count = sum(m, `${DUR}_count`);
    const mean = count ? sum(m, `${DUR}_sum`) / count : null;
    const rate = last ? ((total - last.total) / ((now - last.at) / 1000)) : null;
    last = { total, at: now };
    const stat = (label, value, id) => h('div', { class: 'card stat' }, h('span', { class: 'muted' }, label), h('strong', { id }, value));
    traffic.replaceChildren(h('div', { class: 'cards' },
      stat('Requests', String(total), 'requests'),
      stat('Requests/s', rate === null ? 'measuring…' : rate.toFixed(1), 'rps'),
      stat('Mean latency', fmtDuration(mean), 'latency'),
      stat('p95 latency (≤)', fmtDuration(quantile(m, DUR, 0.95)), 'p95'),
      stat('5xx answers', String(errors), 'errors')));
  }
  await sample();
  const timer = setInterval(() => { if (ctx.stale() || !body.isConnected) clearInterval(timer); else sample(); }, 3000);
}
