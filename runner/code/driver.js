// forceai-runner: the driver of a JavaScript code context (docs/design/code.md#how-the-interpreter-is-driven).
// Embedded in the runner (runner/code/driver_blob.c) and run as `node -e SOURCE` in a
// confined task. The protocol is driver.py's: one JSON request per line on stdin, one
// JSON message per line on stdout. Cells run in one vm context, so top-level
// declarations (var, let, const, function, class) persist from cell to cell and the
// value of the last expression is the result; a cell using top-level `await` runs as
// an async function (its declarations stay in that cell). SIGINT interrupts a cell.
'use strict'
const vm = require('vm')
const util = require('util')
const fs = require('fs')
const readline = require('readline')

delete process.env.FORCEAI_CODE_DRIVER
const emit = (m) => fs.writeSync(1, JSON.stringify(m) + '\n')
let count = 0

const out = (kind) => (...args) => {
  const s = util.format(...args) + '\n'
  emit({ t: kind, s })
}
const sandbox = {
  console: {
    log: out('out'), info: out('out'), debug: out('out'),
    error: out('err'), warn: out('err'),
  },
  require, process, Buffer, setTimeout, clearTimeout, setInterval, clearInterval,
  setImmediate, clearImmediate, URL, TextEncoder, TextDecoder, fetch: globalThis.fetch,
  structuredClone,
}
sandbox.globalThis = sandbox
const ctx = vm.createContext(sandbox)

function bundle(v) {
  if (v === undefined) return null
  const data = { 'text/plain': util.inspect(v, { depth: 4, colors: false }) }
  if (v !== null && typeof v === 'object') {
    try {
      data['application/json'] = JSON.parse(JSON.stringify(v))
    } catch (e) {}
  }
  return data
}

function error(e) {
  const name = (e && e.name) || 'Error'
  const value = e && e.message !== undefined ? String(e.message) : String(e)
  const tb = e && e.stack ? String(e.stack).split('\n') : [name + ': ' + value]
  emit({ t: 'error', ename: name, evalue: value, traceback: tb })
}

// A cell with top-level await as an async function whose value is the
// cell's last line when that line is an expression.
function asyncForm(code) {
  const lines = code.replace(/\s+$/, '').split('\n')
  const last = lines.pop()
  const tries = [
    '(async () => {\n' + lines.join('\n') + '\nreturn (' + last.replace(/;\s*$/, '') + '\n)\n})()',
    '(async () => {\n' + code + '\n})()',
  ]
  for (const t of tries) {
    try {
      new vm.Script(t)
      return t
    } catch (e) {}
  }
  return tries[1]
}

async function run(req) {
  const saved = {}
  for (const [k, v] of Object.entries(req.env || {})) {
    saved[k] = process.env[k]
    process.env[k] = String(v)
  }
  try {
    let value
    const code = String(req.code || '')
    try {
      if (/\bawait\b/.test(code)) {
        value = await vm.runInContext(asyncForm(code), ctx, { breakOnSigint: true })
      } else {
        value = vm.runInContext(code, ctx, { breakOnSigint: true, filename: 'cell' })
        if (value && typeof value.then === 'function') value = await value
      }
      const data = bundle(value)
      if (data) emit({ t: 'result', main: true, data })
    } catch (e) {
      if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED')
        error({ name: 'KeyboardInterrupt', message: 'interrupted', stack: 'KeyboardInterrupt' })
      else error(e)
    }
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  }
  emit({ t: 'count', n: ++count })
  emit({ t: 'done' })
}

// Between cells SIGINT does nothing (it would end the process).
process.on('SIGINT', () => {})
const queue = []
let busy = false
async function pump() {
  if (busy) return
  busy = true
  while (queue.length) await run(queue.shift())
  busy = false
}
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  try {
    queue.push(JSON.parse(line))
  } catch (e) {
    return
  }
  pump()
})
emit({ t: 'ready', pid: process.pid })
