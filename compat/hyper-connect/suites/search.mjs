// Calls of the search service through hyper-connect: create (fields, storeFields), add, get,
// update, remove, query (plain, fields, filter), load (bulk), destroy.
const films = {
  gb: { title: 'Ghostbusters', plot: 'Three parapsychologists catch ghosts in New York.', year: 1984, genre: 'comedy' },
  alien: { title: 'Alien', plot: 'The crew of a ship in deep space meets a deadly creature.', year: 1979, genre: 'scifi' },
  gd: { title: 'Groundhog Day', plot: 'A weatherman relives the same day again and again.', year: 1993, genre: 'comedy' }
}
const status = (t, r, code) => t.eq([r.ok, r.status], [false, code], 'ok and status')
const ids = (r) => {
  if (r.ok !== true || !Array.isArray(r.matches)) throw new Error(`not a matches answer: ${JSON.stringify(r)}`)
  return r.matches.map((m) => m.id)
}

export default async function (hyper, t) {
  const search = hyper.search

  await t.check('create with fields and storeFields', async () => {
    t.eq(await search.create(['title', 'plot'], ['title', 'year', 'genre']), { ok: true })
  })
  await t.check('add', async () => {
    for (const [key, doc] of Object.entries(films)) t.eq(await search.add(key, doc), { ok: true }, key)
  })
  await t.check('add of an existing key answers 409', async () => status(t, await search.add('gb', films.gb), 409))
  await t.check('add of a document without a configured field answers 422', async () => {
    status(t, await search.add('notitle', { plot: 'no title here' }), 422)
  })
  await t.check('get answers {ok, key, doc}', async () => {
    t.eq(await search.get('gb'), { ok: true, key: 'gb', doc: films.gb })
  })
  await t.check('get of a missing key answers 404', async () => status(t, await search.get('nope'), 404))
  await t.check('a key with spaces and unicode travels unencoded', async () => {
    const doc = { title: 'Amélie', plot: 'A shy waitress in Montmartre.', year: 2001, genre: 'romance' }
    t.eq(await search.add('le fabuleux destin d’amélie', doc), { ok: true }, 'add')
    t.eq(await search.get('le fabuleux destin d’amélie'), { ok: true, key: 'le fabuleux destin d’amélie', doc }, 'get')
    t.eq(await search.remove('le fabuleux destin d’amélie'), { ok: true }, 'remove')
  })

  await t.check('query finds a typo\'d title, shaped as MiniSearch shapes matches', async () => {
    const r = await search.query('ghostbustres')
    t.eq(ids(r), ['gb'], 'ids')
    const m = r.matches[0]
    t.eq(typeof m.score === 'number' && m.score > 0, true, 'score')
    t.eq(
      { ...m, score: 0 },
      { id: 'gb', score: 0, terms: ['ghostbusters'], queryTerms: ['ghostbustres'], match: { ghostbusters: ['title'] }, title: 'Ghostbusters', year: 1984, genre: 'comedy' },
      'match'
    )
  })
  await t.check('query ORs the words, documents matching more of them first', async () => {
    t.eq(ids(await search.query('ghosts groundhog day')), ['gd', 'gb'])
  })
  await t.check('query with fields searches only those fields', async () => {
    t.eq(ids(await search.query('space')), ['alien'], 'every field')
    t.eq(await search.query('space', { fields: ['title'] }), { ok: true, matches: [] }, 'title only')
    t.eq(ids(await search.query('space', { fields: ['plot'] })), ['alien'], 'plot only')
  })
  await t.check('query with a filter keeps documents with equal fields', async () => {
    const words = 'ghosts space day'
    t.eq(ids(await search.query(words)).sort(), ['alien', 'gb', 'gd'], 'unfiltered')
    t.eq(ids(await search.query(words, { filter: { genre: 'comedy' } })).sort(), ['gb', 'gd'], 'genre')
    t.eq(ids(await search.query(words, { fields: ['plot'], filter: { genre: 'scifi' } })), ['alien'], 'fields and filter')
    t.eq((await search.query(words, { filter: { genre: 'western' } })).matches, [], 'no match')
  })
  await t.check('query with a field that is not configured answers 422', async () => {
    status(t, await search.query('space', { fields: ['director'] }), 422)
  })

  await t.check('update replaces the document', async () => {
    const sequel = { title: 'Ghostbusters II', plot: 'The ghosts are back in New York.', year: 1989, genre: 'comedy' }
    t.eq(await search.update('gb', sequel), { ok: true })
    t.eq(await search.get('gb'), { ok: true, key: 'gb', doc: sequel }, 'get')
    const m = (await search.query('ghostbusters')).matches[0]
    t.eq([m.id, m.title, m.year], ['gb', 'Ghostbusters II', 1989], 'query')
    t.eq((await search.query('parapsychologists')).matches, [], 'old words are gone')
  })
  await t.check('update of a missing key answers 404', async () => status(t, await search.update('nope', films.gb), 404))

  await t.check('remove', async () => {
    t.eq(await search.remove('alien'), { ok: true })
    status(t, await search.get('alien'), 404)
    t.eq((await search.query('alien')).matches, [], 'query')
  })
  await t.check('remove of a missing key answers 404', async () => status(t, await search.remove('alien'), 404))

  await t.check('load indexes documents keyed by _id or id, replacing existing ones', async () => {
    const r = await search.load([
      { _id: 'term', title: 'The Terminator', plot: 'A cyborg is sent back in time.', year: 1984, genre: 'scifi' },
      { id: 'tootsie', title: 'Tootsie', plot: 'An actor poses as a woman.', year: 1982, genre: 'comedy' },
      { _id: 'gd', title: 'Groundhog Day', plot: 'A weatherman is stuck in Punxsutawney.', year: 1993, genre: 'comedy' }
    ])
    t.eq(r, { ok: true, results: [{ id: 'term', ok: true }, { id: 'tootsie', ok: true }, { id: 'gd', ok: true }] })
    t.eq(ids(await search.query('terminatr')), ['term'], 'a loaded document')
    t.eq(ids(await search.query('tootsie', { filter: { year: 1982 } })), ['tootsie'], 'keyed by id')
    t.eq(ids(await search.query('punxsutawney')), ['gd'], 'replaced')
    t.eq((await search.query('weatherman relives')).matches.map((m) => m.queryTerms), [['weatherman']], 'old words are gone')
  })

  await t.check('destroy', async () => t.eq(await search.destroy(true), { ok: true }))
  await t.check('calls on a destroyed instance answer 404', async () => {
    status(t, await search.query('ghosts'), 404)
    status(t, await search.get('gb'), 404)
  })
}
