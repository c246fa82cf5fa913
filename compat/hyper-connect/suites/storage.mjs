// Calls of the storage service through hyper-connect: create, upload (a stream), download,
// signedUrl (download and upload, then used with plain fetch and no credentials), remove,
// destroy.
import { Readable } from 'node:stream'
import { randomBytes } from 'node:crypto'

const status = (t, r, code) => t.eq([r.ok, r.status], [false, code], 'ok and status')
// A web ReadableStream of `chunks`, as hyper-connect's upload takes.
const stream = (...chunks) => Readable.toWeb(Readable.from(chunks.map((c) => Buffer.from(c))))
// Everything a download answered.
async function bytes (t, r) {
  t.eq([r.ok, typeof r.object?.getReader], [true, 'function'], 'ok and a ReadableStream')
  return Buffer.from(await new Response(r.object).arrayBuffer())
}

export default async function (hyper, t) {
  const storage = hyper.storage
  // Bytes of every value, several chunks, large enough to be streamed in pieces.
  const blob = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), randomBytes(300 * 1024)])

  await t.check('create', async () => t.eq(await storage.create(), { ok: true }))
  await t.check('upload a stream', async () => {
    t.eq(await storage.upload('docs/hello.txt', stream('hello, ', 'world\n')), { ok: true })
  })
  await t.check('download answers the uploaded bytes', async () => {
    t.eq((await bytes(t, await storage.download('docs/hello.txt'))).toString('utf8'), 'hello, world\n')
  })
  await t.check('upload and download binary bytes in many chunks', async () => {
    const chunks = []
    for (let i = 0; i < blob.length; i += 64 * 1024) chunks.push(blob.subarray(i, i + 64 * 1024))
    t.eq(await storage.upload('img/blob.bin', stream(...chunks)), { ok: true }, 'upload')
    t.eq((await bytes(t, await storage.download('img/blob.bin'))).equals(blob), true, 'same bytes')
  })
  await t.check('upload replaces an object', async () => {
    t.eq(await storage.upload('docs/hello.txt', stream('hello again\n')), { ok: true }, 'upload')
    t.eq((await bytes(t, await storage.download('docs/hello.txt'))).toString('utf8'), 'hello again\n', 'download')
  })
  await t.check('paths with spaces, unicode and + travel unencoded', async () => {
    for (const name of ['my files/résumé (1).pdf', 'a+b/ü.json']) {
      t.eq(await storage.upload(name, stream(`contents of ${name}`)), { ok: true }, `upload ${name}`)
      t.eq((await bytes(t, await storage.download(name))).toString('utf8'), `contents of ${name}`, `download ${name}`)
    }
  })
  await t.check('download of a missing object answers 404', async () => {
    status(t, await storage.download('docs/missing.txt'), 404)
  })

  let download
  await t.check('signedUrl for a download', async () => {
    const r = await storage.signedUrl('docs/hello.txt', { type: 'download' })
    t.eq([r.ok, typeof r.url, Object.keys(r).sort()], [true, 'string', ['ok', 'url']], 'answer')
    download = r.url
  })
  await t.check('the download URL works with plain fetch and no credentials', async () => {
    const res = await fetch(download)
    t.eq(res.status, 200, 'status')
    // The type hyper-connect sent with the upload, from the file name.
    t.eq(res.headers.get('content-type'), 'text/plain', 'content type')
    t.eq(await res.text(), 'hello again\n', 'body')
  })
  await t.check('an altered download URL is refused', async () => {
    const url = new URL(download)
    url.pathname = url.pathname.replace('hello.txt', 'other.txt')
    t.eq((await fetch(url)).status, 403, 'status')
  })
  await t.check('signedUrl for an upload; the URL works with plain fetch and no credentials', async () => {
    const r = await storage.signedUrl('uploads/report.csv', { type: 'upload' })
    t.eq([r.ok, typeof r.url], [true, 'string'], 'answer')
    const res = await fetch(r.url, { method: 'PUT', headers: { 'Content-Type': 'text/csv' }, body: 'a,b\n1,2\n' })
    t.eq(res.status, 200, 'status')
    t.eq((await bytes(t, await storage.download('uploads/report.csv'))).toString('utf8'), 'a,b\n1,2\n', 'download')
    const again = await storage.signedUrl('uploads/report.csv', { type: 'download' })
    t.eq((await fetch(again.url)).headers.get('content-type'), 'text/csv', 'content type')
  })

  let blobUrl
  await t.check('remove', async () => {
    blobUrl = (await storage.signedUrl('img/blob.bin', { type: 'download' })).url
    const res = await fetch(blobUrl)
    t.eq([res.status, Buffer.from(await res.arrayBuffer()).equals(blob)], [200, true], 'a download URL of another object')
    t.eq(await storage.remove('docs/hello.txt'), { ok: true })
    status(t, await storage.download('docs/hello.txt'), 404)
  })
  await t.check('remove of a missing object answers 404', async () => status(t, await storage.remove('docs/hello.txt'), 404))
  await t.check('destroy', async () => t.eq(await storage.destroy(true), { ok: true }))
  await t.check('calls on a destroyed instance answer 404', async () => {
    status(t, await storage.download('img/blob.bin'), 404)
    status(t, await storage.upload('img/late.txt', stream('late')), 404)
  })
  await t.check('signed URLs of a destroyed instance are refused', async () => {
    t.eq((await fetch(blobUrl)).status, 403, 'status')
  })
}
