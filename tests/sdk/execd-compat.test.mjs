// Drives forceai-runner through OpenSandbox's own JavaScript SDK, unchanged, to check that the
// runner is wire-compatible with execd (DESIGN.md §5a).
//
//   RUNNER_URL    base URL of a running runner, e.g. http://127.0.0.1:18080 (required)
//   RUNNER_TOKEN  value sent as X-EXECD-ACCESS-TOKEN (optional; omit if the runner has no token)
//
// Run: tests/sdk/run.sh   (or: node --test tests/sdk/)

import { test } from "node:test";
import assert from "node:assert/strict";

import { ConnectionConfig, createDefaultAdapterFactory } from "@alibaba-group/opensandbox";

const RUNNER_URL = (process.env.RUNNER_URL ?? "").replace(/\/+$/, "");
const RUNNER_TOKEN = process.env.RUNNER_TOKEN ?? "";

const ID_RE = /^[0-9a-f]{32}$/;
const PER_TEST_TIMEOUT_MS = 30_000;

function execdStack() {
  if (!RUNNER_URL) {
    throw new Error("RUNNER_URL is not set (e.g. RUNNER_URL=http://127.0.0.1:18080)");
  }
  const url = new URL(RUNNER_URL);
  const connectionConfig = new ConnectionConfig({
    domain: url.host,
    protocol: url.protocol === "https:" ? "https" : "http",
    disableMetrics: true,
  });
  // The SDK gets execd's headers (the access token) from the lifecycle server's endpoint
  // answer and hands them over as endpointHeaders; we supply them the same way.
  const endpointHeaders = RUNNER_TOKEN ? { "X-EXECD-ACCESS-TOKEN": RUNNER_TOKEN } : {};
  return createDefaultAdapterFactory().createExecdStack({
    connectionConfig,
    execdBaseUrl: RUNNER_URL,
    endpointHeaders,
  });
}

const texts = (msgs) => msgs.map((m) => m.text);
// What the command printed and how it ended, for assertion messages.
const diag = (exec) =>
  JSON.stringify({ stdout: texts(exec.logs.stdout), stderr: texts(exec.logs.stderr), error: exec.error ?? null });
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitUntilFinished(commands, id, deadlineMs) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const status = await commands.getCommandStatus(id);
    if (status.running === false) return status;
    if (Date.now() > deadline) {
      assert.fail(`command ${id} still running after ${deadlineMs} ms: ${JSON.stringify(status)}`);
    }
    await sleep(100);
  }
}

test("run `echo hello`: one stdout line, no stderr, exit code 0", { timeout: PER_TEST_TIMEOUT_MS }, async () => {
  const { commands } = execdStack();
  const exec = await commands.run("echo hello", { workingDirectory: "/tmp" });

  assert.match(exec.id ?? "", ID_RE, "init event carries a 32-hex command id");
  assert.deepEqual(texts(exec.logs.stdout), ["hello"], diag(exec));
  assert.deepEqual(texts(exec.logs.stderr), []);
  assert.equal(exec.error, undefined);
  assert.ok(exec.complete, "execution_complete event received");
  assert.equal(typeof exec.complete.executionTimeMs, "number");
  assert.equal(exec.exitCode, 0);
});

test("run `exit 7`: error event, exit code 7", { timeout: PER_TEST_TIMEOUT_MS }, async () => {
  const { commands } = execdStack();
  const exec = await commands.run("echo out; echo err >&2; exit 7", { workingDirectory: "/tmp" });

  assert.deepEqual(texts(exec.logs.stdout), ["out"], diag(exec));
  assert.deepEqual(texts(exec.logs.stderr), ["err"]);
  assert.ok(exec.error, "error event received");
  assert.equal(exec.error.name, "CommandExecError");
  assert.equal(exec.error.value, "7");
  assert.equal(exec.exitCode, 7);

  const status = await commands.getCommandStatus(exec.id);
  assert.equal(status.id, exec.id);
  assert.equal(status.running, false);
  assert.equal(status.exitCode, 7);
});

test("background run: status running→finished, logs contain the output", { timeout: PER_TEST_TIMEOUT_MS }, async () => {
  const { commands } = execdStack();
  const started = Date.now();
  // execd itself keeps the stream open ~1 s after the last event, so leave room for that.
  const exec = await commands.run("sleep 2; echo done", { background: true, workingDirectory: "/tmp" });
  const elapsed = Date.now() - started;
  assert.ok(elapsed < 1_900, `a background run returns before the command finishes (took ${elapsed} ms)`);
  assert.match(exec.id ?? "", ID_RE);
  assert.ok(exec.complete, "background run ends its stream with execution_complete");
  assert.equal(exec.error, undefined);
  assert.deepEqual(texts(exec.logs.stdout), []);

  const running = await commands.getCommandStatus(exec.id);
  assert.equal(running.id, exec.id);
  assert.equal(running.running, true, `still running: ${JSON.stringify(running)}`);
  assert.equal(running.exitCode, null);
  assert.equal(running.content, "sleep 2; echo done");
  assert.ok(running.startedAt instanceof Date && !Number.isNaN(running.startedAt.getTime()));
  assert.equal(running.finishedAt, null);

  const finished = await waitUntilFinished(commands, exec.id, 10_000);
  assert.equal(finished.running, false);
  assert.equal(finished.exitCode, 0);
  assert.ok(finished.finishedAt instanceof Date, "finished_at is set once finished");
  assert.ok(finished.finishedAt.getTime() >= finished.startedAt.getTime());

  const logs = await commands.getBackgroundCommandLogs(exec.id);
  assert.equal(logs.content, "done\n");
  assert.equal(logs.cursor, 5, "EXECD-COMMANDS-TAIL-CURSOR is the byte offset of the end");

  const tail = await commands.getBackgroundCommandLogs(exec.id, logs.cursor);
  assert.equal(tail.content, "");
  assert.equal(tail.cursor, 5);

  const part = await commands.getBackgroundCommandLogs(exec.id, 2);
  assert.equal(part.content, "ne\n");
  assert.equal(part.cursor, 5);
});

test("interrupt a running `sleep 30`: the run ends promptly and is not running", { timeout: PER_TEST_TIMEOUT_MS }, async () => {
  const { commands } = execdStack();
  let resolveId;
  const idSeen = new Promise((resolve) => { resolveId = resolve; });
  const started = Date.now();
  const runPromise = commands.run("sleep 30", { workingDirectory: "/tmp" }, {
    onInit: (init) => resolveId(init.id),
  });
  const id = await Promise.race([
    idSeen,
    runPromise.then(() => { throw new Error("run finished before it was interrupted"); }),
  ]);
  assert.match(id, ID_RE);

  const before = await commands.getCommandStatus(id);
  assert.equal(before.running, true, `still running before the interrupt: ${JSON.stringify(before)}`);

  await commands.interrupt(id);
  const exec = await runPromise;
  const elapsed = Date.now() - started;
  assert.ok(elapsed < 5_000, `interrupted run ended after ${elapsed} ms`);

  assert.ok(exec.error, "an interrupted command ends with an error event");
  assert.equal(exec.error.name, "CommandExecError");
  assert.equal(typeof exec.exitCode, "number", `numeric exit code (evalue=${exec.error.value})`);
  assert.notEqual(exec.exitCode, 0);

  const after = await commands.getCommandStatus(id);
  assert.equal(after.running, false);
  assert.equal(after.exitCode, exec.exitCode);
  assert.ok(after.finishedAt instanceof Date);
});

test("env injection: envs {FOO: bar} → `echo $FOO` prints bar", { timeout: PER_TEST_TIMEOUT_MS }, async () => {
  const { commands } = execdStack();
  const exec = await commands.run("echo $FOO", { workingDirectory: "/tmp", envs: { FOO: "bar" } });
  assert.deepEqual(texts(exec.logs.stdout), ["bar"], diag(exec));
  assert.deepEqual(texts(exec.logs.stderr), []);
  assert.equal(exec.exitCode, 0);
});

test("bash session keeps cwd and exported variables between runs", { timeout: PER_TEST_TIMEOUT_MS }, async () => {
  const { commands } = execdStack();
  const sessionId = await commands.createSession();
  assert.equal(typeof sessionId, "string");
  assert.ok(sessionId.length > 0);
  try {
    const first = await commands.runInSession(sessionId, "cd /tmp && export X=42");
    assert.equal(first.error, undefined, diag(first));
    assert.equal(first.exitCode, 0);
    assert.deepEqual(texts(first.logs.stdout), []);

    const second = await commands.runInSession(sessionId, "pwd; echo $X");
    assert.deepEqual(texts(second.logs.stdout), ["/tmp", "42"], diag(second));
    assert.equal(second.exitCode, 0);

    const third = await commands.runInSession(sessionId, "exit 3");
    assert.equal(third.exitCode, 3);
  } finally {
    await commands.deleteSession(sessionId);
  }
  await assert.rejects(commands.deleteSession(sessionId), (err) => {
    assert.equal(err.statusCode, 404);
    assert.equal(err.error?.code, "CONTEXT_NOT_FOUND");
    return true;
  });
});

test("unknown command id: status is a 404 with a JSON error", { timeout: PER_TEST_TIMEOUT_MS }, async () => {
  const { commands } = execdStack();
  await assert.rejects(commands.getCommandStatus("0123456789abcdef0123456789abcdef"), (err) => {
    assert.equal(err.statusCode, 404);
    assert.equal(typeof err.error?.code, "string");
    assert.notEqual(err.error.code, "UNEXPECTED_RESPONSE", "error body is {code, message}");
    return true;
  });
});

test("ping answers", { timeout: PER_TEST_TIMEOUT_MS }, async () => {
  const { health } = execdStack();
  assert.equal(await health.ping(), true);
});
