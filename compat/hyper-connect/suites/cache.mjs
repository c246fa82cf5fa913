// Calls of the cache service through hyper-connect: create, add (with ttl), get, set (with
// ttl), remove, query (the default pattern and patterns), destroy.
const status = (t, r, code) => t.eq([r.ok, r.status], [false, code], 'ok and status')
const keys = (r) => {
  if (r.ok !== true || !Array.isArray(r.docs)) throw new Error(`not a docs answer: ${JSON.stringify(r)}`)
  return r.docs.map((d) => d.key)
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

export default async function (hyper, t) {
  const cache = hyper.cache
  // Entries written with a 1 s TTL must be gone once it has passed (the server's clock
  // starts no later than the answer arrives); checked at the end, to wait only once.
  let expired = 0

  await t.check('create', async () => t.eq(await cache.create(), { ok: true }))
  await t.check('add', async () => {
    t.eq(await cache.add('movie-1', { title: 'Alien', year: 1979 }), { ok: true })
    t.eq(await cache.add('movie-2', { title: 'Aliens', year: 1986 }), { ok: true })
  })
  await t.check('add with a ttl', async () => {
    t.eq(await cache.add('movie-3', { title: 'Ghostbusters', year: 1984 }, '1h'), { ok: true }, '1h')
    t.eq(await cache.add('flash-1', { title: 'gone soon' }, '1s'), { ok: true }, '1s')
    expired = Date.now() + 1000
    t.eq(await cache.get('movie-3'), { ok: true, doc: { title: 'Ghostbusters', year: 1984 } }, 'live')
  })
  await t.check('add of an existing key answers 409', async () => {
    status(t, await cache.add('movie-1', { title: 'again' }), 409)
  })
  await t.check('add with an invalid key, value or ttl answers 422', async () => {
    status(t, await cache.add('Movie 1', { title: 'x' }), 422)
    status(t, await cache.add('movie-x', 'not an object'), 422)
    status(t, await cache.add('movie-x', { title: 'x' }, '1x'), 422)
  })
  await t.check('get answers {ok, doc} (X-HYPER-LEGACY-GET: false)', async () => {
    t.eq(await cache.get('movie-1'), { ok: true, doc: { title: 'Alien', year: 1979 } })
  })
  await t.check('get of a missing key answers 404', async () => status(t, await cache.get('movie-9'), 404))

  await t.check('set replaces the value of an existing key', async () => {
    t.eq(await cache.set('movie-1', { title: 'Alien', director: 'Ridley Scott' }), { ok: true })
    t.eq(await cache.get('movie-1'), { ok: true, doc: { title: 'Alien', director: 'Ridley Scott' } }, 'after')
  })
  await t.check('set with a ttl', async () => {
    t.eq(await cache.set('movie-3', { title: 'Ghostbusters II', year: 1989 }, '1h'), { ok: true }, '1h')
    t.eq(await cache.get('movie-3'), { ok: true, doc: { title: 'Ghostbusters II', year: 1989 } }, 'live')
    t.eq(await cache.add('flash-2', { title: 'also gone soon' }), { ok: true }, 'add without ttl')
    t.eq(await cache.set('flash-2', { title: 'gone soon after all' }, '1s'), { ok: true }, '1s')
    expired = Date.now() + 1000
  })
  await t.check('keys with $ and + travel unencoded', async () => {
    t.eq(await cache.add('a$b+c', { sym: true }), { ok: true }, 'add')
    t.eq(await cache.set('a$b+c', { sym: 'yes' }), { ok: true }, 'set')
    t.eq(await cache.get('a$b+c'), { ok: true, doc: { sym: 'yes' } }, 'get')
    t.eq(await cache.remove('a$b+c'), { ok: true }, 'remove')
  })
  await t.check(`set of a missing key (${t.form} form)`, async () => {
    if (t.form === 'domain') {
      // The domain form upserts.
      t.eq(await cache.set('movie-4', { title: 'Groundhog Day' }), { ok: true })
      t.eq(await cache.get('movie-4'), { ok: true, doc: { title: 'Groundhog Day' } }, 'after')
    } else {
      // The application form updates existing keys only: 404, nothing written.
      status(t, await cache.set('movie-4', { title: 'Groundhog Day' }), 404)
      status(t, await cache.get('movie-4'), 404)
      t.eq(await cache.add('movie-4', { title: 'Groundhog Day' }), { ok: true }, 'add')
    }
  })

  await t.check('query with the default pattern answers every entry, sorted by key', async () => {
    const r = await cache.query()
    // The flash entries may or may not have expired yet.
    const docs = r.docs.filter((d) => !d.key.startsWith('flash-'))
    t.eq(keys({ ok: r.ok, docs }), ['movie-1', 'movie-2', 'movie-3', 'movie-4'], 'keys')
    t.eq(keys(r), [...keys(r)].sort(), 'sorted')
    t.eq(docs[0], { key: 'movie-1', value: { title: 'Alien', director: 'Ridley Scott' } }, '{key, value}')
  })
  await t.check('query with patterns', async () => {
    t.eq(await cache.add('series-2', { title: 'Stranger Things' }), { ok: true }, 'add')
    t.eq(keys(await cache.query('movie-*')), ['movie-1', 'movie-2', 'movie-3', 'movie-4'], 'movie-*')
    t.eq(keys(await cache.query('*s-2')), ['series-2'], '*s-2')
    t.eq(keys(await cache.query('m*e-3')), ['movie-3'], 'm*e-3')
    t.eq(keys(await cache.query('*ie*')), ['movie-1', 'movie-2', 'movie-3', 'movie-4', 'series-2'], '*ie*')
    t.eq(keys(await cache.query('*-4')), ['movie-4'], '*-4')
    t.eq(await cache.query('nothing-*'), { ok: true, docs: [] }, 'no match')
  })

  await t.check('remove', async () => {
    t.eq(await cache.remove('movie-2'), { ok: true })
    status(t, await cache.get('movie-2'), 404)
  })
  await t.check('remove of a missing key answers 404', async () => status(t, await cache.remove('movie-2'), 404))
  await t.check('an expired entry is neither answered nor listed', async () => {
    await sleep(Math.max(0, expired + 50 - Date.now()))
    status(t, await cache.get('flash-1'), 404)
    status(t, await cache.get('flash-2'), 404)
    t.eq(await cache.query('flash-*'), { ok: true, docs: [] }, 'query')
    t.eq(await cache.add('flash-1', { title: 'back' }), { ok: true }, 'its key can be added again')
    t.eq(await cache.get('movie-3'), { ok: true, doc: { title: 'Ghostbusters II', year: 1989 } }, 'the 1h entry')
  })
  await t.check('destroy', async () => t.eq(await cache.destroy(true), { ok: true }))
  await t.check('calls on a destroyed instance answer 404', async () => {
    status(t, await cache.get('movie-1'), 404)
    status(t, await cache.query(), 404)
  })
}
