// create() and destroy(true) of an instance of every type: 201, 409 again, 200, 404 again.
export default async function (hyper, t) {
  const types = {
    data: () => hyper.data.create(),
    cache: () => hyper.cache.create(),
    search: () => hyper.search.create(['title', 'year'], ['title']),
    queue: () => hyper.queue.create('http://127.0.0.1:9/jobs', 'a-worker-secret'),
    storage: () => hyper.storage.create()
  }
  for (const [type, create] of Object.entries(types)) {
    const destroy = () => hyper[type].destroy(true)
    await t.check(`${type}: create`, async () => t.eq(await create(), { ok: true }))
    await t.check(`${type}: create again answers 409`, async () => {
      const r = await create()
      t.eq([r.ok, r.status], [false, 409], 'ok and status')
    })
    await t.check(`${type}: destroy`, async () => t.eq(await destroy(), { ok: true }))
    await t.check(`${type}: destroy again answers 404`, async () => {
      const r = await destroy()
      t.eq([r.ok, r.status], [false, 404], 'ok and status')
    })
  }
}
