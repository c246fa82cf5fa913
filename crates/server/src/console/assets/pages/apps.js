// Applications: create one for an account (over the plan's limit: the API's message),
// delete only after typing its name, and see its instances by type.

import { admin, enc, forgetApp } from '../api.js';
import { h, table, pager, slices, form, field, toast, val, confirmDialog, errorBox } from '../ui.js';

export const title = 'Applications';
const TYPES = ['data', 'cache', 'search', 'queue', 'storage'];

export async function render(body, ctx) {
  const accounts = (await admin('GET', '/_admin/accounts')).accounts;
  if (!accounts.length) {
    body.append(h('p', { class: 'empty' }, 'No accounts yet: an application belongs to an account, so create one on the ',
      h('a', { href: '#/accounts' }, 'Accounts page'), ' first.'));
    return;
  }
  const only = ctx.query.get('account') || '';
  let list;
  body.append(form('create an application', [
    field('Name', { name: 'name', required: true, placeholder: 'shop', autocomplete: 'off' }),
    h('label', { class: 'field' }, h('span', {}, 'Account'),
      h('select', { name: 'account' }, accounts.map((a) => h('option', { value: a.name, selected: a.name === only }, `${a.name} (${a.apps} of ${a.maxApps})`)))),
  ], 'Create application', async (f) => {
    await admin('POST', '/_admin/apps', { name: val(f, 'name'), account: val(f, 'account') });
    toast(`Application “${val(f, 'name')}” created`);
    f.reset();
    list.reload();
  }));
  const filter = h('select', { 'aria-label': 'account filter', onchange: () => ctx.go({ account: filter.value }) },
    h('option', { value: '' }, 'all accounts'),
    accounts.map((a) => h('option', { value: a.name, selected: a.name === only }, a.name)));
  const path = only ? `/_admin/apps?account=${enc(only)}` : '/_admin/apps';
  list = pager(slices(async () => {
    const apps = (await admin('GET', path)).apps;
    // Each application's instances by type, fetched for the rows of the list.
    await Promise.all(apps.map(async (a) => {
      try {
        const inst = (await admin('GET', `/_admin/apps/${enc(a.name)}/instances`)).instances;
        a.byType = Object.fromEntries(TYPES.map((t) => [t, inst.filter((i) => i.type === t).map((i) => i.name)]));
      } catch (e) { a.error = e; }
    }));
    return apps;
  }), (rows) => table([
    { label: 'Name', cell: (a) => a.name },
    { label: 'Account', cell: (a) => a.account },
    { label: 'Instances', cell: (a) => (a.error ? errorBox(a.error)
      : h('span', { class: 'chips' }, TYPES.filter((t) => a.byType[t].length).map((t) => h('a', { class: 'chip', href: `#/${t}?app=${enc(a.name)}` }, `${t}: ${a.byType[t].join(', ')}`)),
        TYPES.every((t) => !a.byType[t].length) ? h('span', { class: 'muted' }, 'none yet: create some on the Instances page') : null)) },
    { label: 'Created', cell: (a) => new Date(a.created).toLocaleString() },
    { label: 'Actions', cell: (a) => h('span', { class: 'row' },
      h('a', { class: 'button secondary', href: `#/keys?app=${enc(a.name)}` }, 'Keys'),
      h('button', { class: 'danger', 'aria-label': `delete ${a.name}`, onclick: async () => {
        if (!await confirmDialog(`Delete application “${a.name}”? Its instances, everything stored in them and its keys are removed.`, { typed: a.name, action: 'Delete application' })) return;
        try { await admin('DELETE', `/_admin/apps/${enc(a.name)}`); forgetApp(a.name); toast(`Application “${a.name}” deleted`); list.reload(); } catch (e) { body.append(errorBox(e)); }
      } }, 'Delete')) },
  ], rows), 'No applications yet: create one above; then give it a key on the Keys page.');
  body.append(h('h2', {}, 'Applications'), h('div', { class: 'row' }, filter), list);
}
