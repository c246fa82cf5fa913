// The console's shell: sign-in, navigation and the page router. Each page is one module
// under pages/ exporting `title` and `render(main, ctx)`; routes are `#/<page>?<query>`.

import { admin, session, onSignedOut, ApiError, enc, who } from './api.js';
import { h, clear, errorBox, empty } from './ui.js';
import * as overview from './pages/overview.js';
import * as accounts from './pages/accounts.js';
import * as apps from './pages/apps.js';
import * as keys from './pages/keys.js';
import * as instances from './pages/instances.js';
import * as data from './pages/data.js';
import * as cache from './pages/cache.js';
import * as search from './pages/search.js';
import * as queue from './pages/queue.js';
import * as storage from './pages/storage.js';
import * as backups from './pages/backups.js';

/** The pages, in the navigation's order. Another module adds one with `pages.set`. */
export const pages = new Map(Object.entries({
  overview, accounts, apps, keys, instances, data, cache, search, queue, storage, backups,
}));

/** Pages an account token cannot use (they need the admin token). */
const ADMIN_ONLY = new Set(['overview', 'backups']);

function visible() {
  return [...pages].filter(([name]) => who.role === 'admin' || !ADMIN_ONLY.has(name));
}

const root = document.getElementById('root');

function route() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [name, q = ''] = raw.split('?');
  const shown = new Map(visible());
  return { name: shown.has(name) ? name : visible()[0][0], query: new URLSearchParams(q) };
}

/** Ask the server who the token signs in as. */
async function identify() {
  const me = await admin('GET', '/_admin/me');
  who.role = me.role;
  who.account = me.account ? me.account.name : null;
}

/** Go to `page` with `query` (an object; empty values left out). */
export function go(page, query = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v) q.set(k, v);
  const s = q.toString();
  location.hash = `#/${page}${s ? `?${s}` : ''}`;
}

function signIn(message) {
  clear(root);
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'signin-msg' });
  const msg = h('div', { id: 'signin-msg', 'aria-live': 'polite' }, message ? h('p', { class: 'error', role: 'alert' }, message) : null);
  const f = h('form', { class: 'signin card', 'aria-label': 'sign in' },
    h('h1', {}, 'quintet console'),
    h('label', { for: 'token' }, 'Admin token or account token'),
    input,
    h('p', { class: 'muted' }, 'The token stays in this tab only and is forgotten when you sign out or close it.'),
    h('button', { type: 'submit' }, 'Sign in'),
    msg);
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    session.set(input.value.trim());
    try {
      await identify();
      shell();
    } catch (e) {
      session.clear();
      input.value = '';
      const text = e.status === 401 ? 'That token is not valid. Use the admin token the server printed at its first start (or `quintet admin-token`), or an account token the admin issued you.' : e.message;
      signIn(text);
    }
  });
  root.append(f);
  input.focus();
}

let main;
let nav;

function shell() {
  clear(root);
  nav = h('nav', { class: 'nav', 'aria-label': 'pages' },
    visible().map(([name, p]) => h('a', { href: `#/${name}`, 'data-page': name }, p.title)));
  main = h('main', { id: 'main', tabindex: '-1' });
  root.append(
    h('header', { class: 'top' },
      h('a', { class: 'skip', href: '#main', onclick: (e) => { e.preventDefault(); main.focus(); } }, 'Skip to content'),
      h('strong', {}, 'quintet'),
      h('span', { class: 'muted' }, 'console'),
      h('span', { class: 'chip', id: 'who' }, who.role === 'admin' ? 'admin' : `account ${who.account}`),
      h('button', { class: 'secondary', id: 'signout', onclick: () => { session.clear(); signIn(); } }, 'Sign out')),
    h('div', { class: 'layout' }, nav, main),
    h('div', { id: 'toast', role: 'status', 'aria-live': 'polite' }));
  show();
}

let shown = 0;
async function show() {
  if (!main) return;
  const { name, query } = route();
  const page = pages.get(name);
  for (const a of nav.querySelectorAll('a')) {
    if (a.dataset.page === name) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  const mine = ++shown;
  clear(main).append(h('h1', {}, page.title));
  document.title = `${page.title} · quintet console`;
  const body = h('div', { class: 'page', 'data-page': name });
  main.append(body);
  try {
    await page.render(body, { query, go: (q) => go(name, q), stale: () => mine !== shown });
  } catch (e) {
    if (mine === shown) body.append(errorBox(e));
  }
}

/**
 * The application and instance of `type` a service page works on, picked at its top.
 * Answers `{app, instance}` (the instance from the admin API, with its config), or null
 * after showing what to do.
 */
export async function pickInstance(body, ctx, type) {
  const appList = (await admin('GET', '/_admin/apps')).apps;
  if (!appList.length) {
    body.append(empty('No applications yet: create one on the Applications page first.'));
    return null;
  }
  const app = ctx.query.get('app') || appList[0].name;
  const list = (await admin('GET', `/_admin/apps/${enc(app)}/instances`)).instances.filter((i) => i.type === type);
  const name = ctx.query.get('instance') || (list[0] && list[0].name);
  const appSel = h('select', { id: 'pick-app', onchange: () => ctx.go({ app: appSel.value }) },
    appList.map((a) => h('option', { value: a.name, selected: a.name === app }, a.name)));
  const instSel = h('select', { id: 'pick-instance', onchange: () => ctx.go({ app, instance: instSel.value }) },
    list.map((i) => h('option', { value: i.name, selected: i.name === name }, i.name)));
  body.append(h('div', { class: 'picker' },
    h('label', {}, 'Application ', appSel),
    list.length ? h('label', {}, `${type} instance `, instSel) : null));
  const instance = list.find((i) => i.name === name);
  if (!instance) {
    body.append(empty(`Application “${app}” has no ${type} instance: create one on the Instances page.`));
    return null;
  }
  return { app, instance };
}

export { ApiError };

window.addEventListener('hashchange', show);
onSignedOut(() => signIn('Your admin token is no longer accepted: sign in again.'));
if (session.token) identify().then(shell, () => signIn()); else signIn();
