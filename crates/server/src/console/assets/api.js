// The console's only way to the server: the public HTTP API, with the token the user
// signed in with. The token lives in this tab's sessionStorage (never a URL or a cookie);
// application tokens minted for browsing services live in memory only.

const KEY = 'quintet.console.token';

/** Who the signed-in token is: `{role: 'admin'}` or `{role: 'account', account}`. */
export const who = { role: 'admin', account: null };

export const session = {
  get token() { return sessionStorage.getItem(KEY); },
  set(token) { sessionStorage.setItem(KEY, token); },
  clear() { sessionStorage.removeItem(KEY); minted.clear(); },
};

/** An error answer of the API: `status` and the server's `msg`. */
export class ApiError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

const listeners = new Set();
/** Called with no argument when the admin token stops being accepted. */
export function onSignedOut(f) { listeners.add(f); }

export const enc = encodeURIComponent;

async function call(method, path, { body, token, headers = {}, raw = false } = {}) {
  const init = { method, headers: { ...headers } };
  if (token) init.headers.authorization = `Bearer ${token}`;
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, `the server could not be reached (${e.message})`);
  }
  if (raw && res.ok) return res;
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  if (!res.ok || (json && json.ok === false)) {
    const msg = json && json.msg ? json.msg : `${res.status} ${res.statusText}`;
    throw new ApiError(res.status, msg);
  }
  return json;
}

/** An admin API call with the signed-in token. */
export async function admin(method, path, body) {
  try {
    return await call(method, path, { body, token: session.token });
  } catch (e) {
    if (e.status === 401) { session.clear(); listeners.forEach((f) => f()); }
    throw e;
  }
}

/**
 * A `fetchPage` for the pager over an admin list that pages on the server
 * (`?limit=&after=`, answering `{<field>: […], next}`): `path` may carry a query.
 */
export function adminPages(path, field, size = 20) {
  return async (cursor) => {
    const [p, q = ''] = path.split('?');
    const params = new URLSearchParams(q);
    params.set('limit', String(size));
    if (cursor) params.set('after', cursor);
    const r = await admin('GET', `${p}?${params}`);
    return { rows: r[field], next: r.next };
  };
}

const minted = new Map();

/** A short-lived token of `app`, minted through `POST /_admin/apps/<app>/token`. */
export async function appToken(app) {
  const now = Date.now();
  const have = minted.get(app);
  if (have && have.until > now + 30_000) return have.token;
  const r = await admin('POST', `/_admin/apps/${enc(app)}/token`, { ttl: 900 });
  minted.set(app, { token: r.token, until: Date.parse(r.expires) });
  return r.token;
}

/** Forget the minted token of `app` (its key was revoked). */
export function forgetApp(app) { minted.delete(app); }

/** A call in the application form: `/<app><path>` with a token of `app`. */
export async function svc(app, method, path, body, opts = {}) {
  const token = await appToken(app);
  return call(method, `/${enc(app)}${path}`, { body, token, ...opts });
}

/**
 * POST `file` to `url` with `token`, reporting the upload's progress (0..1); answers the
 * JSON answer. XMLHttpRequest rather than fetch: only it reports an upload's progress.
 */
function send(url, token, file, progress, type) {
  return new Promise((resolve, reject) => {
    const x = new XMLHttpRequest();
    x.open('POST', url);
    x.setRequestHeader('authorization', `Bearer ${token}`);
    x.setRequestHeader('content-type', type || file.type || 'application/octet-stream');
    x.upload.onprogress = (e) => { if (e.lengthComputable) progress(e.loaded / e.total); };
    x.onload = () => {
      let j = null;
      try { j = JSON.parse(x.responseText); } catch { /* not JSON */ }
      if (x.status >= 200 && x.status < 300) { progress(1); resolve(j); }
      else reject(new ApiError(x.status, (j && j.msg) || `${x.status}`));
    };
    x.onerror = () => reject(new ApiError(0, 'the upload failed: the server could not be reached'));
    x.send(file);
  });
}

/** Upload `file` to `/<app>/storage/<inst>/<path>`, reporting progress (0..1). */
export async function upload(app, inst, path, file, progress) {
  const token = await appToken(app);
  return send(`/${enc(app)}/storage/${enc(inst)}/${path.split('/').map(enc).join('/')}`, token, file, progress);
}

/** An admin call whose body is `file` (an archive to import), reporting progress (0..1). */
export async function adminUpload(path, file, progress, type) {
  try {
    return await send(path, session.token, file, progress, type);
  } catch (e) {
    if (e.status === 401) { session.clear(); listeners.forEach((f) => f()); }
    throw e;
  }
}

/**
 * An admin GET answered with bytes (an export): the body read as it arrives, `progress`
 * told how many bytes came so far; answers a Blob.
 */
export async function adminDownload(path, progress, type) {
  let res;
  try {
    res = await call('GET', path, { token: session.token, raw: true });
  } catch (e) {
    if (e.status === 401) { session.clear(); listeners.forEach((f) => f()); }
    throw e;
  }
  const reader = res.body.getReader();
  const chunks = [];
  let n = 0;
  for (;;) {
    let part;
    try { part = await reader.read(); } catch (e) { throw new ApiError(0, `the download broke off after ${n} bytes (${e.message})`); }
    if (part.done) break;
    chunks.push(part.value);
    n += part.value.length;
    progress(n);
  }
  return new Blob(chunks, { type });
}

/** Public calls (`/_metrics`, `/_ready`, `/`): no token. */
export async function publicText(path) {
  const r = await fetch(path);
  return { status: r.status, text: await r.text() };
}
