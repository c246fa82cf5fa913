// Queue: jobs by status with a failed job's worker answer, retry and cancel, the target
// and whether deliveries are signed, a "send a test job" button, and live job events (the
// queue's event feed, see live.js).

import { svc, enc } from '../api.js';
import { pickInstance } from '../app.js';
import { follow } from '../live.js';
import { h, table, pager, toast, confirmDialog, errorBox, jsonBlock, fmtTime } from '../ui.js';

export const title = 'Queue';
const PAGE = 20;

export async function render(body, ctx) {
  const picked = await pickInstance(body, ctx, 'queue');
  if (!picked) return;
  const { app, instance } = picked;
  const base = `/queue/${enc(instance.name)}`;
  const status = ctx.query.get('status') || 'ERROR';
  const cfg = instance.config || {};
  const signed = cfg.secret !== undefined && cfg.secret !== null;
  body.append(h('div', { class: 'card' },
    h('p', {}, 'Target: ', h('code', { id: 'queue-target' }, cfg.target || '—')),
    h('p', { id: 'queue-signed', class: signed ? 'good' : 'warn' }, signed ? 'Deliveries are signed (X-SVC-SIGNATURE).' : 'Deliveries are not signed: the queue has no secret.'),
    h('button', { id: 'send-test', onclick: async (ev) => {
      try {
        const r = await svc(app, 'POST', base, { type: 'test', from: 'quintet console', at: new Date().toISOString() });
        toast(`Test job ${r.id} queued`);
        jobs.reload();
      } catch (e) { ev.target.after(errorBox(e)); }
    } }, 'Send a test job')));
  const tabs = h('div', { class: 'row', role: 'group', 'aria-label': 'status' },
    ['READY', 'ERROR'].map((s) => h('button', { class: s === status ? '' : 'secondary', 'aria-pressed': String(s === status), onclick: () => ctx.go({ app, instance: instance.name, status: s }) }, s === 'READY' ? 'Ready' : 'Failed')));
  const jobs = pager(async (cursor) => {
    const q = new URLSearchParams({ status, limit: String(PAGE + 1) });
    if (cursor) q.set('after', cursor);
    const r = await svc(app, 'GET', `${base}/_jobs?${q}`);
    const rows = r.jobs.slice(0, PAGE);
    return { rows, next: r.jobs.length > PAGE ? rows[rows.length - 1].id : null };
  }, (rows) => table([
    { label: 'Id', cell: (j) => h('code', {}, j.id) },
    { label: 'Job', cell: (j) => JSON.stringify(j.job).slice(0, 80) },
    { label: 'Attempts', cell: (j) => String(j.attempts) },
    { label: 'Worker answer', cell: (j) => (j.error ? h('pre', { class: 'job-error' }, j.error.slice(0, 500)) : '—') },
    { label: 'Updated', cell: (j) => fmtTime(j.updated) },
    { label: 'Actions', cell: (j) => h('span', { class: 'row' },
      j.status === 'ERROR' ? h('button', { 'data-retry': j.id, onclick: async (ev) => {
        try { await svc(app, 'POST', `${base}/${enc(j.id)}/_retry`); toast(`Job ${j.id} retried`); jobs.reload(); } catch (e) { ev.target.after(errorBox(e)); }
      } }, 'Retry') : null,
      h('button', { class: 'danger', 'data-cancel': j.id, onclick: async (ev) => {
        if (!await confirmDialog(`Cancel job ${j.id}? It is removed and never delivered.`, { action: 'Cancel job' })) return;
        try { await svc(app, 'POST', `${base}/${enc(j.id)}/_cancel`); toast(`Job ${j.id} cancelled`); jobs.reload(); } catch (e) { ev.target.after(errorBox(e)); }
      } }, 'Cancel')) },
  ], rows), status === 'ERROR' ? 'No failed jobs: every job was accepted by the worker or is still being delivered.' : 'No jobs waiting: send a test job above, or POST one to this queue.');
  const live = follow(app, base, body, ctx, {
    what: 'this queue’s jobs',
    item: (e) => h('li', { 'data-id': e.id, 'data-event': e.event },
      h('code', {}, e.seq), ' ', h('strong', {}, e.id), ' ',
      h('span', { class: e.event === 'error' ? 'warn' : e.event === 'delivered' ? 'good' : 'muted' }, e.event),
      e.error ? h('span', { class: 'muted' }, ` ${e.error.slice(0, 200)}`) : null),
    changed: () => jobs.reload(),
  });
  body.append(h('div', { class: 'row' }, live.toggle), live.box, tabs, jobs, h('h2', {}, 'Settings'), jsonBlock(cfg));
}
