// Cache: entries by pattern, view one with its remaining time to live, set one with a
// TTL, delete.

import { svc, enc } from '../api.js';
import { pickInstance } from '../app.js';
import { h, table, pager, slices, form, field, toast, val, confirmDialog, errorBox, jsonBlock, parseJson, clear } from '../ui.js';

export const title = 'Cache';

export async function render(body, ctx) {
  const picked = await pickInstance(body, ctx, 'cache');
  if (!picked) return;
  const { app, instance } = picked;
  const base = `/cache/${enc(instance.name)}`;
  const pattern = ctx.query.get('pattern') || '';
  const view = h('section', { id: 'entry', 'aria-live': 'polite' });

  async function show(key) {
    clear(view);
    try {
      const r = await svc(app, 'GET', `${base}/${enc(key)}`);
      const ttl = await remaining(key);
      view.append(h('div', { class: 'card' }, h('h2', {}, `Entry ${key}`),
        h('p', { class: 'muted', id: 'ttl' }, ttl), jsonBlock(r.doc),
        h('button', { class: 'secondary', onclick: () => clear(view) }, 'Close')));
    } catch (e) { view.append(errorBox(e)); }
  }

  // The remaining time to live, from the entry's `_ttl` call.
  async function remaining(key) {
    const r = await svc(app, 'GET', `${base}/${enc(key)}/_ttl`);
    if (r.ttl === null) return 'Never expires';
    return `Expires in ${r.ttl} s (${new Date(r.expires).toLocaleString()})`;
  }

  const search = h('input', { id: 'pattern', value: pattern, placeholder: 'user-*', 'aria-label': 'key pattern' });
  const list = pager(slices(async () => (await svc(app, 'GET', `${base}/_query?pattern=${enc(pattern)}`)).docs), (rows) => table([
    { label: 'Key', cell: (e) => h('button', { class: 'link', onclick: () => show(e.key) }, e.key) },
    { label: 'Value', cell: (e) => JSON.stringify(e.value).slice(0, 100) },
    { label: 'Actions', cell: (e) => h('button', { class: 'danger', 'aria-label': `delete ${e.key}`, onclick: async (ev) => {
      if (!await confirmDialog(`Delete entry ${e.key}?`, { action: 'Delete' })) return;
      try { await svc(app, 'DELETE', `${base}/${enc(e.key)}`); toast(`Entry ${e.key} deleted`); list.reload(); } catch (err) { ev.target.after(errorBox(err)); }
    } }, 'Delete') },
  ], rows), pattern ? `No entry matches “${pattern}”: try another pattern, or * for all.` : 'No entries yet: set one below.');
  body.append(
    form('query by pattern', [h('label', { class: 'field' }, h('span', {}, 'Pattern (* matches anything)'), search)], 'Query',
      async () => ctx.go({ app, instance: instance.name, pattern: search.value })),
    view, list,
    h('h2', {}, 'Set an entry'),
    form('set an entry', [
      field('Key', { name: 'key', required: true, placeholder: 'user-1', autocomplete: 'off' }),
      field('Value (a JSON object)', { tag: 'textarea', name: 'value', required: true, rows: 3, placeholder: '{"name": "Ada"}' }),
      field('TTL (e.g. 30s, 10m, 1h; empty: never expires)', { name: 'ttl', placeholder: '10m' }),
    ], 'Set', async (f) => {
      const value = parseJson(val(f, 'value'), 'The value');
      const ttl = val(f, 'ttl');
      const key = val(f, 'key');
      // Adding is POST; the application form's PUT only replaces a live entry.
      try {
        await svc(app, 'POST', base, ttl ? { key, value, ttl } : { key, value });
      } catch (e) {
        if (e.status !== 409) throw e;
        await svc(app, 'PUT', `${base}/${enc(key)}${ttl ? `?ttl=${enc(ttl)}` : ''}`, value);
      }
      toast(`Entry ${val(f, 'key')} set`);
      f.reset();
      list.reload();
    }));
}
