// Access keys of an application: create (the secret and connection string shown once,
// with Copy), list redacted, copy the full connection string (fetched through the reveal
// call at the moment of copying, never kept in the page), revoke after asking.

import { admin, adminPages, enc, forgetApp } from '../api.js';
import { h, table, pager, toast, confirmDialog, errorBox, copy, empty, fmtTime } from '../ui.js';

export const title = 'Keys';

export async function render(body, ctx) {
  const apps = (await admin('GET', '/_admin/apps')).apps;
  if (!apps.length) {
    body.append(empty('No applications yet: create one on the Applications page, then come back to give it a key.'));
    return;
  }
  const app = ctx.query.get('app') || apps[0].name;
  const sel = h('select', { id: 'pick-app', onchange: () => ctx.go({ app: sel.value }) },
    apps.map((a) => h('option', { value: a.name, selected: a.name === app }, a.name)));
  const fresh = h('div', { id: 'new-key', 'aria-live': 'polite' });
  let list;
  const create = h('button', { id: 'create-key', onclick: async () => {
    fresh.replaceChildren();
    try {
      const k = await admin('POST', `/_admin/apps/${enc(app)}/keys`, {});
      const line = (label, value, id) => h('div', { class: 'secret-line' },
        h('span', { class: 'muted' }, label), h('code', { id }, value),
        h('button', { class: 'secondary', onclick: () => copy(value) }, `Copy ${label.toLowerCase()}`));
      fresh.append(h('div', { class: 'card notice' },
        h('p', {}, h('strong', {}, `Key ${k.key} created. `), 'This is the only time the secret is shown here; later, Copy fetches it again.'),
        line('Secret', k.secret, 'new-secret'),
        line('Connection string', k.connectionString, 'new-cs'),
        h('button', { class: 'secondary', onclick: () => fresh.replaceChildren() }, 'Done, hide it')));
      list.reload();
    } catch (e) { fresh.append(errorBox(e)); }
  } }, 'Create key');
  body.append(h('div', { class: 'picker' }, h('label', {}, 'Application ', sel), create), fresh);
  list = pager(adminPages(`/_admin/apps/${enc(app)}/keys`, 'keys'), (rows) => table([
    { label: 'Key', cell: (k) => h('code', {}, k.key) },
    { label: 'Secret', cell: (k) => h('code', { class: 'redacted' }, k.secret) },
    { label: 'Created', cell: (k) => fmtTime(k.created) },
    { label: 'Last used', cell: (k) => fmtTime(k.lastUsed) },
    { label: 'Revoked', cell: (k) => (k.revoked ? h('span', { class: 'bad' }, fmtTime(k.revoked)) : h('span', { class: 'good' }, 'active')) },
    { label: 'Actions', cell: (k) => h('span', { class: 'row' },
      h('button', { class: 'secondary', 'data-copy': k.key, onclick: async (ev) => {
        try {
          const full = await admin('GET', `/_admin/apps/${enc(app)}/keys/${enc(k.key)}`);
          await copy(full.connectionString);
        } catch (e) { ev.target.after(errorBox(e)); }
      } }, 'Copy connection string'),
      k.revoked ? null : h('button', { class: 'danger', 'data-revoke': k.key, onclick: async (ev) => {
        if (!await confirmDialog(`Revoke key ${k.key}? Tokens signed with it are refused from now on.`, { action: 'Revoke' })) return;
        try { await admin('DELETE', `/_admin/apps/${enc(app)}/keys/${enc(k.key)}`); forgetApp(app); toast(`Key ${k.key} revoked`); list.reload(); } catch (e) { ev.target.after(errorBox(e)); }
      } }, 'Revoke')) },
  ], rows), `Application “${app}” has no keys: create one to let clients in.`);
  body.append(h('h2', {}, `Keys of ${app}`), list);
}
