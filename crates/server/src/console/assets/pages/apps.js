// Applications: create one for an account (over the plan's limit: the API's message),
// delete only after typing its name, and see its instances by type. The admin also
// exports an application as an archive file and imports one (`/_admin/export`,
// `/_admin/import`: the portable archive of docs/archive.md), with progress and the
// server's report or message.

import { admin, adminPages, enc, forgetApp, who, adminDownload, adminUpload } from '../api.js';
import { h, table, pager, form, field, toast, val, confirmDialog, errorBox, fmtBytes, clear } from '../ui.js';

export const title = 'Applications';
const TYPES = ['data', 'cache', 'search', 'queue', 'storage'];
const ARCHIVE = 'application/vnd.quintet.archive';

/**
 * Whether `blob` ends with an archive's end record. An export that fails midway ends
 * without it (docs/archive.md), and such a file must not be offered as an export.
 */
async function complete(blob) {
  const tail = await blob.slice(Math.max(0, blob.size - 300)).text();
  return /\nend \d+ [0-9a-f]{8}\n\{[^\n]*\}\n$/.test(tail);
}

/** Export `name` (with its keys' secrets when `secrets`), saving it as `<name>.qta`. */
async function exportApp(name, secrets, status) {
  clear(status).append(h('p', { class: 'muted', id: 'export-running' }, `Exporting ${name}…`));
  const q = new URLSearchParams({ app: name });
  if (secrets) q.set('secrets', 'true');
  const blob = await adminDownload(`/_admin/export?${q}`, (n) => {
    status.firstChild.textContent = `Exporting ${name}… ${fmtBytes(n)}`;
  }, ARCHIVE);
  if (!await complete(blob)) {
    throw new Error(`the export of ${name} broke off after ${fmtBytes(blob.size)} (no end record): nothing was saved; try again, and see the server's log`);
  }
  const url = URL.createObjectURL(blob);
  const a = h('a', { href: url, download: `${name}.qta` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
  clear(status).append(h('p', { id: 'export-done' }, `Exported ${name}: ${name}.qta, ${fmtBytes(blob.size)}${secrets ? ', with its keys’ secrets: keep the file safe' : ''}.`));
}

/** What an import did, from the server's report. */
function report(r) {
  const apps = [...new Set(r.instances.map((i) => i.app))];
  const unequal = r.instances.filter((i) => !i.equal);
  return h('div', { class: 'card notice', id: 'import-report' },
    h('p', {}, h('strong', {}, 'Imported. '),
      `${r.apps} application(s) created${apps.length ? ` (${apps.join(', ')})` : ''}, ${r.accounts} account(s) created, `,
      `${r.keys} key(s) with their secrets, ${r.keysSkipped} key(s) skipped (no secret in the archive, revoked, or their id exists here: create new keys), ${r.records} records.`),
    r.instances.length ? table([
      { label: 'Instance', cell: (i) => `${i.app} / ${i.type} / ${i.name}` },
      { label: 'Items', cell: (i) => `${i.importedCount} of ${i.count}` },
      { label: 'Read back', cell: (i) => (i.equal ? 'equal' : h('span', { class: 'chip error' }, 'differs')) },
    ], r.instances) : null,
    unequal.length ? h('p', { class: 'error' }, `${unequal.length} instance(s) differ from the archive.`) : null);
}

/** The admin's import form: an archive file, an optional new name, progress, the report. */
function importForm(reload) {
  const fileInput = h('input', { type: 'file', id: 'import-file', name: 'file', accept: '.qta,application/vnd.quintet.archive', required: true });
  const bar = h('progress', { id: 'import-progress', max: 1, value: 0, hidden: true });
  const pct = h('span', { id: 'import-pct', class: 'muted' });
  const out = h('div', { id: 'import-out', 'aria-live': 'polite' });
  return [
    h('h2', {}, 'Import an archive'),
    h('p', { class: 'muted' }, 'An archive exported here or with ', h('code', {}, 'quintet export'),
      '. Its applications and instances must not exist yet; a one-application archive can be imported under a new name, as a copy beside the original. On any error nothing of it is kept.'),
    form('import an archive', [
      h('label', { class: 'field' }, h('span', {}, 'Archive file'), fileInput),
      field('As application (optional: the archive’s name)', { name: 'as', id: 'import-name', autocomplete: 'off', placeholder: 'shop-copy' }),
      bar, pct,
    ], 'Import', async (f) => {
      clear(out);
      const file = fileInput.files[0];
      const as = val(f, 'as');
      const q = as ? `?${new URLSearchParams({ app: as })}` : '';
      bar.hidden = false;
      bar.value = 0;
      pct.textContent = '';
      const r = await adminUpload(`/_admin/import${q}`, file, (p) => {
        bar.value = p;
        // Once it is all sent, the server applies it and reads every instance back.
        pct.textContent = p < 1 ? `${Math.round(p * 100)}% sent` : 'sent: the server imports and checks it…';
      }, ARCHIVE).finally(() => { bar.hidden = true; pct.textContent = ''; });
      out.append(report(r));
      toast(`Archive ${file.name} imported`);
      f.reset();
      reload();
    }),
    out,
  ];
}

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
  const page = adminPages(path, 'apps');
  list = pager(async (cursor) => {
    const p = await page(cursor);
    // Each application's instances by type, fetched for the rows of this page.
    await Promise.all(p.rows.map(async (a) => {
      try {
        const inst = (await admin('GET', `/_admin/apps/${enc(a.name)}/instances`)).instances;
        a.byType = Object.fromEntries(TYPES.map((t) => [t, inst.filter((i) => i.type === t).map((i) => i.name)]));
      } catch (e) { a.error = e; }
    }));
    return p;
  }, (rows) => table([
    { label: 'Name', cell: (a) => a.name },
    { label: 'Account', cell: (a) => a.account },
    { label: 'Instances', cell: (a) => (a.error ? errorBox(a.error)
      : h('span', { class: 'chips' }, TYPES.filter((t) => a.byType[t].length).map((t) => h('a', { class: 'chip', href: `#/${t}?app=${enc(a.name)}` }, `${t}: ${a.byType[t].join(', ')}`)),
        TYPES.every((t) => !a.byType[t].length) ? h('span', { class: 'muted' }, 'none yet: create some on the Instances page') : null)) },
    { label: 'Created', cell: (a) => new Date(a.created).toLocaleString() },
    { label: 'Actions', cell: (a) => h('span', { class: 'row' },
      h('a', { class: 'button secondary', href: `#/keys?app=${enc(a.name)}` }, 'Keys'),
      who.role === 'admin' ? h('button', { class: 'secondary', 'data-export': a.name, onclick: async (ev) => {
        ev.target.disabled = true;
        try { await exportApp(a.name, secrets.checked, exportStatus); } catch (e) { clear(exportStatus).append(errorBox(e)); } finally { ev.target.disabled = false; }
      } }, 'Export') : null,
      h('button', { class: 'danger', 'aria-label': `delete ${a.name}`, onclick: async () => {
        if (!await confirmDialog(`Delete application “${a.name}”? Its instances, everything stored in them and its keys are removed.`, { typed: a.name, action: 'Delete application' })) return;
        try { await admin('DELETE', `/_admin/apps/${enc(a.name)}`); forgetApp(a.name); toast(`Application “${a.name}” deleted`); list.reload(); } catch (e) { body.append(errorBox(e)); }
      } }, 'Delete')) },
  ], rows), 'No applications yet: create one above; then give it a key on the Keys page.');
  const secrets = h('input', { type: 'checkbox', id: 'export-secrets' });
  const exportStatus = h('div', { id: 'export-status', 'aria-live': 'polite' });
  body.append(h('h2', {}, 'Applications'), h('div', { class: 'row' }, filter), list);
  // Export and import are the admin's: the API refuses them to an account token.
  if (who.role === 'admin') {
    body.append(
      h('div', { class: 'row' }, h('label', {}, secrets, ' Exports include the keys’ secrets (then imported keys keep working; keep the file safe)')),
      exportStatus,
      ...importForm(() => list.reload()));
  }
}
