// Search: a query box (matches with their score and matched terms), add and remove a
// document, and the index's settings.

import { svc, enc } from '../api.js';
import { pickInstance } from '../app.js';
import { h, table, form, field, toast, val, confirmDialog, errorBox, jsonBlock, parseJson, clear, empty, pager } from '../ui.js';

export const title = 'Search';
const PAGE = 20;

export async function render(body, ctx) {
  const picked = await pickInstance(body, ctx, 'search');
  if (!picked) return;
  const { app, instance } = picked;
  const base = `/search/${enc(instance.name)}`;
  const q = ctx.query.get('q') || '';
  const results = h('div', { id: 'search-results' });
  const input = h('input', { id: 'search-query', value: q, placeholder: 'ghostbusters', 'aria-label': 'search query' });
  if (q) {
    // The API answers the best `limit` matches; pages are slices of them.
    let all = null;
    results.append(pager(async (cursor) => {
      if (!all) all = (await svc(app, 'POST', `${base}/_query`, { query: q, limit: 1000 })).matches;
      const at = cursor || 0;
      return { rows: all.slice(at, at + PAGE), next: at + PAGE < all.length ? at + PAGE : null };
    }, (rows) => table([
      { label: 'Key', cell: (m) => h('code', {}, m.id) },
      { label: 'Score', cell: (m) => m.score.toFixed(3) },
      { label: 'Matched terms', cell: (m) => m.terms.join(', ') },
      { label: 'Stored fields', cell: (m) => {
        const rest = Object.fromEntries(Object.entries(m).filter(([k]) => !['id', 'score', 'terms', 'queryTerms', 'match'].includes(k)));
        return Object.keys(rest).length ? JSON.stringify(rest).slice(0, 120) : '—';
      } },
      { label: 'Actions', cell: (m) => h('button', { class: 'danger', 'aria-label': `remove ${m.id}`, onclick: async (ev) => {
        if (!await confirmDialog(`Remove document ${m.id} from the index?`, { action: 'Remove' })) return;
        try { await svc(app, 'DELETE', `${base}/${enc(m.id)}`); toast(`Document ${m.id} removed`); ctx.go({ app, instance: instance.name, q }); } catch (e) { ev.target.after(errorBox(e)); }
      } }, 'Remove') },
    ], rows), `Nothing matches “${q}”: try fewer or other words.`));
  } else {
    results.append(empty('Type words to search for; the last one also matches as a prefix, and typos are forgiven.'));
  }
  const example = Object.fromEntries((instance.config.fields || []).map((f) => [f, '']));
  body.append(
    form('search', [h('label', { class: 'field' }, h('span', {}, 'Query'), input)], 'Search',
      async () => ctx.go({ app, instance: instance.name, q: input.value })),
    results,
    h('h2', {}, 'Add a document'),
    form('add a document', [
      field('Key', { name: 'key', required: true, placeholder: 'gb', autocomplete: 'off' }),
      field('Document (JSON; needs every searched field)', { tag: 'textarea', name: 'doc', rows: 4, required: true, value: JSON.stringify(example) }),
    ], 'Add document', async (f) => {
      const doc = parseJson(val(f, 'doc'), 'The document');
      await svc(app, 'POST', base, { key: val(f, 'key'), doc });
      toast(`Document ${val(f, 'key')} added`);
      f.querySelector('[name=key]').value = '';
    }),
    h('h2', {}, 'Index settings'),
    h('p', { class: 'muted' }, 'Set when the instance was created; to change them, create a new instance.'),
    jsonBlock(instance.config));
}
