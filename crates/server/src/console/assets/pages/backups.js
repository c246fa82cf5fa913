// Backups: the node's backups (`/_admin/backups`, admin only) with their state, size and
// files; "Back up now" with an optional name, the running backup shown as it is written
// (the list is polled while one runs); delete after a confirmation.

import { admin, enc } from '../api.js';
import { h, table, toast, confirmDialog, errorBox, empty, fmtBytes, fmtTime, field, form, val, clear } from '../ui.js';

export const title = 'Backups';

/** How a backup's state reads: a running one with how much of it is copied. */
function state(b) {
  if (b.state === 'running') {
    const pct = b.totalBytes ? ` ${Math.floor((100 * b.bytes) / b.totalBytes)}%` : '';
    return h('span', { class: 'chip warn', 'data-state': 'running' }, `running${pct}`);
  }
  if (b.state === 'incomplete') return h('span', { class: 'chip error', 'data-state': 'incomplete', title: 'interrupted: it has no manifest and cannot be restored' }, 'incomplete');
  return h('span', { class: 'chip', 'data-state': b.state }, b.state);
}

export async function render(body, ctx) {
  const list = h('div', { id: 'backups', 'aria-live': 'polite' });
  let timer = null;
  // What the list shows now: an answer like it is not drawn again, so polling neither
  // flickers nor replaces a button under the pointer.
  let drawn = null;
  const gone = () => ctx.stale() || !body.isConnected;

  async function load() {
    clearTimeout(timer);
    let r;
    try { r = await admin('GET', '/_admin/backups'); } catch (e) { drawn = null; list.replaceChildren(errorBox(e)); return; }
    if (gone()) return;
    const seen = JSON.stringify(r.backups);
    if (seen !== drawn) {
      drawn = seen;
      list.replaceChildren(r.backups.length ? table([
        { label: 'Name', cell: (b) => b.name },
        { label: 'State', cell: state },
        { label: 'Created', cell: (b) => fmtTime(b.created) },
        { label: 'Size', cell: (b) => (b.state === 'running' && b.totalBytes ? `${fmtBytes(b.bytes)} of ${fmtBytes(b.totalBytes)}` : fmtBytes(b.bytes || 0)) },
        { label: 'Files', cell: (b) => (b.files === undefined || b.files === null ? '—' : String(b.files)) },
        { label: 'Actions', cell: (b) => h('button', { class: 'danger', 'data-delete': b.name, disabled: b.state === 'running', onclick: async (ev) => {
          if (!await confirmDialog(`Delete backup ${b.name}? Its files are removed from the backup directory.`, { action: 'Delete' })) return;
          try { await admin('DELETE', `/_admin/backups/${enc(b.name)}`); toast(`Backup ${b.name} deleted`); load(); } catch (e) { ev.target.after(errorBox(e)); }
        } }, 'Delete') },
      ], r.backups) : empty('No backups yet: take one with “Back up now”.'));
    }
    // Follow a running backup (this console's or the command line's) until it ends.
    if (r.backups.some((b) => b.state === 'running')) timer = setTimeout(() => { if (!gone()) load(); }, 1000);
  }

  const out = h('div', { id: 'backup-out' });
  body.append(
    h('p', { class: 'muted' }, 'A backup is a consistent copy of this node’s data directory, taken while it serves, written into its backup directory (',
      h('code', {}, '--backup-dir'), '). Restore one into a stopped node with ', h('code', {}, 'quintet restore SRC --data-dir DIR'), '.'),
    form('take a backup', [
      field('Name (optional)', { name: 'name', id: 'backup-name', placeholder: 'backup-<UTC time>' }),
    ], 'Back up now', async (f) => {
      clear(out);
      const name = val(f, 'name');
      const taking = admin('POST', '/_admin/backups', name ? { name } : undefined);
      out.append(h('p', { class: 'muted', id: 'backup-running' }, 'Backing up…'));
      // The list shows the running backup while the request is answered.
      const early = setTimeout(() => { if (!gone()) load(); }, 200);
      try {
        const r = await taking;
        clear(out);
        toast(`Backup ${r.backup.name} complete`);
        f.reset();
      } finally {
        clearTimeout(early);
        clear(out);
        if (!gone()) load();
      }
    }),
    out,
    h('h2', {}, 'Backups'), list);
  await load();
}
