// A short end-to-end run of a client generated from quintet's OpenAPI document:
// `run` generates `schema.d.ts` with openapi-typescript from the live server's
// /_openapi.json, type-checks this file against it (tsc --strict), and runs it with
// openapi-fetch against the same server. Every call is typed by the document: a
// parameter, body or answer field the document lacks is a compile error.
import createClient from 'openapi-fetch'
import type { paths } from './schema.js'

// The one Node global used, declared here so no @types/node is needed.
declare const process: { env: Record<string, string | undefined>, exit: (code: number) => never }

const { QUINTET_URL: baseUrl, QUINTET_APP: app, QUINTET_APP_TOKEN: token } = process.env
if (!baseUrl || !app || !token) {
  console.error('set QUINTET_URL, QUINTET_APP and QUINTET_APP_TOKEN')
  process.exit(2)
}

const domain = createClient<paths>({ baseUrl })
const appClient = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } })
const name = `oa-${Date.now().toString(36)}`
let passed = 0

function check (what: string, ok: boolean, detail?: unknown): void {
  if (!ok) {
    console.log(`not ok - ${what}: ${JSON.stringify(detail)}`)
    process.exit(1)
  }
  passed++
  console.log(`ok - ${what}`)
}

// The server's own route.
const info = await domain.GET('/')
check('GET / names the services', info.data?.services.includes('data') === true, info.error)

// The domain form: a data instance, a document, a query.
const created = await domain.PUT('/data/{instance}', { params: { path: { instance: name } } })
check('PUT /data/{instance} is 201', created.response.status === 201, created.error)
const added = await domain.POST('/data/{instance}', {
  params: { path: { instance: name } },
  body: { _id: 'alien', title: 'Alien', year: 1979 }
})
check('POST /data/{instance} answers the id', added.data?.id === 'alien', added.error)
const got = await domain.GET('/data/{instance}/{id}', { params: { path: { instance: name, id: 'alien' } } })
const doc = got.data && 'doc' in got.data ? (got.data.doc as { title?: string }) : undefined
check('GET /data/{instance}/{id} answers the document', doc?.title === 'Alien', got.error)
const found = await domain.POST('/data/{instance}/_query', {
  params: { path: { instance: name } },
  body: { selector: { year: { $gte: 1970 } }, execution_stats: true }
})
check('POST _query finds it', found.data?.docs.length === 1 && found.data.execution_stats !== undefined, found.error)
const missing = await domain.GET('/data/{instance}/{id}', { params: { path: { instance: name, id: 'nope' } } })
check('a missing document is the error body', missing.response.status === 404 && missing.error?.ok === false && missing.error.status === 404 && typeof missing.error.msg === 'string', missing.error)

// The application form: a cache instance with the application's token.
const cache = await appClient.PUT('/{app}/cache/{instance}', { params: { path: { app, instance: name } } })
check('PUT /{app}/cache/{instance} is 201', cache.response.status === 201, cache.error)
const put = await appClient.POST('/{app}/cache/{instance}', {
  params: { path: { app, instance: name } },
  body: { key: 'user-1', value: { name: 'Ada' }, ttl: '1h' }
})
check('POST /{app}/cache/{instance} stores', put.response.status === 201, put.error)
const listed = await appClient.GET('/{app}/cache/{instance}/_query', {
  params: { path: { app, instance: name }, query: { pattern: 'user-*' } }
})
check('GET _query?pattern lists it', listed.data?.docs[0]?.key === 'user-1', listed.error)
const denied = await domain.GET('/{app}/cache/{instance}/_query', { params: { path: { app, instance: name } } })
check('without the token the application form is 401', denied.response.status === 401 && denied.error?.ok === false, denied.error)

await domain.DELETE('/data/{instance}', { params: { path: { instance: name } } })
await appClient.DELETE('/{app}/cache/{instance}', { params: { path: { app, instance: name } } })
console.log(`${passed} passed, 0 failed`)
