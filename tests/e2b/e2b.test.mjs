// E2B's own SDK (npm `e2b`, pinned in package-lock.json) in debug mode against a forceai-runner
// started with --envd-listen (tests/e2b/run_e2b.py): the SDK reaches envd at localhost:49983, or
// at E2B_SANDBOX_URL when the port differs. Every sandbox.commands, .files and .pty call below
// goes through the runner's envd face unchanged.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { Sandbox, CommandExitError } from 'e2b'

const sbx = await Sandbox.create({ debug: true })
const RUNNER = process.env.RUNNER_URL
const WORK = process.env.E2B_TEST_DIR

test('a foreground command: stdout, stderr, exit code', async () => {
  const r = await sbx.commands.run('echo hello; echo oops >&2')
  assert.equal(r.exitCode, 0)
  assert.equal(r.stdout, 'hello\n')
  assert.equal(r.stderr, 'oops\n')
  await assert.rejects(sbx.commands.run('exit 7'), (e) => e instanceof CommandExitError && e.exitCode === 7)
})

test('it runs confined as the task user, never root', async () => {
  const r = await sbx.commands.run('id -u')
  assert.equal(r.stdout.trim(), '1000')
  await assert.rejects(sbx.commands.run('id', { user: 'root' }), /root.*refused|refused.*root/i)
})

test('streaming callbacks arrive as the command writes', async () => {
  const seen = []
  const t0 = Date.now()
  await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.4; done', {
    onStdout: (d) => seen.push([d, Date.now() - t0]),
  })
  assert.deepEqual(seen.map((s) => s[0]).join(''), '1\n2\n3\n')
  assert.ok(seen.length >= 2, 'several chunks')
  assert.ok(seen[seen.length - 1][1] - seen[0][1] >= 500, 'spread over time, not at the end')
})

test('envs and cwd', async () => {
  const r = await sbx.commands.run('echo $FOO; pwd', { envs: { FOO: 'bar baz' }, cwd: WORK })
  assert.equal(r.stdout, `bar baz\n${WORK}\n`)
  await assert.rejects(sbx.commands.run('true', { cwd: '/no/such/dir' }), /does not exist/)
})

test('stdin: send then close', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(h.pid, 'line one\n')
  await sbx.commands.sendStdin(h.pid, new Uint8Array([0x61, 0x62, 0x0a]))
  await sbx.commands.closeStdin(h.pid)
  const r = await h.wait()
  assert.equal(r.stdout, 'line one\nab\n')
})

test('background, list, connect by pid, kill', async () => {
  const h = await sbx.commands.run('echo started; sleep 30', { background: true })
  const list = await sbx.commands.list()
  const mine = list.find((p) => p.pid === h.pid)
  assert.ok(mine, 'listed')
  assert.equal(mine.cmd, '/bin/bash')
  const out = []
  const c = await sbx.commands.connect(h.pid, { onStdout: (d) => out.push(d) })
  assert.equal(c.pid, h.pid)
  assert.equal(await sbx.commands.kill(h.pid), true)
  await assert.rejects(c.wait(), (e) => e instanceof CommandExitError)
  assert.equal(await sbx.commands.kill(999999), false)
  if (RUNNER) {
    const tasks = await (await fetch(`${RUNNER}/v1/tasks`)).json()
    assert.ok(tasks.tasks.some((t) => t.pid === h.pid && t.kind === 'envd_process'), 'in /v1/tasks')
  }
})

test('what a command leaves running with & outlives it, listed and stoppable', async () => {
  const t0 = Date.now()
  const r = await sbx.commands.run('sleep 60 >/dev/null 2>&1 & echo $!')
  assert.ok(Date.now() - t0 < 5000, 'the command ends when its main process does')
  const pid = r.stdout.trim()
  assert.equal((await sbx.commands.run(`kill -0 ${pid} && echo alive`)).stdout, 'alive\n')
  if (RUNNER) {
    const tasks = await (await fetch(`${RUNNER}/v1/tasks`)).json()
    const t = tasks.tasks.find((x) => x.kind === 'envd_process' && x.left_behind)
    assert.ok(t, 'listed with its left-behind processes')
    assert.equal((await fetch(`${RUNNER}/v1/tasks/${t.id}`, { method: 'DELETE' })).status, 202)
    let gone = false
    for (let i = 0; i < 50 && !gone; i++) {
      gone = (await sbx.commands.run(`kill -0 ${pid} 2>/dev/null && echo alive || echo gone`)).stdout === 'gone\n'
      if (!gone) await new Promise((res) => setTimeout(res, 100))
    }
    assert.ok(gone, 'stopped by DELETE /v1/tasks/{id}')
  }
})

test('timeoutMs ends a command that runs too long', async () => {
  const t0 = Date.now()
  await assert.rejects(sbx.commands.run('sleep 20', { timeoutMs: 1000 }))
  assert.ok(Date.now() - t0 < 8000)
})

test('text and binary files, info, rename, makeDir, list, remove', async () => {
  const p = `${WORK}/dir/a.txt`
  const w = await sbx.files.write(p, 'hello files')
  assert.equal(w.path, p)
  assert.equal(await sbx.files.read(p), 'hello files')
  const bin = new Uint8Array(256).map((_, i) => i)
  await sbx.files.write(`${WORK}/b.bin`, bin)
  const back = await sbx.files.read(`${WORK}/b.bin`, { format: 'bytes' })
  assert.deepEqual(Buffer.from(back), Buffer.from(bin))
  const info = await sbx.files.getInfo(p)
  assert.equal(info.type, 'file')
  assert.equal(info.size, 11)
  assert.equal(info.name, 'a.txt')
  const moved = await sbx.files.rename(p, `${WORK}/dir/c.txt`)
  assert.equal(moved.path, `${WORK}/dir/c.txt`)
  assert.equal(await sbx.files.exists(p), false)
  assert.equal(await sbx.files.makeDir(`${WORK}/made/deep`), true)
  assert.equal(await sbx.files.makeDir(`${WORK}/made/deep`), false)
  const entries = await sbx.files.list(WORK)
  assert.deepEqual(entries.map((e) => e.name).sort(), ['b.bin', 'dir', 'made'])
  const deep = await sbx.files.list(WORK, { depth: 3 })
  assert.ok(deep.some((e) => e.path === `${WORK}/made/deep` && e.type === 'dir'))
  await sbx.files.remove(`${WORK}/made`)
  assert.equal(await sbx.files.exists(`${WORK}/made`), false)
  const many = await sbx.files.write([
    { path: `${WORK}/m1.txt`, data: 'one' },
    { path: `${WORK}/m2.txt`, data: 'two' },
  ])
  assert.equal(many.length, 2)
  assert.equal(await sbx.files.read(`${WORK}/m2.txt`), 'two')
})

test('a refused read and a missing file', async () => {
  await assert.rejects(sbx.files.read('/etc/shadow'), /permission|denied/i)
  await assert.rejects(sbx.files.read(`${WORK}/missing.txt`), (e) => /NotFound/.test(e.name))
  await assert.rejects(sbx.files.write('/etc/forceai-envd-test', 'x'), /writable roots|denied|permission/i)
})

test('gzip uploads ({ gzip: true }): text, binary, several files, a stream; read back', async () => {
  const t = `${WORK}/gz/a.txt`
  const w = await sbx.files.write(t, 'hello gzip '.repeat(1000), { gzip: true })
  assert.equal(w.path, t)
  assert.equal(await sbx.files.read(t), 'hello gzip '.repeat(1000))
  const bin = new Uint8Array(300000)
  for (let i = 0, x = 12345; i < bin.length; i++) bin[i] = (x = (x * 1103515245 + 12345) >>> 0) >>> 24
  await sbx.files.write(`${WORK}/gz/b.bin`, bin, { gzip: true })
  const back = await sbx.files.read(`${WORK}/gz/b.bin`, { format: 'bytes' })
  assert.deepEqual(Buffer.from(back), Buffer.from(bin))
  assert.equal((await sbx.files.getInfo(`${WORK}/gz/b.bin`)).size, bin.length)
  // Accept-Encoding: gzip on the read: identity is a valid answer, the SDK takes it as is
  const again = await sbx.files.read(`${WORK}/gz/b.bin`, { format: 'bytes', gzip: true })
  assert.deepEqual(Buffer.from(again), Buffer.from(bin))
  const many = await sbx.files.write([
    { path: `${WORK}/gz/m1.txt`, data: 'one' },
    { path: `${WORK}/gz/m2.bin`, data: bin.slice(0, 1000) },
  ], { gzip: true })
  assert.equal(many.length, 2)
  assert.equal(await sbx.files.read(`${WORK}/gz/m1.txt`), 'one')
  const s = new Blob(['streamed ', 'and ', 'gzipped']).stream()
  await sbx.files.write(`${WORK}/gz/s.txt`, s, { gzip: true })
  assert.equal(await sbx.files.read(`${WORK}/gz/s.txt`), 'streamed and gzipped')
  await sbx.files.remove(`${WORK}/gz`)
})

test('watchDir sees a file written', async () => {
  const events = []
  const h = await sbx.files.watchDir(WORK, (e) => events.push(e))
  await sbx.files.write(`${WORK}/watched.txt`, 'w')
  const until = Date.now() + 5000
  while (!events.some((e) => e.name === 'watched.txt') && Date.now() < until)
    await new Promise((r) => setTimeout(r, 100))
  await h.stop()
  assert.ok(events.some((e) => e.name === 'watched.txt'), JSON.stringify(events))
})

test('a PTY: input, output, resize, exit', async () => {
  let out = ''
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (out += Buffer.from(d).toString()) })
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size; echo pty-$((40+2))\nexit\n'))
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
  assert.match(out, /30 100/)
  assert.match(out, /pty-42/)
})
