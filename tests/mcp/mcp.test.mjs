// /mcp driven by the official MCP TypeScript SDK client (StreamableHTTPClientTransport),
// unchanged: every tool, progress while a command runs, cancel, errors, both auth headers,
// a foreign Origin, a task trying /mcp, and a stateless 2026-07-28 exchange by raw HTTP.
// RUNNER_URL, RUNNER_TOKEN and RUNNER_WORK come from run_mcp.py.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const URL_ = process.env.RUNNER_URL + "/mcp";
const TOKEN = process.env.RUNNER_TOKEN;
const WORK = process.env.RUNNER_WORK;

async function connect(headers = { Authorization: `Bearer ${TOKEN}` }) {
  const client = new Client({ name: "forceai-runner-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(URL_), {
    requestInit: { headers },
  });
  await client.connect(transport);
  return { client, transport };
}

async function withClient(fn, headers) {
  const { client, transport } = await connect(headers);
  try {
    return await fn(client, transport);
  } finally {
    await transport.terminateSession().catch(() => {});
    await client.close();
  }
}

const text = (r) => r.content.map((c) => c.text).join("");

test("initialize with a bearer token; the tools are listed with schemas", async () => {
  await withClient(async (client, transport) => {
    assert.match(transport.sessionId, /^[0-9a-f]{32}$/);
    assert.equal(client.getServerVersion().name, "forceai-runner");
    assert.ok(client.getServerCapabilities().tools);
    const { tools } = await client.listTools();
    // The runner's own tools (the stdio servers' are name__tool: tested below).
    const names = tools.map((t) => t.name).filter((n) => !n.includes("__")).sort();
    assert.deepEqual(names, [
      "checkpoint_create", "checkpoint_diff", "checkpoint_restore",
      "edit_file", "grep", "list_directory", "read_file", "run_command", "search_files",
      "write_file",
    ]);
    for (const t of tools.filter((x) => !x.name.includes("__"))) {
      assert.ok(t.description.length > 20, t.name);
      assert.equal(t.inputSchema.type, "object");
    }
    const rc = tools.find((t) => t.name === "run_command");
    assert.deepEqual(rc.inputSchema.required, ["command"]);
    assert.ok(rc.outputSchema.properties.exit_code);
    await client.ping();
  });
});

test("the X-EXECD-ACCESS-TOKEN header works too; no token or a wrong one is refused", async () => {
  await withClient(async (client) => {
    const r = await client.callTool({ name: "run_command", arguments: { command: "true" } });
    assert.equal(r.isError, false);
  }, { "X-EXECD-ACCESS-TOKEN": TOKEN });
  await assert.rejects(connect({}), /401|Unauthorized/i);
  await assert.rejects(connect({ Authorization: "Bearer wrong-token" }), /401|Unauthorized/i);
});

test("run_command: output, exit code, the task user, structured content", async () => {
  await withClient(async (client) => {
    const r = await client.callTool({
      name: "run_command",
      arguments: { command: "echo out; echo err >&2; id -u; pwd", cwd: WORK, env: { X_MCP: "v1" } },
    });
    assert.equal(r.isError, false);
    assert.equal(r.structuredContent.exit_code, 0);
    assert.equal(r.structuredContent.status, "succeeded");
    assert.equal(r.structuredContent.stdout, `out\n1000\n${WORK}\n`);
    assert.equal(r.structuredContent.stderr, "err\n");
    assert.match(text(r), /^exit_code: 0\n/);
    const e = await client.callTool({ name: "run_command", arguments: { command: "echo $X_MCP; exit 3", env: { X_MCP: "v2" } } });
    assert.equal(e.isError, true);
    assert.equal(e.structuredContent.exit_code, 3);
    assert.equal(e.structuredContent.stdout, "v2\n");
    const t = await client.callTool({ name: "run_command", arguments: { command: "sleep 5", timeout_ms: 300 } });
    assert.equal(t.isError, true);
    assert.equal(t.structuredContent.status, "timeout");
    const big = await client.callTool({
      name: "run_command",
      arguments: { command: "echo HEAD; head -c 100000 /dev/zero | tr '\\0' x; echo; echo TAIL" },
    });
    assert.equal(big.structuredContent.truncated, true);
    assert.match(text(big), /bytes of output omitted/);
    assert.match(text(big), /TAIL\n$/);
    assert.ok(text(big).length < 20000);
  });
});

test("progress: output streams as notifications/progress while the command runs", async () => {
  await withClient(async (client) => {
    const seen = [];
    const t0 = Date.now();
    const r = await client.callTool(
      { name: "run_command", arguments: { command: "for i in 1 2 3; do echo line$i; sleep 0.4; done" } },
      undefined,
      { onprogress: (p) => seen.push({ at: Date.now() - t0, ...p }) },
    );
    const took = Date.now() - t0;
    assert.equal(r.isError, false);
    assert.ok(seen.length >= 3, JSON.stringify(seen));
    assert.equal(seen.map((p) => p.message).join(""), "line1\nline2\nline3\n");
    assert.ok(seen[0].at < took - 500, `first progress at ${seen[0].at} ms of ${took}`);
    for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress);
  });
});

test("cancel: aborting the request kills the command's process tree", async () => {
  const pidfile = path.join(WORK, "mcp-cancel.pid");
  fs.rmSync(pidfile, { force: true });
  await withClient(async (client) => {
    const ac = new AbortController();
    const p = client.callTool(
      { name: "run_command", arguments: { command: `sleep 60 & echo $! > ${pidfile}; wait` } },
      undefined,
      { signal: ac.signal, onprogress: () => {} },
    );
    let pid = 0;
    for (let i = 0; i < 100 && !pid; i++) {
      await new Promise((res) => setTimeout(res, 50));
      try { pid = parseInt(fs.readFileSync(pidfile, "utf8"), 10) || 0; } catch {}
    }
    assert.ok(pid > 0, "the command started");
    assert.ok(fs.existsSync(`/proc/${pid}`));
    ac.abort();
    await assert.rejects(p);
    let gone = false;
    for (let i = 0; i < 60 && !gone; i++) {
      await new Promise((res) => setTimeout(res, 100));
      gone = !fs.existsSync(`/proc/${pid}`) || /State:\s+Z/.test(fs.readFileSync(`/proc/${pid}/status`, "utf8"));
    }
    assert.ok(gone, `sleep ${pid} still runs after the cancel`);
    // The session still works after it.
    const r = await client.callTool({ name: "run_command", arguments: { command: "echo after" } });
    assert.equal(r.structuredContent.stdout, "after\n");
  });
});

test("file tools: write, read, edit, list, search, grep", async () => {
  const dir = path.join(WORK, "mcp-files");
  await withClient(async (client) => {
    const call = (name, args) => client.callTool({ name, arguments: args });
    let r = await call("write_file", { path: `${dir}/a/b.txt`, content: "one\ntwo\nthree two\n" });
    assert.equal(r.isError, false, text(r));
    assert.equal(fs.readFileSync(`${dir}/a/b.txt`, "utf8"), "one\ntwo\nthree two\n");
    assert.equal(fs.statSync(`${dir}/a/b.txt`).uid, 1000);
    r = await call("read_file", { path: `${dir}/a/b.txt`, offset: 2, limit: 1 });
    assert.equal(text(r), "two\n[... more lines follow: read on with offset 3 ...]\n");
    r = await call("read_file", { path: `${dir}/a/b.txt` });
    assert.equal(text(r), "one\ntwo\nthree two\n");
    r = await call("edit_file", { path: `${dir}/a/b.txt`, old_string: "two", new_string: "2" });
    assert.equal(r.isError, true);
    assert.match(text(r), /occurs 2 times/);
    r = await call("edit_file", { path: `${dir}/a/b.txt`, old_string: "absent", new_string: "x" });
    assert.equal(r.isError, true);
    assert.match(text(r), /not found/);
    r = await call("edit_file", { path: `${dir}/a/b.txt`, old_string: "one\n", new_string: "ONE\n" });
    assert.equal(r.isError, false, text(r));
    r = await call("edit_file", { path: `${dir}/a/b.txt`, old_string: "two", new_string: "2", replace_all: true });
    assert.match(text(r), /replaced 2 occurrences/);
    assert.equal(fs.readFileSync(`${dir}/a/b.txt`, "utf8"), "ONE\n2\nthree 2\n");
    await call("write_file", { path: `${dir}/c.md`, content: "# title\nneedle here\n" });
    r = await call("list_directory", { path: dir, depth: 2 });
    assert.match(text(r), new RegExp(`directory .* ${dir}/a/\n`));
    assert.match(text(r), new RegExp(`file .* ${dir}/a/b.txt\n`));
    r = await call("search_files", { path: dir, pattern: "*.md" });
    assert.equal(text(r), `${dir}/c.md\n`);
    r = await call("grep", { path: dir, pattern: "needle|^2$" });
    assert.equal(r.isError, false);
    assert.deepEqual(r.structuredContent.matches, [
      { path: `${dir}/a/b.txt`, line: 2, text: "2" },
      { path: `${dir}/c.md`, line: 2, text: "needle here" },
    ]);
    assert.equal(text(r), `${dir}/a/b.txt:2:2\n${dir}/c.md:2:needle here\n`);
    r = await call("grep", { path: dir, pattern: "e", glob: "*.md", max_results: 1 });
    assert.equal(r.structuredContent.matches.length, 1);
    assert.equal(r.structuredContent.truncated, true);
  });
});

test("errors are isError results, never protocol errors", async () => {
  await withClient(async (client) => {
    const call = (name, args) => client.callTool({ name, arguments: args });
    fs.writeFileSync(path.join(WORK, "bin.dat"), Buffer.from([1, 0, 2, 3]));
    const cases = [
      ["read_file", { path: "/nonexistent/x" }, /not found/],
      ["read_file", { path: path.join(WORK, "bin.dat") }, /binary file/],
      ["read_file", { path: "/proc/self/environ" }, /proc/],
      ["read_file", { path: WORK }, /is a directory/],
      ["write_file", { path: "/etc/forceai-mcp-test", content: "x" }, /outside the directories tasks may write/],
      ["read_file", { path: "/root/.bashrc" }, /not permitted|not found/],
      ["grep", { path: WORK, pattern: "(a" }, /invalid regular expression|parenthes/i],
      ["grep", { path: WORK, pattern: "(a)\\1" }, /back-references/],
      ["list_directory", { path: "/nonexistent" }, /not found/],
      ["run_command", {}, /missing argument 'command'/],
      ["edit_file", { path: "relative.txt", old_string: "a", new_string: "b" }, /absolute path/],
    ];
    for (const [name, args, re] of cases) {
      const r = await call(name, args);
      assert.equal(r.isError, true, `${name} ${JSON.stringify(args)}: ${text(r)}`);
      assert.match(text(r), re, `${name} ${JSON.stringify(args)}`);
    }
    assert.equal(fs.existsSync("/etc/forceai-mcp-test"), false);
    await assert.rejects(call("no_such_tool", {}), /Unknown tool|-32602/);
  });
});

test("a foreign Origin gets 403 (DNS rebinding); localhost origins pass", async () => {
  const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "x", version: "1" } } });
  const headers = { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream" };
  let r = await fetch(URL_, { method: "POST", body, headers: { ...headers, Origin: "http://evil.example.com" } });
  assert.equal(r.status, 403);
  const j = await r.json();
  assert.equal(j.jsonrpc, "2.0");
  assert.match(j.error.message, /Origin/);
  r = await fetch(URL_, { method: "POST", body, headers: { ...headers, Origin: "http://localhost:3000" } });
  assert.equal(r.status, 200);
  const sid = r.headers.get("mcp-session-id");
  assert.ok(sid);
  r = await fetch(URL_, { method: "DELETE", headers: { ...headers, "Mcp-Session-Id": sid } });
  assert.equal(r.status, 200);
});

test("a task cannot use /mcp, even with the token", async () => {
  await withClient(async (client) => {
    const port = new URL(URL_).port;
    const r = await client.callTool({
      name: "run_command",
      arguments: {
        command: `curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer ${TOKEN}' -H 'Content-Type: application/json' -H 'Accept: application/json' --data '{"jsonrpc":"2.0","id":1,"method":"ping"}' http://127.0.0.1:${port}/mcp; echo " rc=$?"`,
      },
    });
    const out = r.structuredContent.stdout;
    assert.doesNotMatch(out, /^2\d\d /, out);
    assert.match(out, /^(000|403) rc=/, out);
  });
});

test("stateless 2026-07-28 by raw HTTP: no session, the version on every POST", async () => {
  const headers = {
    Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json",
    Accept: "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
  };
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": { name: "raw", version: "1" }, "io.modelcontextprotocol/clientCapabilities": {} };
  const post = (msg) => fetch(URL_, { method: "POST", headers, body: JSON.stringify(msg) });
  let r = await post({ jsonrpc: "2.0", id: "d1", method: "server/discover", params: { _meta: meta } });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get("mcp-session-id"), null);
  let j = await r.json();
  assert.equal(j.result.resultType, "complete");
  assert.ok(j.result.supportedVersions.includes("2026-07-28"));
  r = await post({ jsonrpc: "2.0", id: 2, method: "tools/list", params: { _meta: meta } });
  j = await r.json();
  assert.equal(j.result.tools.filter((t) => !t.name.includes("__")).length, 10); // the runner's own tools (checkpoint_* included)
  r = await fetch(URL_, {
    method: "POST", headers: { ...headers, Accept: "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "run_command", arguments: { command: "echo stateless" }, _meta: meta } }),
  });
  assert.equal(r.headers.get("content-type"), "application/json");
  j = await r.json();
  assert.equal(j.id, 3);
  assert.equal(j.result.structuredContent.stdout, "stateless\n");
  assert.equal(j.result.resultType, "complete");
  // A version in _meta that the header does not say, and a GET stream: refused.
  r = await post({ jsonrpc: "2.0", id: 4, method: "tools/list", params: { _meta: { ...meta, "io.modelcontextprotocol/protocolVersion": "2025-11-25" } } });
  assert.equal(r.status, 400);
  r = await fetch(URL_, { method: "GET", headers });
  assert.equal(r.status, 405);
  // Without a session or a stateless version header: refused with a JSON-RPC error.
  r = await fetch(URL_, { method: "POST", headers: { ...headers, "MCP-Protocol-Version": "2025-11-25" }, body: JSON.stringify({ jsonrpc: "2.0", id: 5, method: "tools/list" }) });
  assert.equal(r.status, 400);
  assert.match((await r.json()).error.message, /Mcp-Session-Id/);
});

// ---- the image's own stdio MCP servers behind /mcp (--mcp-servers, run_mcp.py) ----

const FS_ROOT = process.env.FS_ROOT;
const servers = async () =>
  (await (await fetch(process.env.RUNNER_URL + "/v1/mcp/servers", { headers: { "X-EXECD-ACCESS-TOKEN": TOKEN } })).json()).servers;

test("a real stdio server from npm behind /mcp: its tools as fs__*, run as the task user", async () => {
  await withClient(async (client) => {
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const n of ["run_command", "fs__read_text_file", "fs__write_file", "fs__list_directory", "hostile__echo"])
      assert.ok(names.includes(n), `${n} in ${names}`);
    let r = await client.callTool({ name: "fs__write_file", arguments: { path: `${FS_ROOT}/via-fs.txt`, content: "written by the fs server\n" } });
    assert.notEqual(r.isError, true, JSON.stringify(r));
    assert.equal(fs.readFileSync(`${FS_ROOT}/via-fs.txt`, "utf8"), "written by the fs server\n");
    assert.equal(fs.statSync(`${FS_ROOT}/via-fs.txt`).uid, 1000); // the confined task identity
    r = await client.callTool({ name: "fs__read_text_file", arguments: { path: `${FS_ROOT}/via-fs.txt` } });
    assert.equal(text(r), "written by the fs server\n");
    r = await client.callTool({ name: "fs__read_text_file", arguments: { path: "/etc/hostname" } });
    assert.equal(r.isError, true); // outside its allowed directory: the server's own rule
    r = await client.callTool({ name: "hostile__whoami", arguments: {} });
    assert.match(text(r), /^1000 \d+$/);
    const s = await servers();
    assert.deepEqual(s.map((x) => [x.name, x.state]), [["fs", "ready"], ["hostile", "ready"]]);
  });
});

test("a server that crashes is reported, announced, and restarted on next use", async () => {
  await withClient(async (client) => {
    const { ToolListChangedNotificationSchema } = await import("@modelcontextprotocol/sdk/types.js");
    let changed = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed++; });
    await client.listTools();
    const before = (await servers()).find((x) => x.name === "hostile");
    let r = await client.callTool({ name: "hostile__crash", arguments: {} });
    assert.equal(r.isError, true);
    assert.match(text(r), /exited/);
    let s = (await servers()).find((x) => x.name === "hostile");
    assert.equal(s.state, "failed");
    assert.equal(s.exits, before.exits + 1);
    assert.match(s.last_error, /exit code 3/);
    r = await client.callTool({ name: "hostile__echo", arguments: { text: "back" } });
    assert.equal(text(r), "back");
    s = (await servers()).find((x) => x.name === "hostile");
    assert.equal(s.state, "ready");
    assert.equal(s.starts, before.starts + 1);
    for (let i = 0; i < 40 && changed < 2; i++) await new Promise((res) => setTimeout(res, 50));
    assert.ok(changed >= 2, `tools/list_changed seen ${changed} times (gone, then back)`);
  });
});

test("a server that floods is killed; one that stalls can be cancelled; the runner stays responsive", async () => {
  await withClient(async (client) => {
    const t0 = Date.now();
    let r = await client.callTool({ name: "hostile__flood", arguments: {} });
    assert.equal(r.isError, true);
    assert.match(text(r), /flooded/);
    assert.ok(Date.now() - t0 < 20000);
    const ping0 = Date.now();
    await client.ping();
    assert.ok(Date.now() - ping0 < 1000);
    const ac = new AbortController();
    const p = client.callTool({ name: "hostile__stall", arguments: {} }, undefined, { signal: ac.signal });
    setTimeout(() => ac.abort(), 300);
    await assert.rejects(p);
    r = await client.callTool({ name: "hostile__echo", arguments: { text: "still here" } });
    assert.equal(text(r), "still here");
  });
});
