// Runs suites against a quintet server through the real hyper-connect client.
//
//   HYPER_CONNECT_DIR=<dir from ./install> QUINTET_CS=<connection string> QUINTET_FORM=domain|app \
//     node run.mjs suites/info.mjs suites/lifecycle.mjs ...
//
// QUINTET_CS is `http://[key:secret@]host:port` for the domain form (each suite gets its own
// instance name as the path) or `cloud://key:secret@host:port/<app>` for the application form
// (each suite gets its own instance name as hyper-connect's second argument). A suite is a
// module whose default export is `async (hyper, t) => {...}`; see suites/lifecycle.mjs.
// Prints one `ok -`/`not ok -` line per check and a closing `N passed, N failed` line;
// exits non-zero when a check failed.
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import { basename } from 'node:path'
import { isDeepStrictEqual, inspect } from 'node:util'

const { HYPER_CONNECT_DIR: dir, QUINTET_CS: cs, QUINTET_FORM: form } = process.env
if (!dir || !cs || !['domain', 'app'].includes(form)) {
  console.error('set HYPER_CONNECT_DIR, QUINTET_CS and QUINTET_FORM (domain or app)')
  process.exit(2)
}
const { connect } = createRequire(`${dir}/package.json`)('hyper-connect')

let passed = 0
let failed = 0
const run = Date.now().toString(36)

for (const file of process.argv.slice(2)) {
  const suite = basename(file, '.mjs')
  // Instance names: a-z, 0-9, '_' and '-'; one per suite and run, so suites never collide.
  const name = `hc-${suite}-${run}`.toLowerCase().replace(/[^a-z0-9_-]/g, '-')
  const hyper = form === 'app' ? connect(cs, name) : connect(`${cs.replace(/\/+$/, '')}/${name}`)
  const t = {
    form,
    name,
    eq (actual, expected, what = 'value') {
      if (!isDeepStrictEqual(actual, expected)) {
        throw new Error(`${what}: expected ${inspect(expected, { depth: 6 })}, got ${inspect(actual, { depth: 6 })}`)
      }
    },
    async check (title, fn) {
      try {
        await fn()
        passed++
        console.log(`ok - ${suite}: ${title}`)
      } catch (e) {
        failed++
        const why = e instanceof Error ? e.stack : inspect(e, { depth: 6 })
        console.log(`not ok - ${suite}: ${title}: ${why}`)
      }
    }
  }
  try {
    const mod = await import(pathToFileURL(file).href)
    await mod.default(hyper, t)
  } catch (e) {
    failed++
    console.log(`not ok - ${suite}: the suite itself failed: ${e instanceof Error ? e.stack : inspect(e)}`)
  }
}
console.log(`${passed} passed, ${failed} failed`)
process.exit(failed === 0 && passed > 0 ? 0 : 1)
