// Instances of an application: create one of any type (search and queue settings as form
// fields), delete after asking.

import { admin, adminPages, svc, enc } from '../api.js';
import { h, table, pager, form, field, toast, val, confirmDialog, errorBox, empty, jsonBlock } from '../ui.js';

export const title = 'Instances';
const TYPES = ['data', 'cache', 'search', 'queue', 'storage'];

function list(text) { return text.split(',').map((s) => s.trim()).filter(Boolean); }

export async function render(body, ctx) {
  const apps = (await admin('GET', '/_admin/apps')).apps;
  if (!apps.length) {
    body.append(empty('No applications yet: create one on the Applications page first.'));
    return;
  }
  const app = ctx.query.get('app') || apps[0].name;
  const type = ctx.query.get('type') || 'data';
  const sel = h('select', { id: 'pick-app', onchange: () => ctx.go({ app: sel.value, type }) },
    apps.map((a) => h('option', { value: a.name, selected: a.name === app }, a.name)));
  const typeSel = h('select', { name: 'type', id: 'new-type', onchange: () => ctx.go({ app, type: typeSel.value }) },
    TYPES.map((t) => h('option', { value: t, selected: t === type }, t)));
  const settings = {
    search: [field('Fields to search (comma-separated)', { name: 'fields', required: true, placeholder: 'title, plot' }),
      field('Fields to return (comma-separated)', { name: 'storeFields', placeholder: 'title, year' })],
    queue: [field('Worker URL (target)', { name: 'target', required: true, type: 'url', placeholder: 'https://worker.example/jobs' }),
      field('Secret (signs deliveries)', { name: 'secret', type: 'password', autocomplete: 'off' }),
      field('Concurrency', { name: 'concurrency', type: 'number', min: 1, max: 256, placeholder: '8' }),
      field('Timeout (s)', { name: 'timeout', type: 'number', min: 1, max: 3600, placeholder: '30' }),
      field('Retries', { name: 'retries', type: 'number', min: 0, max: 25, placeholder: '5' }),
      h('label', { class: 'field' }, h('span', {}, 'Sign the job id too'), h('input', { type: 'checkbox', name: 'signJobId' }))],
  };
  let rows;
  body.append(h('div', { class: 'picker' }, h('label', {}, 'Application ', sel)));
  body.append(form('create an instance', [
    h('label', { class: 'field' }, h('span', {}, 'Type'), typeSel),
    field('Name', { name: 'name', required: true, placeholder: 'movies', autocomplete: 'off' }),
    settings[type] || [],
  ], 'Create instance', async (f) => {
    let config;
    if (type === 'search') {
      config = { fields: list(val(f, 'fields')) };
      if (val(f, 'storeFields')) config.storeFields = list(val(f, 'storeFields'));
    } else if (type === 'queue') {
      config = { target: val(f, 'target') };
      if (val(f, 'secret')) config.secret = val(f, 'secret');
      for (const k of ['concurrency', 'timeout', 'retries']) if (val(f, k)) config[k] = Number(val(f, k));
      if (f.querySelector('[name=signJobId]').checked) config.signJobId = true;
    }
    await svc(app, 'PUT', `/${type}/${enc(val(f, 'name'))}`, config);
    toast(`${type} instance “${val(f, 'name')}” created`);
    f.reset();
    typeSel.value = type;
    rows.reload();
  }));
  rows = pager(adminPages(`/_admin/apps/${enc(app)}/instances`, 'instances'), (items) => table([
    { label: 'Type', cell: (i) => i.type },
    { label: 'Name', cell: (i) => h('a', { href: `#/${i.type}?app=${enc(app)}&instance=${enc(i.name)}` }, i.name) },
    { label: 'Settings', cell: (i) => (i.config && Object.keys(i.config).length ? jsonBlock(i.config) : '—') },
    { label: 'Created', cell: (i) => new Date(i.created).toLocaleString() },
    { label: 'Actions', cell: (i) => h('button', { class: 'danger', 'aria-label': `delete ${i.type} ${i.name}`, onclick: async (ev) => {
      if (!await confirmDialog(`Delete ${i.type} instance “${i.name}” and everything stored in it?`, { typed: i.name, action: 'Delete instance' })) return;
      try { await svc(app, 'DELETE', `/${i.type}/${enc(i.name)}`); toast(`${i.type} instance “${i.name}” deleted`); rows.reload(); } catch (e) { ev.target.after(errorBox(e)); }
    } }, 'Delete') },
  ], items), `Application “${app}” has no instances: create one above.`);
  body.append(h('h2', {}, `Instances of ${app}`), rows);
}
