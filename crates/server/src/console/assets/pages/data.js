// Data: an instance's documents page by page (a range read of one page, so a large
// instance opens at once), a Mango query editor that checks the JSON before sending,
// viewing, editing, adding and deleting a document, the indexes, and live changes: the
// instance's change feed (`_changes?feed=continuous`, read with `fetch` because an
// EventSource cannot send the Authorization header) followed while the page is open.

import { svc, enc } from '../api.js';
import { pickInstance } from '../app.js';
import { follow } from '../live.js';
import { h, table, pager, form, field, toast, val, confirmDialog, errorBox, jsonBlock, parseJson, clear } from '../ui.js';

export const title = 'Data';
const PAGE = 20;

/** Columns for a table of documents: the top-level keys seen, `_id` first, at most 6. */
function columns(docs) {
  const keys = [];
  for (const d of docs) for (const k of Object.keys(d || {})) if (!keys.includes(k)) keys.push(k);
  keys.sort((a, b) => (a === '_id' ? -1 : b === '_id' ? 1 : 0));
  return keys.slice(0, 6).map((k) => ({ label: k, cell: (d) => {
    const v = d[k];
    return v === undefined ? '' : typeof v === 'object' ? JSON.stringify(v).slice(0, 80) : String(v);
  } }));
}

export async function render(body, ctx) {
  const picked = await pickInstance(body, ctx, 'data');
  if (!picked) return;
  const { app, instance } = picked;
  const base = `/data/${enc(instance.name)}`;
  const editor = h('section', { id: 'doc-editor', 'aria-live': 'polite' });
  let docs;

  function edit(doc) {
    clear(editor);
    const isNew = !doc;
    const text = h('textarea', { id: 'doc-json', rows: 10, spellcheck: 'false', 'aria-label': 'document JSON' });
    text.value = JSON.stringify(doc || { title: '' }, null, 2);
    const out = h('div', {});
    const save = h('button', { onclick: async () => {
      out.replaceChildren();
      try {
        const value = parseJson(text.value, 'The document');
        if (isNew) {
          const r = await svc(app, 'POST', base, value);
          toast(`Document ${r.id} added`);
        } else {
          await svc(app, 'PUT', `${base}/${enc(doc._id)}`, value);
          toast(`Document ${doc._id} saved`);
        }
        clear(editor);
        docs.reload();
      } catch (e) { out.append(errorBox(e)); }
    } }, isNew ? 'Add document' : 'Save');
    const del = isNew ? null : h('button', { class: 'danger', onclick: async () => {
      if (!await confirmDialog(`Delete document ${doc._id}?`, { action: 'Delete' })) return;
      try { await svc(app, 'DELETE', `${base}/${enc(doc._id)}`); toast(`Document ${doc._id} deleted`); clear(editor); docs.reload(); } catch (e) { out.append(errorBox(e)); }
    } }, 'Delete');
    editor.append(h('div', { class: 'card' },
      h('h2', {}, isNew ? 'New document' : `Document ${doc._id}`), text,
      h('div', { class: 'row' }, save, del, h('button', { class: 'secondary', onclick: () => clear(editor) }, 'Close')), out));
    text.focus();
  }

  async function open(id) {
    try { edit((await svc(app, 'GET', `${base}/${enc(id)}`)).doc); } catch (e) { clear(editor).append(errorBox(e)); }
  }

  docs = pager(async (cursor) => {
    const q = new URLSearchParams({ limit: String(PAGE + 1) });
    if (cursor !== null) q.set('startkey', cursor);
    const r = await svc(app, 'GET', `${base}?${q}`);
    return { rows: r.docs.slice(0, PAGE), next: r.docs.length > PAGE ? r.docs[PAGE]._id : null };
  }, (rows) => {
    const cols = columns(rows);
    cols[0] = { label: '_id', cell: (d) => h('button', { class: 'link', onclick: () => open(d._id) }, d._id) };
    return table(cols, rows);
  }, 'No documents yet: add one with “New document”, or POST JSON to this instance.');

  // The Mango editor.
  const mango = h('textarea', { id: 'mango', rows: 6, spellcheck: 'false', 'aria-label': 'Mango query', 'aria-describedby': 'mango-check' });
  mango.value = JSON.stringify({ selector: {}, limit: 25 }, null, 2);
  const check = h('p', { id: 'mango-check', class: 'muted' }, 'Valid JSON.');
  const results = h('div', { id: 'mango-results' });
  const run = h('button', { id: 'run-query' }, 'Run query');
  mango.addEventListener('input', () => {
    try { JSON.parse(mango.value); check.className = 'muted'; check.textContent = 'Valid JSON.'; run.disabled = false; } catch (e) {
      check.className = 'error'; check.textContent = `Not valid JSON: ${e.message}`; run.disabled = true;
    }
  });
  run.addEventListener('click', async () => {
    clear(results);
    try {
      const q = parseJson(mango.value, 'The query');
      const r = await svc(app, 'POST', `${base}/_query`, q);
      const asJson = jsonBlock(r.docs);
      asJson.hidden = true;
      const tbl = r.docs.length ? table(columns(r.docs), r.docs) : h('p', { class: 'empty' }, 'No documents match this selector.');
      const toggle = h('button', { class: 'secondary', onclick: () => { asJson.hidden = !asJson.hidden; tbl.hidden = !asJson.hidden; toggle.textContent = asJson.hidden ? 'Show JSON' : 'Show table'; } }, 'Show JSON');
      results.append(h('p', { class: 'muted' }, `${r.docs.length} document(s)`), r.warning ? h('p', { class: 'warn' }, r.warning) : null, toggle, tbl, asJson);
    } catch (e) { results.append(errorBox(e)); }
  });

  // Indexes.
  const indexes = h('div', { id: 'indexes' });
  async function loadIndexes() {
    try {
      const r = await svc(app, 'GET', `${base}/_index`);
      indexes.replaceChildren(r.indexes.length ? table([
        { label: 'Name', cell: (i) => i.name },
        { label: 'Type', cell: (i) => i.type },
        { label: 'Fields', cell: (i) => i.fields.map((f) => (typeof f === 'string' ? f : JSON.stringify(f))).join(', ') },
      ], r.indexes) : h('p', { class: 'empty' }, 'No indexes: create one on the fields your queries select or sort by.'));
    } catch (e) { indexes.replaceChildren(errorBox(e)); }
  }
  loadIndexes();

  const live = follow(app, base, body, ctx, {
    what: 'this instance’s changes',
    item: (c) => h('li', { 'data-id': c.id },
      h('code', {}, c.seq), ' ', h('strong', {}, c.id), ' ', c.deleted ? h('span', { class: 'warn' }, 'deleted') : h('span', { class: 'muted' }, 'written')),
    changed: () => docs.reload(),
  });

  body.append(
    h('div', { class: 'row' }, h('button', { id: 'new-doc', onclick: () => edit(null) }, 'New document'), live.toggle),
    editor,
    live.box,
    h('h2', {}, 'Documents'), docs,
    h('h2', {}, 'Query'), h('div', { class: 'card' }, mango, check, run, results),
    h('h2', {}, 'Indexes'), indexes,
    form('create an index', [
      field('Fields (comma-separated)', { name: 'fields', required: true, placeholder: 'year, title' }),
      field('Name (optional)', { name: 'name', placeholder: 'by-year' }),
    ], 'Create index', async (f) => {
      const spec = { fields: val(f, 'fields').split(',').map((s) => s.trim()).filter(Boolean) };
      if (val(f, 'name')) spec.name = val(f, 'name');
      await svc(app, 'POST', `${base}/_index`, spec);
      toast('Index created');
      f.reset();
      loadIndexes();
    }));
}
