// E2B's own code-interpreter client (@e2b/code-interpreter, pinned in package-lock.json) in
// debug mode, which talks to http://localhost:49999 - here a forceai-runner started with
// --code-interpreter-listen 127.0.0.1:49999 (tests/code/run_code.py).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox } from '@e2b/code-interpreter'

const sbx = await Sandbox.create({ debug: true })

test('state across cells and the main result', async () => {
  await sbx.runCode('x = 41')
  const ex = await sbx.runCode('x + 1')
  assert.equal(ex.text, '42')
  assert.equal(ex.results.length, 1)
  assert.equal(ex.results[0].isMainResult, true)
  assert.ok(ex.executionCount >= 2)
  assert.equal(ex.error, undefined)
})

test('a PNG chart from matplotlib', async () => {
  const ex = await sbx.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 4])\nplt.title("t")\nplt.show()'
  )
  const charts = ex.results.filter((r) => r.png)
  assert.equal(charts.length, 1)
  assert.ok(charts[0].formats().includes('png'))
  assert.equal(Buffer.from(charts[0].png, 'base64').subarray(1, 4).toString(), 'PNG')
})

test('a DataFrame as HTML', async () => {
  const ex = await sbx.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2]})')
  assert.match(ex.results[0].html, /<table/)
})

test('streaming callbacks', async () => {
  const seen = []
  const t0 = Date.now()
  const ex = await sbx.runCode(
    'import sys, time\nfor i in range(3):\n    print(i)\n    time.sleep(0.2)\nprint("e", file=sys.stderr)',
    {
      onStdout: (m) => seen.push(['out', m.line, Date.now() - t0]),
      onStderr: (m) => seen.push(['err', m.line, Date.now() - t0]),
      onResult: (r) => seen.push(['result', r.text]),
    }
  )
  const outs = seen.filter((s) => s[0] === 'out')
  assert.deepEqual(outs.map((s) => s[1]), ['0\n', '1\n', '2\n'])
  // Live: the first line came well before the cell ended (~600 ms).
  assert.ok(outs[0][2] < outs[2][2] - 250, JSON.stringify(seen))
  assert.deepEqual(ex.logs.stderr, ['e\n'])
})

test('an error', async () => {
  const errors = []
  const ex = await sbx.runCode('raise ValueError("nope")', { onError: (e) => errors.push(e) })
  assert.equal(ex.error.name, 'ValueError')
  assert.equal(ex.error.value, 'nope')
  assert.match(ex.error.traceback, /ValueError/)
  assert.equal(errors.length, 1)
  const again = await sbx.runCode('x')
  assert.equal(again.text, '41')
})

test('an interrupt by timeout keeps the context', async () => {
  const ctx = await sbx.createCodeContext({ language: 'python' })
  await sbx.runCode('kept = "yes"', { context: ctx })
  await assert.rejects(
    sbx.runCode('import time\ntime.sleep(30)', { context: ctx, timeoutMs: 1000 }),
    /timed out|Timeout/i
  )
  // The runner interrupts the execution when the client goes away, and the next one on the
  // context is taken at once (run after it): no retry, no 409 (docs/design.md §11.6).
  const t0 = Date.now()
  const ex = await sbx.runCode('kept', { context: ctx })
  assert.equal(ex.text, "'yes'")
  assert.equal(ex.error, undefined)
  assert.ok(Date.now() - t0 < 10000, `took ${Date.now() - t0} ms`)
  await sbx.removeCodeContext(ctx)
})

test('contexts created, listed, restarted, removed', async () => {
  const ctx = await sbx.createCodeContext({ language: 'python', cwd: '/tmp' })
  assert.equal(ctx.language, 'python')
  assert.equal(ctx.cwd, '/tmp')
  await sbx.runCode('v = 1', { context: ctx })
  assert.equal((await sbx.runCode('import os\nos.getcwd()', { context: ctx })).text, "'/tmp'")
  const list = await sbx.listCodeContexts()
  assert.ok(list.some((c) => c.id === ctx.id))
  await sbx.restartCodeContext(ctx)
  const ex = await sbx.runCode('v', { context: ctx })
  assert.equal(ex.error.name, 'NameError')
  await sbx.removeCodeContext(ctx.id)
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  await assert.rejects(sbx.removeCodeContext(ctx.id))
})

test('per-execution environment variables', async () => {
  const ex = await sbx.runCode('import os\nos.environ["E2B_TEST_VAR"]', {
    envs: { E2B_TEST_VAR: 'value-1' },
  })
  assert.equal(ex.text, "'value-1'")
  const after = await sbx.runCode('import os\nrepr(os.environ.get("E2B_TEST_VAR"))')
  assert.equal(after.text, '"None"'.replace(/"/g, "'"))
})

test('an unknown language is refused', async () => {
  await assert.rejects(sbx.runCode('1', { language: 'java' }))
})
