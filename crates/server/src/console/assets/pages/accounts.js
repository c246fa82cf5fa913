// Accounts: create one, change its plan, see its applications against the plan's limit,
// and issue, list and revoke the tokens an account signs in with. An account signed in
// with its own token sees only itself, read-only.

import { admin, adminPages, enc, who } from '../api.js';
import { h, table, pager, form, field, toast, val, confirmDialog, errorBox, copy, fmtTime, clear } from '../ui.js';

export const title = 'Accounts';
const PLANS = ['starter', 'pro', 'business'];

/** The token panel of `account`: issue (shown once, with Copy), list, revoke. */
function tokens(account) {
  const box = h('div', { class: 'card', 'data-tokens': account });
  const fresh = h('div', { 'aria-live': 'polite' });
  const list = pager(adminPages(`/_admin/accounts/${enc(account)}/tokens`, 'tokens', 10), (rows) => table([
    { label: 'Token', cell: (t) => h('code', {}, t.id) },
    { label: 'Created', cell: (t) => fmtTime(t.created) },
    { label: 'Revoked', cell: (t) => (t.revoked ? h('span', { class: 'bad' }, fmtTime(t.revoked)) : h('span', { class: 'good' }, 'active')) },
    { label: 'Actions', cell: (t) => (t.revoked ? '' : h('button', { class: 'danger', 'data-revoke-token': t.id, onclick: async (ev) => {
      if (!await confirmDialog(`Revoke token ${t.id}? Whoever signs in with it is refused from now on.`, { action: 'Revoke' })) return;
      try { await admin('DELETE', `/_admin/accounts/${enc(account)}/tokens/${enc(t.id)}`); toast(`Token ${t.id} revoked`); list.reload(); } catch (e) { ev.target.after(errorBox(e)); }
    } }, 'Revoke')) },
  ], rows), `No tokens: issue one to let ${account} sign in and manage its own applications.`);
  box.append(
    h('h2', {}, `Sign-in tokens of ${account}`),
    h('button', { 'data-issue': account, onclick: async () => {
      clear(fresh);
      try {
        const t = await admin('POST', `/_admin/accounts/${enc(account)}/tokens`);
        fresh.append(h('div', { class: 'card notice' },
          h('p', {}, h('strong', {}, `Token ${t.id} issued. `), 'It is shown only now: give it to the account; only its digest is kept.'),
          h('div', { class: 'secret-line' }, h('code', { id: 'new-account-token' }, t.token),
            h('button', { class: 'secondary', onclick: () => copy(t.token) }, 'Copy token')),
          h('button', { class: 'secondary', onclick: () => clear(fresh) }, 'Done, hide it')));
        list.reload();
      } catch (e) { fresh.append(errorBox(e)); }
    } }, 'Issue token'),
    fresh, list);
  return box;
}

export async function render(body) {
  const isAdmin = who.role === 'admin';
  let list;
  const panel = h('section', { id: 'account-tokens' });
  const planSelect = (id, value) => h('select', { id }, PLANS.map((p) => h('option', { value: p, selected: p === value }, p)));
  if (isAdmin) {
    body.append(form('create an account', [
      field('Name', { name: 'name', required: true, placeholder: 'acme', autocomplete: 'off' }),
      h('label', { class: 'field' }, h('span', {}, 'Plan'), planSelect('new-plan', 'starter')),
    ], 'Create account', async (f) => {
      await admin('POST', '/_admin/accounts', { name: val(f, 'name'), plan: f.querySelector('#new-plan').value });
      toast(`Account “${val(f, 'name')}” created`);
      f.reset();
      list.reload();
    }));
  }
  list = pager(adminPages('/_admin/accounts', 'accounts'), (rows) => table([
    { label: 'Name', cell: (a) => a.name },
    { label: 'Applications', cell: (a) => h('span', { class: 'usage' }, `${a.apps} of ${a.maxApps ?? '∞'} applications`) },
    { label: 'Plan', cell: (a) => {
      if (!isAdmin) return a.plan;
      const sel = planSelect(`plan-${a.name}`, a.plan);
      sel.setAttribute('aria-label', `plan of ${a.name}`);
      const out = h('span', {});
      sel.addEventListener('change', async () => {
        out.replaceChildren();
        try {
          await admin('PATCH', `/_admin/accounts/${enc(a.name)}`, { plan: sel.value });
          toast(`${a.name} is on ${sel.value} now`);
          list.reload();
        } catch (e) { sel.value = a.plan; out.append(h('span', { class: 'error', role: 'alert' }, e.message)); }
      });
      return h('span', {}, sel, out);
    } },
    { label: 'Created', cell: (a) => new Date(a.created).toLocaleString() },
    { label: 'Actions', cell: (a) => (isAdmin
      ? h('button', { class: 'secondary', 'data-tokens-of': a.name, onclick: () => panel.replaceChildren(tokens(a.name)) }, 'Sign-in tokens')
      : h('a', { class: 'button secondary', href: '#/apps' }, 'Applications')) },
  ], rows), 'No accounts yet: create the first one above, then give it applications.');
  body.append(h('h2', {}, isAdmin ? 'All accounts' : 'Your account'), list, panel);
}
