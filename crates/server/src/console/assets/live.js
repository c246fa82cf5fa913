// Live changes of an instance, for the pages that show them (data, queue): the instance's
// change feed (`_changes?feed=continuous`, read with `fetch` because an EventSource cannot
// send the Authorization header), followed from now while the page is open.

import { enc, appToken, ApiError } from './api.js';
import { h, errorBox } from './ui.js';

/** How many changes the live list keeps, newest first. */
const KEEP = 50;

/**
 * The "Live" toggle and the list of changes it shows. While on, one streaming request
 * follows the feed from now, resuming after the last sequence it saw when the stream
 * ends; it stops when toggled off or when the page is left (another page, sign-out).
 */
export function follow(app, base, body, ctx, { what, item, changed }) {
  const toggle = h('button', { id: 'live-toggle', class: 'secondary', 'aria-pressed': 'false' }, 'Live: off');
  const status = h('p', { class: 'muted', id: 'live-status' });
  const list = h('ol', { id: 'live-changes', class: 'changes', reversed: true });
  const box = h('section', { id: 'live', 'aria-label': 'live changes', hidden: true },
    h('h2', {}, 'Live changes'), status, list);
  let abort = null;
  let reloadTimer = null;
  let watch = null;
  const gone = () => ctx.stale() || !body.isConnected;

  function stop(why) {
    if (abort) abort.abort();
    abort = null;
    clearInterval(watch);
    toggle.textContent = 'Live: off';
    toggle.setAttribute('aria-pressed', 'false');
    if (why) status.textContent = why;
  }

  function show(c) {
    list.prepend(item(c));
    while (list.children.length > KEEP) list.lastChild.remove();
    // A burst of changes reloads the page's list once.
    clearTimeout(reloadTimer);
    reloadTimer = setTimeout(() => { if (!gone()) changed(); }, 300);
  }

  async function run(ctl) {
    let since = 'now';
    while (!ctl.signal.aborted) {
      let res;
      try {
        const token = await appToken(app);
        res = await fetch(`/${enc(app)}${base}/_changes?feed=continuous&since=${enc(since)}&heartbeat=15000`, {
          headers: { authorization: `Bearer ${token}` }, signal: ctl.signal,
        });
      } catch (e) {
        if (ctl.signal.aborted) return;
        throw new ApiError(0, `the server could not be reached (${e.message})`);
      }
      if (!res.ok) {
        let msg = `${res.status} ${res.statusText}`;
        try { msg = (await res.json()).msg || msg; } catch { /* not JSON */ }
        throw new ApiError(res.status, msg);
      }
      status.textContent = `Following ${what} as they commit.`;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        let chunk;
        try { chunk = await reader.read(); } catch (e) { if (ctl.signal.aborted) return; break; }
        if (chunk.done) break;
        if (gone()) { stop(); return; }
        buf += chunk.value;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line) continue; // a heartbeat
          const c = JSON.parse(line);
          if (c.ok === false) throw new ApiError(c.status || 0, c.msg);
          since = c.seq || c.last_seq || since;
          if (c.id !== undefined) show(c);
        }
      }
      // The stream ended (the node restarted, a proxy closed it): resume where it stopped.
      if (gone()) { stop(); return; }
      await new Promise((r) => { setTimeout(r, 1000); });
    }
  }

  function start() {
    const ctl = new AbortController();
    abort = ctl;
    // Signing out or leaving the page ends the stream even while nothing changes.
    watch = setInterval(() => { if (gone()) stop(); }, 1000);
    box.hidden = false;
    toggle.textContent = 'Live: on';
    toggle.setAttribute('aria-pressed', 'true');
    status.textContent = 'Connecting…';
    run(ctl).catch((e) => {
      if (abort !== ctl) return;
      stop();
      status.replaceChildren(errorBox(e));
    });
  }

  toggle.addEventListener('click', () => { if (abort) stop('Stopped: switch Live on to follow changes again.'); else start(); });
  // Leaving the page (another page or another instance) ends the stream.
  window.addEventListener('hashchange', () => stop(), { once: true });
  return { toggle, box };
}
