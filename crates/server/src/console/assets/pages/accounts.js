// Accounts: create one, change its plan, see its applications against the plan's limit.

import { admin, enc } from '../api.js';
import { h, table, pager, slices, form, field, toast, val } from '../ui.js';

export const title = 'Accounts';
const PLANS = ['starter', 'pro', 'business'];

export async function render(body) {
  let list;
  const reload = () => { list.reload(); };
  const planSelect = (id, value) => h('select', { id }, PLANS.map((p) => h('option', { value: p, selected: p === value }, p)));
  body.append(form('create an account', [
    field('Name', { name: 'name', required: true, placeholder: 'acme', autocomplete: 'off' }),
    h('label', { class: 'field' }, h('span', {}, 'Plan'), planSelect('new-plan', 'starter')),
  ], 'Create account', async (f) => {
    await admin('POST', '/_admin/accounts', { name: val(f, 'name'), plan: f.querySelector('#new-plan').value });
    toast(`Account “${val(f, 'name')}” created`);
    f.reset();
    reload();
  }));
  list = pager(slices(async () => (await admin('GET', '/_admin/accounts')).accounts), (rows) => table([
    { label: 'Name', cell: (a) => a.name },
    { label: 'Applications', cell: (a) => h('span', { class: 'usage' }, `${a.apps} of ${a.maxApps ?? '∞'} applications`) },
    { label: 'Plan', cell: (a) => {
      const sel = planSelect(`plan-${a.name}`, a.plan);
      sel.setAttribute('aria-label', `plan of ${a.name}`);
      const out = h('span', {});
      sel.addEventListener('change', async () => {
        out.replaceChildren();
        try {
          await admin('PATCH', `/_admin/accounts/${enc(a.name)}`, { plan: sel.value });
          toast(`${a.name} is on ${sel.value} now`);
          reload();
        } catch (e) { sel.value = a.plan; out.append(h('span', { class: 'error', role: 'alert' }, e.message)); }
      });
      return h('span', {}, sel, out);
    } },
    { label: 'Created', cell: (a) => new Date(a.created).toLocaleString() },
  ], rows), 'No accounts yet: create the first one above, then give it applications.');
  body.append(h('h2', {}, 'All accounts'), list);
}
