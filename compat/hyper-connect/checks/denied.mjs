// Every call is refused: hyper-connect reports {ok: false, status: QUINTET_EXPECT_STATUS}.
// Run on its own with credentials that must not work (revoked key, wrong secret, ...).
export default async function (hyper, t) {
  const status = Number(process.env.QUINTET_EXPECT_STATUS)
  await t.check(`data.create() is refused with ${status}`, async () => {
    const r = await hyper.data.create()
    t.eq([r.ok, r.status], [false, status], 'ok and status')
  })
}
