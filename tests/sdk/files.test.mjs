// The files API (docs/design.md §3.4) through OpenSandbox's own JavaScript SDK (`sandbox.files`),
// unchanged: the same connection setup as execd-compat.test.mjs.
//
//   RUNNER_URL    base URL of a running runner, e.g. http://127.0.0.1:18080 (required)
//   RUNNER_TOKEN  value sent as X-EXECD-ACCESS-TOKEN (optional)
//
// The runner acts as its task user (uid 1000 by default): everything happens under a fresh
// directory in /tmp, which that user may write.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";

import { ConnectionConfig, createDefaultAdapterFactory, SandboxApiException } from "@alibaba-group/opensandbox";

const RUNNER_URL = (process.env.RUNNER_URL ?? "").replace(/\/+$/, "");
const RUNNER_TOKEN = process.env.RUNNER_TOKEN ?? "";
const T = { timeout: 60_000 };

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
  const endpointHeaders = RUNNER_TOKEN ? { "X-EXECD-ACCESS-TOKEN": RUNNER_TOKEN } : {};
  return createDefaultAdapterFactory().createExecdStack({
    connectionConfig,
    execdBaseUrl: RUNNER_URL,
    endpointHeaders,
  });
}

const sha256 = (b) => createHash("sha256").update(b).digest("hex");
const base = `/tmp/forceai-sdk-files-${process.pid}-${Date.now()}`;
const p = (rel) => `${base}/${rel}`;
let files;

async function rejectsWithStatus(promise, status) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof SandboxApiException, `not a SandboxApiException: ${err}`);
    assert.equal(err.statusCode, status, `${err.message} ${err.rawBody ?? ""}`);
    return true;
  });
}

before(async () => {
  files = execdStack().files;
  await files.createDirectories([{ path: base, mode: 755 }]);
});

after(async () => {
  if (files) await files.deleteDirectories([base]);
});

test("writeFiles then readFile / readBytes round-trip (text and binary, parents created)", T, async () => {
  const bin = new Uint8Array(randomBytes(200_001));
  await files.writeFiles([
    { path: p("text/hello.txt"), data: "héllo\nworld\n" },
    { path: p("bin/data.bin"), data: bin, mode: 600 },
    { path: p("empty"), data: "" },
  ]);
  assert.equal(await files.readFile(p("text/hello.txt")), "héllo\nworld\n");
  const back = await files.readBytes(p("bin/data.bin"));
  assert.equal(sha256(back), sha256(bin));
  assert.equal((await files.readBytes(p("empty"))).length, 0);
  // Range and line-based reads.
  assert.equal(await files.readFile(p("text/hello.txt"), { range: "bytes=7-11" }), "world");
  assert.equal(await files.readFile(p("text/hello.txt"), { offset: 2, limit: 1 }), "world\n");
  const info = await files.getFileInfo([p("bin/data.bin")]);
  assert.equal(info[p("bin/data.bin")].mode, 600);
});

test("streaming writeFiles (AsyncIterable) and readBytesStream, 8 MiB byte-exact", T, async () => {
  const chunks = Array.from({ length: 8 }, () => new Uint8Array(randomBytes(1 << 20)));
  async function* gen() {
    for (const c of chunks) yield c;
  }
  await files.writeFiles([{ path: p("stream/big.bin"), data: gen() }]);
  const want = createHash("sha256");
  for (const c of chunks) want.update(c);
  const got = createHash("sha256");
  let n = 0;
  for await (const c of files.readBytesStream(p("stream/big.bin"))) {
    got.update(c);
    n += c.length;
  }
  assert.equal(n, 8 << 20);
  assert.equal(got.digest("hex"), want.digest("hex"));
});

test("getFileInfo: FileInfo fields as execd gives them", T, async () => {
  await files.writeFiles([{ path: p("info/a.txt"), data: "12345", mode: 644 }]);
  const out = await files.getFileInfo([p("info/a.txt"), p("info")]);
  const fi = out[p("info/a.txt")];
  assert.equal(fi.path, p("info/a.txt"));
  assert.equal(fi.type, "file");
  assert.equal(fi.size, 5);
  assert.equal(fi.mode, 644);
  assert.equal(typeof fi.owner, "string");
  assert.equal(typeof fi.group, "string");
  assert.ok(fi.modifiedAt instanceof Date && !Number.isNaN(fi.modifiedAt.getTime()));
  assert.ok(fi.createdAt instanceof Date && !Number.isNaN(fi.createdAt.getTime()));
  assert.ok(Math.abs(fi.modifiedAt.getTime() - Date.now()) < 60_000);
  assert.equal(out[p("info")].type, "directory");
  await rejectsWithStatus(files.getFileInfo([p("info/missing")]), 404);
});

test("createDirectories, listDirectory (depth), deleteDirectories", T, async () => {
  await files.createDirectories([{ path: p("tree/a/b"), mode: 700 }, { path: p("tree/c") }]);
  await files.writeFiles([{ path: p("tree/a/f.txt"), data: "f" }]);
  const one = await files.listDirectory({ path: p("tree") });
  assert.deepEqual(one.map((e) => e.path), [p("tree/a"), p("tree/c")]);
  const two = await files.listDirectory({ path: p("tree"), depth: 2 });
  assert.deepEqual(two.map((e) => e.path), [p("tree/a"), p("tree/a/b"), p("tree/a/f.txt"), p("tree/c")]);
  assert.equal(two.find((e) => e.path === p("tree/a/b")).mode, 700);
  await files.deleteDirectories([p("tree/a")]);
  const after = await files.listDirectory({ path: p("tree"), depth: 3 });
  assert.deepEqual(after.map((e) => e.path), [p("tree/c")]);
  await rejectsWithStatus(files.listDirectory({ path: p("tree/nope") }), 404);
});

test("search with ** globs", T, async () => {
  await files.writeFiles([
    { path: p("s/x.py"), data: "" },
    { path: p("s/sub/y.py"), data: "" },
    { path: p("s/sub/z.txt"), data: "" },
  ]);
  const py = await files.search({ path: p("s"), pattern: "*.py" });
  assert.deepEqual(py.map((e) => e.path).sort(), [p("s/sub/y.py"), p("s/x.py")]);
  const all = await files.search({ path: p("s"), pattern: "**" });
  assert.equal(all.length, 3);
  const deep = await files.search({ path: p("s"), pattern: "sub/**/*.txt" });
  assert.deepEqual(deep.map((e) => e.path), [p("s/sub/z.txt")]);
});

test("moveFiles, deleteFiles", T, async () => {
  await files.writeFiles([{ path: p("mv/src.txt"), data: "moving" }]);
  await files.moveFiles([{ src: p("mv/src.txt"), dest: p("mv/deeper/dst.txt") }]);
  assert.equal(await files.readFile(p("mv/deeper/dst.txt")), "moving");
  await rejectsWithStatus(files.readFile(p("mv/src.txt")), 404);
  await files.deleteFiles([p("mv/deeper/dst.txt")]);
  await rejectsWithStatus(files.getFileInfo([p("mv/deeper/dst.txt")]), 404);
  await rejectsWithStatus(files.deleteFiles([p("mv")]), 400); // a directory
});

test("replaceContents and replaceContentsDetailed", T, async () => {
  await files.writeFiles([{ path: p("r/conf"), data: "port=8080\nalt=8080\n", mode: 640 }]);
  await files.replaceContents([{ path: p("r/conf"), oldContent: "port=8080", newContent: "port=9090" }]);
  assert.equal(await files.readFile(p("r/conf")), "port=9090\nalt=8080\n");
  const res = await files.replaceContentsDetailed([{ path: p("r/conf"), oldContent: "8080", newContent: "1" }]);
  assert.deepEqual(res, [{ path: p("r/conf"), replacedCount: 1 }]);
  assert.equal((await files.getFileInfo([p("r/conf")]))[p("r/conf")].mode, 640);
});

test("setPermissions: mode applied; another owner refused (403)", T, async () => {
  await files.writeFiles([{ path: p("perm/x"), data: "x" }]);
  await files.setPermissions([{ path: p("perm/x"), mode: 600 }]);
  assert.equal((await files.getFileInfo([p("perm/x")]))[p("perm/x")].mode, 600);
  await rejectsWithStatus(files.setPermissions([{ path: p("perm/x"), mode: 600, owner: "root" }]), 403);
  await rejectsWithStatus(files.setPermissions([{ path: p("perm/x"), mode: 789 }]), 400);
});
