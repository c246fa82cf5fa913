// Data: an instance's documents page by page (a range read of one page, so a large
// instance opens at once), a Mango query editor that checks the JSON before sending,
// viewing, editing, adding and deleting a document, the indexes, and live changes: the
// instance's change feed (`_changes?feed=continuous`, read with `fetch` because an
// EventSource cannot send the Authorization header) followed while the page is open.

import { svc, enc, appToken, ApiError } from '../api.js';
import { pickInstance } from '../app.js';
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

  const live = follow(app, base, body, ctx, () => docs.reload());

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

/** How many changes the live list keeps, newest first. */
const KEEP = 50;

/**
 * The "Live" toggle and the list of changes it shows. While on, one streaming request
 * follows the feed from now, resuming after the last sequence it saw when the stream
 * ends; it stops when toggled off or when the page is left (another page, sign-out).
 */
function follow(app, base, body, ctx, changed) {
  const toggle = h('button', { id: 'live-toggle', class: 'secondary', 'aria-pressed': 'false' }, 'Live: off');
  const status = h('p', { class: 'muted', id: 'live-status' });
  const list = h('ol', { id: 'live-changes', class: 'changes', reversed: true });
  const box = h('section', { id: 'live', 'aria-label': 'live changes', hidden: true },
    h('h2', {}, 'Live changes'), status, list);
  let abort = null;
  let reloadTimer = null;
  let watch = null;
  const gone = () => ctx.stale() || !body.isConnected;

  function stop(why) {
    if (abort) abort.abort();
    abort = null;
    clearInterval(watch);
    toggle.textContent = 'Live: off';
    toggle.setAttribute('aria-pressed', 'false');
    if (why) status.textContent = why;
  }

  function show(c) {
    list.prepend(h('li', { 'data-id': c.id },
      h('code', {}, c.seq), ' ', h('strong', {}, c.id), ' ', c.deleted ? h('span', { class: 'warn' }, 'deleted') : h('span', { class: 'muted' }, 'written')));
    while (list.children.length > KEEP) list.lastChild.remove();
    // A burst of writes reloads the documents once.
    clearTimeout(reloadTimer);
    reloadTimer = setTimeout(() => { if (!gone()) changed(); }, 300);
  }

  async function run(ctl) {
    let since = 'now';
    while (!ctl.signal.aborted) {
      let res;
      try {
        const token = await appToken(app);
        res = await fetch(`/${enc(app)}${base}/_changes?feed=continuous&since=${enc(since)}&heartbeat=15000`, {
          headers: { authorization: `Bearer ${token}` }, signal: ctl.signal,
        });
      } catch (e) {
        if (ctl.signal.aborted) return;
        throw new ApiError(0, `the server could not be reached (${e.message})`);
      }
      if (!res.ok) {
        let msg = `${res.status} ${res.statusText}`;
        try { msg = (await res.json()).msg || msg; } catch { /* not JSON */ }
        throw new ApiError(res.status, msg);
      }
      status.textContent = 'Following this instance’s changes as they commit.';
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        let chunk;
        try { chunk = await reader.read(); } catch (e) { if (ctl.signal.aborted) return; break; }
        if (chunk.done) break;
        if (gone()) { stop(); return; }
        buf += chunk.value;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line) continue; // a heartbeat
          const c = JSON.parse(line);
          if (c.ok === false) throw new ApiError(c.status || 0, c.msg);
          since = c.seq || c.last_seq || since;
          if (c.id !== undefined) show(c);
        }
      }
      // The stream ended (the node restarted, a proxy closed it): resume where it stopped.
      if (gone()) { stop(); return; }
      await new Promise((r) => { setTimeout(r, 1000); });
    }
  }

  function start() {
    const ctl = new AbortController();
    abort = ctl;
    // Signing out or leaving the page ends the stream even while nothing changes.
    watch = setInterval(() => { if (gone()) stop(); }, 1000);
    box.hidden = false;
    toggle.textContent = 'Live: on';
    toggle.setAttribute('aria-pressed', 'true');
    status.textContent = 'Connecting…';
    run(ctl).catch((e) => {
      if (abort !== ctl) return;
      stop();
      status.replaceChildren(errorBox(e));
    });
  }

  toggle.addEventListener('click', () => { if (abort) stop('Stopped: switch Live on to follow changes again.'); else start(); });
  // Leaving the page (another page or another instance) ends the stream.
  window.addEventListener('hashchange', () => stop(), { once: true });
  return { toggle, box };
}
