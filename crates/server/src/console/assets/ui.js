// Small DOM helpers every page shares: elements, tables that page, dialogs, messages.

/** An element: `h('button', {class: 'x', onclick: f}, 'text', child)`. */
export function h(tag, props = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'value') el.value = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

export function clear(el) { while (el.firstChild) el.firstChild.remove(); return el; }

/** The server's message, shown where the action was. */
export function errorBox(e) {
  return h('p', { class: 'error', role: 'alert' }, e && e.message ? e.message : String(e));
}

/** What a list with nothing in it says: what to do next. */
export function empty(text) { return h('p', { class: 'empty' }, text); }

export function fmtTime(t) { return t ? new Date(t).toLocaleString() : '—'; }

export function fmtBytes(n) {
  if (n < 1024) return `${n} B`;
  const u = ['KiB', 'MiB', 'GiB', 'TiB'];
  let i = -1;
  do { n /= 1024; i += 1; } while (n >= 1024 && i < u.length - 1);
  return `${n.toFixed(1)} ${u[i]}`;
}

/** A table of `rows` with `cols` ([{label, cell: row => node|text}]). */
export function table(cols, rows) {
  return h('div', { class: 'table-wrap' },
    h('table', {},
      h('thead', {}, h('tr', {}, cols.map((c) => h('th', { scope: 'col' }, c.label)))),
      h('tbody', {}, rows.map((r) => h('tr', {}, cols.map((c) => h('td', { 'data-label': c.label }, c.cell(r))))))));
}

/**
 * A list shown a page at a time: `fetchPage(cursor)` answers `{rows, next}` (`next` null
 * at the end). `render(rows)` makes the page's element. Answers the element.
 */
export function pager(fetchPage, render, emptyText) {
  const box = h('div', { class: 'pager' });
  const history = [];
  let cursor = null;
  async function show() {
    clear(box).append(h('p', { class: 'muted' }, 'Loading…'));
    let page;
    try { page = await fetchPage(cursor); } catch (e) { clear(box).append(errorBox(e)); return; }
    clear(box);
    if (!page.rows.length && !history.length) { box.append(empty(emptyText)); return; }
    box.append(render(page.rows));
    const prev = h('button', { class: 'secondary', disabled: !history.length, onclick: () => { cursor = history.pop(); show(); } }, '← Previous');
    const next = h('button', { class: 'secondary', disabled: !page.next, onclick: () => { history.push(cursor); cursor = page.next; show(); } }, 'Next →');
    box.append(h('nav', { class: 'pages', 'aria-label': 'pages' }, prev, h('span', { class: 'muted' }, `page ${history.length + 1}`), next));
  }
  show();
  box.reload = () => { history.length = 0; cursor = null; show(); };
  return box;
}

/** Pages over a list already fetched whole: a `fetchPage` for [`pager`]. */
export function slices(all, size = 20) {
  return async (cursor) => {
    const list = await all();
    const at = cursor || 0;
    return { rows: list.slice(at, at + size), next: at + size < list.length ? at + size : null };
  };
}

/**
 * Ask before doing something: a modal dialog. With `typed`, the user must type that text
 * to confirm. Answers a promise of true or false.
 */
export function confirmDialog(message, { typed, action = 'Confirm' } = {}) {
  return new Promise((resolve) => {
    const input = typed ? h('input', { 'aria-label': `type ${typed} to confirm`, autocomplete: 'off' }) : null;
    const ok = h('button', { class: 'danger', disabled: !!typed, type: 'submit' }, action);
    if (input) input.addEventListener('input', () => { ok.disabled = input.value !== typed; });
    const dlg = h('dialog', { class: 'confirm' },
      h('form', { method: 'dialog' },
        h('p', {}, message),
        typed ? h('label', {}, `Type “${typed}” to confirm`, input) : null,
        h('div', { class: 'row' },
          h('button', { class: 'secondary', value: 'cancel', type: 'submit' }, 'Cancel'), ok)));
    ok.value = 'ok';
    dlg.addEventListener('close', () => { dlg.remove(); resolve(dlg.returnValue === 'ok'); });
    document.body.append(dlg);
    dlg.showModal();
    (input || ok).focus();
  });
}

let toastTimer;
/** A passing message (polite live region). */
export function toast(text) {
  const el = document.getElementById('toast');
  if (!el) return;
  el.textContent = text;
  el.classList.add('show');
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => el.classList.remove('show'), 4000);
}

/** Put `text` on the clipboard. */
export async function copy(text) {
  await navigator.clipboard.writeText(text);
  toast('Copied to the clipboard');
}

/** A form: `fields` are elements; `submit(form)` runs on submit, its error shown. */
export function form(label, fields, submitText, submit) {
  const out = h('div', { class: 'form-out' });
  const f = h('form', { class: 'inline-form', 'aria-label': label }, fields, h('button', { type: 'submit' }, submitText), out);
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear(out);
    const btn = f.querySelector('button[type=submit]');
    btn.disabled = true;
    try { await submit(f, out); } catch (e) { out.append(errorBox(e)); } finally { btn.disabled = false; }
  });
  return f;
}

/** A labelled input. */
export function field(label, props = {}) {
  return h('label', { class: 'field' }, h('span', {}, label), h(props.tag || 'input', { ...props, tag: undefined }));
}

/** A JSON value shown as text. */
export function jsonBlock(v) { return h('pre', { class: 'json' }, JSON.stringify(v, null, 2)); }

/** Parse JSON text, saying where it is wrong. */
export function parseJson(text, what) {
  try { return JSON.parse(text); } catch (e) { throw new Error(`${what} is not valid JSON: ${e.message}`); }
}

/** The trimmed value of the control named `name` in `f`. */
export function val(f, name) {
  const el = f.querySelector(`[name="${name}"]`);
  return el ? el.value.trim() : '';
}
