// info.services(): GET / lists the five services.
export default async function (hyper, t) {
  await t.check('services() lists the five services', async () => {
    const r = await hyper.info.services()
    t.eq(r.ok, true, 'ok')
    t.eq([...r.services].sort(), ['cache', 'data', 'queue', 'search', 'storage'], 'services')
  })
}
