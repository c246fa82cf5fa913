// Calls of the queue service through hyper-connect: create, enqueue, queued, errors,
// destroy; deliveries to a worker in this process, verified with hyper-connect's own
// worker-side check, createHyperVerify.
import http from 'node:http'
import { createRequire } from 'node:module'

const { createHyperVerify } = createRequire(`${process.env.HYPER_CONNECT_DIR}/package.json`)('hyper-connect')

const SECRET = 'a-worker-secret'

// A worker that records every delivery and fails jobs of type "fail" with a 500.
function startWorker () {
  const received = []
  const server = http.createServer((req, res) => {
    const chunks = []
    req.on('data', (c) => chunks.push(c))
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8')
      received.push({ headers: req.headers, body })
      const job = JSON.parse(body)
      res.writeHead(job.type === 'fail' ? 500 : 200, { 'content-type': 'text/plain' })
      res.end(job.type === 'fail' ? 'the worker refused this job' : 'done')
    })
  })
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({ server, received, url: `http://127.0.0.1:${server.address().port}/jobs` }))
  })
}

async function until (what, check) {
  const deadline = Date.now() + 30000
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

export default async function (hyper, t) {
  const worker = await startWorker()
  try {
    await t.check('create', async () => t.eq(await hyper.queue.create(worker.url, SECRET), { ok: true }))
    const job = { type: 'welcome', 10: 'x', price: 100.0, big: 1e21, note: 'café "☕"\n' }
    let id
    await t.check('enqueue answers ok with an id', async () => {
      const r = await hyper.queue.enqueue(job)
      t.eq([r.ok, typeof r.id], [true, 'string'], 'ok and id')
      id = r.id
    })
    await t.check('the delivery verifies with createHyperVerify', async () => {
      await until('the job is delivered', () => worker.received.length >= 1)
      const { headers, body } = worker.received[0]
      t.eq(headers['x-svc-job-id'], id, 'job id header')
      t.eq(body, JSON.stringify(job), 'body')
      t.eq(createHyperVerify(SECRET, '5m')(headers['x-svc-signature'], JSON.parse(body)), { ok: true }, 'verification')
      t.eq(createHyperVerify('another-secret', '5m')(headers['x-svc-signature'], JSON.parse(body)).ok, false, 'wrong secret')
    })
    await t.check('queued is empty once the worker accepted the job', async () => {
      await until('the job is gone', async () => (await hyper.queue.queued()).jobs.length === 0)
      t.eq(await hyper.queue.queued(), { ok: true, jobs: [] })
    })
    await t.check('a job the worker fails is listed by errors', async () => {
      t.eq((await hyper.queue.enqueue({ type: 'fail', n: 1 })).ok, true, 'enqueue')
      await until('the job failed', async () => (await hyper.queue.errors()).jobs.length === 1)
      t.eq(await hyper.queue.errors(), { ok: true, jobs: [{ type: 'fail', n: 1 }] })
    })
    await t.check('enqueue of a non-object answers 422', async () => {
      const r = await hyper.queue.enqueue([1, 2])
      t.eq([r.ok, r.status], [false, 422], 'ok and status')
    })
    await t.check('destroy', async () => t.eq(await hyper.queue.destroy(true), { ok: true }))
    await t.check('enqueue to a destroyed queue answers 404', async () => {
      const r = await hyper.queue.enqueue({ type: 'late' })
      t.eq([r.ok, r.status], [false, 404], 'ok and status')
    })
  } finally {
    worker.server.close()
  }
}
