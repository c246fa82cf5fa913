// Storage: a folder-like listing by prefix, upload with a progress bar (streamed by the
// browser), download, a pre-signed URL with its expiry to copy, delete.

import { svc, enc, upload, appToken } from '../api.js';
import { pickInstance } from '../app.js';
import { h, table, pager, toast, confirmDialog, errorBox, copy, fmtBytes, fmtTime, field, form, val } from '../ui.js';

export const title = 'Storage';
const PAGE = 50;

const encPath = (p) => p.split('/').map(enc).join('/');

export async function render(body, ctx) {
  const picked = await pickInstance(body, ctx, 'storage');
  if (!picked) return;
  const { app, instance } = picked;
  const base = `/storage/${enc(instance.name)}`;
  const prefix = ctx.query.get('prefix') || '';
  const goPrefix = (p) => ctx.go({ app, instance: instance.name, prefix: p });

  // Breadcrumbs of the prefix, as folders.
  const parts = prefix.split('/').filter(Boolean);
  const crumbs = h('nav', { class: 'crumbs', 'aria-label': 'folder' },
    h('button', { class: 'link', onclick: () => goPrefix('') }, instance.name),
    parts.map((p, i) => [' / ', h('button', { class: 'link', onclick: () => goPrefix(`${parts.slice(0, i + 1).join('/')}/`) }, p)]));

  const list = pager(async (cursor) => {
    // Objects under the prefix; those deeper than one level show as folders.
    const q = new URLSearchParams({ limit: String(PAGE) });
    if (prefix) q.set('prefix', prefix);
    if (cursor) q.set('after', cursor);
    const r = await svc(app, 'GET', `${base}?${q}`);
    const rows = [];
    const folders = new Set();
    for (const o of r.objects) {
      const rest = o.path.slice(prefix.length);
      const slash = rest.indexOf('/');
      if (slash >= 0) {
        const folder = prefix + rest.slice(0, slash + 1);
        if (!folders.has(folder)) { folders.add(folder); rows.push({ folder }); }
      } else rows.push(o);
    }
    const last = r.objects[r.objects.length - 1];
    return { rows, next: r.objects.length === PAGE ? last.path : null };
  }, (rows) => table([
    { label: 'Name', cell: (o) => (o.folder
      ? h('button', { class: 'link', onclick: () => goPrefix(o.folder) }, `📁 ${o.folder.slice(prefix.length)}`)
      : h('span', {}, o.path.slice(prefix.length))) },
    { label: 'Size', cell: (o) => (o.folder ? '' : fmtBytes(o.size)) },
    { label: 'Type', cell: (o) => o.contentType || '' },
    { label: 'Modified', cell: (o) => (o.folder ? '' : fmtTime(o.modified)) },
    { label: 'Actions', cell: (o) => (o.folder ? '' : h('span', { class: 'row' },
      h('button', { class: 'secondary', 'data-download': o.path, onclick: (ev) => download(o.path).catch((e) => ev.target.after(errorBox(e))) }, 'Download'),
      h('button', { class: 'secondary', 'data-presign': o.path, onclick: async (ev) => {
        const secs = Number(expires.value) || 3600;
        try {
          const r = await svc(app, 'GET', `${base}/${encPath(o.path)}?useSignedUrl=true&expires=${secs}`);
          await copy(r.url);
          toast(`Pre-signed URL copied; it works until ${new Date(Date.now() + secs * 1000).toLocaleString()}`);
        } catch (e) { ev.target.after(errorBox(e)); }
      } }, 'Copy pre-signed URL'),
      h('button', { class: 'danger', 'data-delete': o.path, onclick: async (ev) => {
        if (!await confirmDialog(`Delete ${o.path}?`, { action: 'Delete' })) return;
        try { await svc(app, 'DELETE', `${base}/${encPath(o.path)}`); toast(`${o.path} deleted`); list.reload(); } catch (e) { ev.target.after(errorBox(e)); }
      } }, 'Delete'))) },
  ], rows), prefix ? `Nothing under “${prefix}”: upload a file here.` : 'No objects yet: upload a file below.');

  async function download(path) {
    // The object is fetched with the application's token and handed to the browser.
    const token = await appToken(app);
    const res = await fetch(`/${enc(app)}${base}/${encPath(path)}`, { headers: { authorization: `Bearer ${token}` } });
    if (!res.ok) { let msg = `${res.status}`; try { msg = (await res.json()).msg; } catch { /* not JSON */ } throw new Error(msg); }
    const url = URL.createObjectURL(await res.blob());
    const a = h('a', { href: url, download: path.split('/').pop() });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  }

  const expires = h('input', { id: 'presign-expires', type: 'number', min: 1, max: 604800, value: '3600', 'aria-label': 'pre-signed URL expiry in seconds' });
  const bar = h('progress', { id: 'upload-progress', max: 1, value: 0, hidden: true });
  const pct = h('span', { id: 'upload-pct', class: 'muted' });
  const fileInput = h('input', { type: 'file', id: 'upload-file', name: 'file', required: true });
  body.append(crumbs, list,
    h('div', { class: 'row' }, h('label', {}, 'Pre-signed URLs valid for (s) ', expires)),
    h('h2', {}, 'Upload'),
    form('upload a file', [
      h('label', { class: 'field' }, h('span', {}, 'File'), fileInput),
      field('Path (empty: the folder and file name)', { name: 'path', placeholder: `${prefix}name.ext` }),
      bar, pct,
    ], 'Upload', async (f) => {
      const file = fileInput.files[0];
      const path = val(f, 'path') || `${prefix}${file.name}`;
      bar.hidden = false;
      await upload(app, instance.name, path, file, (p) => { bar.value = p; pct.textContent = `${Math.round(p * 100)}%`; });
      toast(`${path} uploaded`);
      list.reload();
    }));
}
