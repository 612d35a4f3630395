"""The documents are a contract (docs/design/build.md#the-docs-contract-test):
every option and variable of docs/configuration.md's tables against --help
and the parser (values, bounds, what 0 means, the groups of --help), every
route docs/api.md and the design's wire contracts list against the running
runner (and the route table against the documents), the map of
docs/design.md (a row per folder and .c file, its [pure] tags against the
build), the references to the design, the documented fields of `started`
against the runner.

The tests read the documents; they hard-code no list of options or routes.
A row added to a configuration table in the same format is checked like
the others: its placeholder (N, BYTES, F, ...) says which bad value to give
(BAD_VALUES; a new kind of placeholder fails until it is added there), its
bounds and 0 columns are tried against the parser."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

from harness import POLICY, RUNNER, Runner, RunnerTest, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNNER = os.path.abspath(RUNNER)  # the rule tests run it from another directory
README = os.path.join(ROOT, "README.md")
CONFIG = os.path.join(ROOT, "docs", "configuration.md")
API = os.path.join(ROOT, "docs", "api.md")
DESIGN = os.path.join(ROOT, "docs", "design.md")
DESIGN_DIR = os.path.join(ROOT, "docs", "design")
NUMERIC = ("N", "BYTES", "MS", "COUNT", "PORT")  # placeholders of a number

# A value each kind of placeholder refuses (usage error, exit 2).
BAD_VALUES = {
    "N": "12abc",
    "BYTES": "-5",
    "ADDR:PORT": "localhost:http",
    "UID[:GID]": "user:group",
    "LO-HI": "9-x",
    "full|none": "partial",
    "A:B": "relative/dir:/tmp",
    "F": "relative/file",
    "DIR": "relative/dir",
    '"Q P"': "abc",
    "URL": "ftp://example.invalid/v1",
    "PORT": "70000",
    "MS": "12abc",
    "COUNT": "12abc",
    "PATH": "relative/file",
    "FILE": "relative/file",
    "NAME": "",
    "NAME=PATH": "codex=relative/bin",
    "LIST": "ftp://ide.example.com/path",
    "SEQ:HASH": "12:not-a-hash",
    None: "maybe",  # an option without a value: on, off, or a usage error
}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def section(text, title):
    """The text of the '## title' section (up to the next '## ')."""
    m = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(title), text, re.S | re.M)
    assert m, "no section '## %s'" % title
    return m.group(1)


def config_sections():
    """docs/configuration.md's option tables: {section title: [row]}, each
    row (options, variables, default, bounds, zero, line), options as
    [(name, placeholder or None)]."""
    out = {}
    for m in re.finditer(r"^## ([^\n]+)\n(.*?)(?=^## |\Z)", read(CONFIG), re.S | re.M):
        rows = []
        for line in m.group(2).splitlines():
            if not line.startswith("| `--"):
                continue
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            assert len(cells) == 6, "configuration row without 6 cells: %s" % line
            opts = []
            for code in re.findall(r"`([^`]*)`", cells[0]):
                o = re.fullmatch(r"--([a-z0-9-]+)(?: (.+))?", code.replace("\\|", "|"))
                assert o, "option cell %r of %s" % (code, line)
                opts.append((o.group(1), o.group(2)))
            variables = re.findall(r"`([A-Z][A-Z0-9_]+)`", cells[1])
            default = re.fullmatch(r"`([^`]*)`", cells[2])
            rows.append((opts, variables, default.group(1) if default else None, cells[3],
                         cells[4], line))
        if rows:
            out[m.group(1).strip()] = rows
    return out


def config_rows():
    """Every row of docs/configuration.md's option tables."""
    rows = [r for rows in config_sections().values() for r in rows]
    assert len(rows) > 10, "the configuration tables were not found"
    return rows


def bounds_of(cell):
    """(lo, hi) of a bounds cell: "LO..HI", "≥ LO" (hi None), or None ("—").
    Other options the cell names ("and ≤ `--task-log-max`/4") are returned
    too: they are set to their own lower bound while this one is tried."""
    others = re.findall(r"`--([a-z0-9-]+)`", cell)
    m = re.match(r"(\d+)\.\.(\d+)", cell)
    if m:
        return int(m.group(1)), int(m.group(2)), others
    m = re.match(r"≥ (\d+)", cell)
    if m:
        return int(m.group(1)), None, others
    assert cell == "—", "bounds cell %r: LO..HI, ≥ LO or —" % cell
    return None


def help_options():
    """--help: {option: (takes a value, variable, default or None)}."""
    out = subprocess.run([RUNNER, "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out
    opts, last = {}, None
    for line in out.stdout.splitlines():
        m = re.match(r"  (--[a-z0-9-]+)( V)?\s", line + " ")
        if m:
            last = m.group(1)[2:]
            opts[last] = [bool(m.group(2)), None, None]
            continue
        m = re.match(r"\s+\[([A-Z][A-Z0-9_]+)(?:, default (.*))?\]$", line)
        if m and last:
            opts[last][1:] = [m.group(1), m.group(2)]
    return {k: tuple(v) for k, v in opts.items()}


class ConfigTable(unittest.TestCase):
    """Every row of docs/configuration.md against --help and the parser."""

    @classmethod
    def setUpClass(cls):
        cls.rows = config_rows()
        cls.help = help_options()
        cls.tmp = tempfile.mkdtemp(prefix="forceai-contract-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)

    def start(self, args, env=None, without=None):
        """Run the runner with a bad setting; a runner that does not refuse
        it would start serving: it is given a private port and killed."""
        e = {k: v for k, v in os.environ.items()
             if not k.startswith("FORCEAI_") and k != "EXECD_ACCESS_TOKEN"}
        e.update(env or {})
        cmd = [RUNNER] + list(args)
        if not any(a.startswith("--listen") for a in args) and "FORCEAI_RUNNER_LISTEN" not in e:
            cmd += ["--listen", "127.0.0.1:%d" % free_port()]
        for opt, val in (("state-dir", os.path.join(self.tmp, "state")),
                         ("seccomp-policy", POLICY)):
            if opt != without:  # the option under test comes from env alone
                cmd += ["--" + opt, val]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=5, env=e)
            return p.returncode, p.stderr
        except subprocess.TimeoutExpired as ex:
            return "still running after 5 s", (ex.stderr or b"").decode()

    def assert_usage_error(self, args, env, names, what, without=None):
        rc, err = self.start(args, env, without)
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(rc, 2, "%s: exit %s, stderr %r" % (what, rc, err))
        self.assertEqual(len(lines), 1, "%s: not one line: %r" % (what, err))
        self.assertIn(names, lines[0], "%s: the line does not name %s" % (what, names))

    def test_documented_options_are_in_help(self):
        for opts, variables, default, _, _, line in self.rows:
            for name, ph in opts:
                with self.subTest(option=name):
                    self.assertIn(name, self.help, "documented, not in --help: " + line)
                    takes, var, hdef = self.help[name]
                    if name in ("help", "version", "ping", "verify-audit", "audit-head"):
                        continue
                    self.assertEqual(takes, ph is not None,
                                     "--%s: docs/configuration.md and --help disagree on its value" % name)
                    self.assertIn(var, variables,
                                  "--%s: --help says %s, docs/configuration.md %s" % (name, var, variables))
                    if default is not None and hdef is not None:
                        self.assertEqual(default, hdef, "--%s: the default" % name)

    def test_help_options_are_documented(self):
        documented = {n for opts, *_ in self.rows for n, _ in opts}
        variables = {v for _, vs, *_ in self.rows for v in vs}
        for name, (_, var, _) in self.help.items():
            with self.subTest(option=name):
                self.assertIn(name, documented, "--%s is in --help, not in docs/configuration.md" % name)
                if var:
                    self.assertIn(var, variables, "%s is not in docs/configuration.md" % var)

    def test_documented_variables_exist(self):
        known = {v for _, v, _ in self.help.values() if v}
        # Variables that carry a secret rather than an option's value.
        secrets = {"EXECD_ACCESS_TOKEN", "FORCEAI_GATEWAY_KEY"}
        for opts, variables, _, _, _, line in self.rows:
            for var in variables:
                with self.subTest(variable=var):
                    self.assertIn(var, known | secrets, "documented, unknown to --help: " + line)

    def test_bad_values_are_usage_errors(self):
        """A bad value of each documented type, on the command line and in
        the variable: exit 2 with one line naming the option or variable."""
        for opts, variables, _, _, _, line in self.rows:
            for name, ph in opts:
                if name in ("help", "version", "ping"):
                    continue
                if ph and "|" in ph and ph not in BAD_VALUES:
                    bad = "not-" + ph.split("|")[0]  # an enumeration: none of its words
                else:
                    self.assertIn(ph, BAD_VALUES, "no bad value known for placeholder %r of "
                                  "--%s: add one to BAD_VALUES" % (ph, name))
                    bad = BAD_VALUES[ph]
                var = self.help.get(name, (None, None, None))[1]
                arg = "--%s=%s" % (name, bad) if ph is None else None
                with self.subTest(option=name, value=bad):
                    self.assert_usage_error([arg] if arg else ["--" + name, bad], None,
                                            "--" + name, "--%s %s" % (name, bad))
                if var:
                    with self.subTest(variable=var, value=bad):
                        self.assert_usage_error([], {var: bad}, var, "%s=%s" % (var, bad),
                                                without=name)


class ConfigRules(unittest.TestCase):
    """Items 2-4, 6-8 of issue 25: the rules of option parsing."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="forceai-rules-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def run_runner(self, args, env=None, timeout=5):
        e = {k: v for k, v in os.environ.items() if not k.startswith("FORCEAI_")}
        e.update(env or {})
        cmd = [RUNNER, "--listen", "127.0.0.1:%d" % free_port(), "--seccomp-policy", POLICY]
        if not any(a.startswith("--state-dir") for a in args) and \
                "FORCEAI_RUNNER_STATE_DIR" not in e:
            cmd += ["--state-dir", os.path.join(self.tmp, "state")]
        try:
            p = subprocess.run(cmd + list(args), capture_output=True, text=True,
                               timeout=timeout, env=e, cwd=self.tmp)
            return p.returncode, p.stderr.strip()
        except subprocess.TimeoutExpired:
            return None, "still running"

    def test_item2_task_log_max_names_itself(self):
        rc, err = self.run_runner(["--task-log-max", "1048576"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--task-log-max", err)
        self.assertNotIn("'1048576': must be 4096", err)
        # the link is said, and docs/configuration.md says it too
        self.assertIn("--stream-window", err)
        row = [r[5] for r in config_rows() if r[0][0][0] == "task-log-max"][0]
        self.assertIn("65536", row)
        self.assertIn("--stream-window", row)

    def test_item3_zero_means_none(self):
        """Every *-timeout-ms: 0 is "none" where none is allowed, else a usage
        error; docs/configuration.md's 0 column says which."""
        zero = {r[0][0][0]: r[4] for r in config_rows()}
        for name, (takes, var, _) in help_options().items():
            if not name.endswith("-timeout-ms"):
                continue
            with self.subTest(option=name):
                self.assertIn(name, zero)
                rc, err = self.run_runner(["--" + name, "0"], timeout=2)
                if zero[name] == "none":
                    self.assertIsNone(rc, "--%s 0 is documented as none: %s" % (name, err))
                else:
                    self.assertEqual(rc, 2, "--%s 0: neither none nor refused (%s)" % (name, err))

    def test_item4_cpu_max_checked(self):
        for bad in ("abc", "100 0", "0 100000", "max 0", "100 100 100", "-1 100000"):
            with self.subTest(value=bad):
                rc, err = self.run_runner(["--task-cpu-max", bad])
                self.assertEqual(rc, 2, err)
                self.assertIn("--task-cpu-max", err)
        for good in ("max", "50000 100000", "max 100000"):
            with self.subTest(value=good):
                self.assertIsNone(self.run_runner(["--task-cpu-max", good], timeout=2)[0])

    def test_item6_usage_errors_exit_2(self):
        for args in (["--landlock-roots", "relative"], ["--landlock-roots", "/tmp:"],
                     ["--task-user", "0"]):
            with self.subTest(args=args):
                rc, err = self.run_runner(args)
                self.assertEqual(rc, 2, err)
                self.assertEqual(len(err.splitlines()), 1, err)
                self.assertIn(args[0], err)

    def test_item7_relative_state_dir_refused(self):
        rc, err = self.run_runner(["--state-dir", "rel-state"])
        self.assertEqual(rc, 2, err)
        self.assertIn("--state-dir", err)
        rc, err = self.run_runner([], {"FORCEAI_RUNNER_STATE_DIR": "rel-state"})
        self.assertEqual(rc, 2, err)
        self.assertIn("FORCEAI_RUNNER_STATE_DIR", err)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "rel-state")))

    def test_item8_flags_and_variable_names(self):
        for flag in ("--one-shot=1", "--allow-root-tasks=yes"):
            with self.subTest(flag=flag):
                rc, err = self.run_runner([flag], timeout=2)
                self.assertNotIn("needs a value", err)
        rc, err = self.run_runner([], {"FORCEAI_GATEWAY_URL": "ftp://x/v1"})
        self.assertEqual(rc, 2, err)
        self.assertIn("FORCEAI_GATEWAY_URL", err)
        self.assertNotIn("--gateway-url", err)
        # a post-parse check of a value from the environment names the variable
        rc, err = self.run_runner([], {"FORCEAI_TASK_LOG_MAX": "100"})
        self.assertEqual(rc, 2, err)
        self.assertIn("FORCEAI_TASK_LOG_MAX", err)


def probe(args, env=None):
    """The parser's verdict on args, without starting a runner: --ping runs
    every check of the options, then probes a port where nothing listens.
    "accepted" (the probe's exit 1), or "refused: <its line>" (exit 2)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("FORCEAI_") and k != "EXECD_ACCESS_TOKEN"}
    e.update(env or {})
    p = subprocess.run([RUNNER, "--ping", "--listen", "127.0.0.1:%d" % free_port()] + list(args),
                       capture_output=True, text=True, timeout=10, env=e)
    if p.returncode == 1 and "--ping" in p.stderr:
        return "accepted"
    assert p.returncode == 2, (args, p.returncode, p.stderr)
    return "refused: " + p.stderr.strip()


class BoundsAndZero(unittest.TestCase):
    """The bounds and 0 columns of docs/configuration.md against the parser
    (issue 39: bounds only the error message told, 0 accepted where the row
    said nothing of it)."""

    @classmethod
    def setUpClass(cls):
        cls.rows = [r for r in config_rows() if r[0][0][1] in NUMERIC]
        cls.lo = {}
        for opts, _, _, bounds, _, _ in cls.rows:
            b = bounds_of(bounds)
            if b:
                cls.lo[opts[0][0]] = b[0]

    def with_others(self, others):
        extra = []
        for o in others:
            self.assertIn(o, self.lo, "the bounds name --%s, which has no lower bound" % o)
            extra += ["--" + o, str(self.lo[o])]
        return extra

    def test_bounds_column_is_the_parsers(self):
        for opts, _, _, bounds, _, line in self.rows:
            name = opts[0][0]
            b = bounds_of(bounds)
            with self.subTest(option=name):
                self.assertIsNotNone(b, "a number without bounds: " + line)
                lo, hi, others = b
                extra = self.with_others(others)
                self.assertEqual(probe(extra + ["--" + name, str(lo)]), "accepted",
                                 "--%s %d is its documented lower bound" % (name, lo))
                if lo > 0:
                    v = probe(extra + ["--" + name, str(lo - 1)])
                    self.assertTrue(v.startswith("refused") and "--" + name in v,
                                    "--%s %d is below the documented bound: %s" % (name, lo - 1, v))
                if hi is not None:
                    self.assertEqual(probe(extra + ["--" + name, str(hi)]), "accepted",
                                     "--%s %d is its documented upper bound" % (name, hi))
                    v = probe(extra + ["--" + name, str(hi + 1)])
                    self.assertTrue(v.startswith("refused") and "--" + name in v,
                                    "--%s %d is above the documented bound: %s" % (name, hi + 1, v))

    def test_zero_column_is_the_parsers(self):
        for opts, _, _, bounds, zero, line in self.rows:
            name = opts[0][0]
            with self.subTest(option=name):
                b = bounds_of(bounds)
                v = probe(self.with_others(b[2] if b else []) + ["--" + name, "0"])
                if v == "accepted":
                    self.assertFalse(zero.startswith("refused") or zero in ("", "—"),
                                     "--%s 0 is accepted: its 0 column must say what it "
                                     "means: %s" % (name, line))
                    self.assertEqual(b[0] if b else 0, 0, "--%s 0 is accepted: " % name + line)
                else:
                    self.assertTrue(zero.startswith("refused"),
                                    "--%s 0 is refused (%s): its 0 column says %r"
                                    % (name, v, zero))


class HelpAndNames(unittest.TestCase):
    def test_help_is_grouped_as_the_document(self):
        """--help's groups are docs/configuration.md's sections, with the same
        options in each."""
        out = subprocess.run([RUNNER, "--help"], capture_output=True, text=True, timeout=10)
        groups, cur = {}, None
        for line in out.stdout.splitlines():
            m = re.fullmatch(r"([A-Z][A-Za-z0-9 ]+):", line)
            if m:
                cur = groups.setdefault(m.group(1), [])
                continue
            m = re.match(r"  --([a-z0-9-]+)", line)
            if m and cur is not None:
                cur.append(m.group(1))
        doc = {t: [o[0][0] for o, *_ in rows] for t, rows in config_sections().items()}
        self.assertEqual(list(groups), list(doc), "--help's groups and the document's sections")
        for title in doc:
            with self.subTest(group=title):
                self.assertEqual(groups[title], doc[title])

    def test_abbreviations_are_refused(self):
        """An option is spelled in full (docs/configuration.md, Rules): a unique
        prefix is refused naming the option meant, a shared one naming each."""
        names = [o[0][0] for o, *_ in config_rows()]
        for name in names:
            ph = [o for o, *_ in config_rows() if o[0][0] == name][0][0][1]
            arg = ["--" + name[:-1]] + (["x"] if ph else [])
            if sum(n.startswith(name[:-1]) for n in names) > 1:
                continue
            with self.subTest(option=name):
                v = probe(arg)
                self.assertTrue(v.startswith("refused") and "--" + name in v, (arg, v))
        for prefix in sorted({n.split("-")[0] + "-" for n in names}):
            many = [n for n in names if n.startswith(prefix)]
            if len(many) < 2:
                continue
            with self.subTest(prefix=prefix):
                v = probe(["--" + prefix.rstrip("-")])
                self.assertTrue(v.startswith("refused"), v)
                for n in many:
                    self.assertIn("--" + n, v)


# ---- routes ----

ROUTE_RE = re.compile(r"`((?:GET|POST|DELETE|PUT|PATCH|ANY)(?:\|(?:GET|POST|DELETE|PUT|PATCH))*)"
                      r" (/[^`\s]*)`")


def design_contract_text():
    """The design's wire contracts of the runner's port: docs/design/wire.md,
    interactive.md and relay.md (the port proxy). Routes of other servers
    (the model proxy, upstreams) are written there as paths without a
    method."""
    return "".join(read(os.path.join(DESIGN_DIR, f))
                   for f in ("wire.md", "interactive.md", "relay.md"))


def documented_routes():
    """{(method, path pattern)}: every `METHOD /path` in docs/api.md and in
    docs/design.md's wire contracts."""
    out = {}
    for where, text in (("api.md", read(API)),
                        ("design", design_contract_text())):
        for methods, path in ROUTE_RE.findall(text):
            path = re.split(r"[?\[]", path)[0]
            for m in methods.split("|"):
                out.setdefault((m, path), where)
    return out


def table_routes():
    """The route table of the runner (runner/api/routes.c)."""
    text = read(os.path.join(ROOT, "runner", "api", "routes.c"))
    routes = re.findall(r'\{"([A-Z*]+)", "(/[^"]*)",', text)
    assert len(routes) > 20, "route table not found"
    return routes


def doc_regex(path):
    """A documented path as a regex: {x} one segment, a final /{path} or
    /... or /** the rest (maybe nothing)."""
    parts = path.rstrip("/").split("/")[1:]
    rx = ""
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        if last and i > 0 and p in ("...", "**", "{path}"):
            rx += "(/.*)?"
        elif re.fullmatch(r"\{[a-z_]+\}", p):
            rx += "/[^/]*"
        else:
            rx += "/" + re.escape(p)
    return re.compile("^" + (rx or "/") + "$")


def sample(pattern):
    """A concrete path for a table pattern."""
    return pattern.replace("/**", "/a/b").replace("*", "0123456789abcdef0123456789abcdef")


class Routes(RunnerTest):
    def route_answer(self, method, path):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", self.r.port, timeout=10)
        c.request(method, path, body=b"" if method in ("POST", "PUT", "PATCH") else None,
                  headers=self.r.headers())
        resp = c.getresponse()
        msg = ""
        if resp.status in (404, 405):
            try:
                msg = json.loads(resp.read(65536) or b"{}").get("message", "")
            except ValueError:
                pass
        c.close()
        return resp.status, msg

    def test_documented_routes_exist(self):
        for (method, path), where in sorted(documented_routes().items()):
            concrete = re.sub(r"\{[a-z_]+\}", "0123456789abcdef0123456789abcdef", path)
            concrete = concrete.replace("/...", "/x")
            with self.subTest(route="%s %s" % (method, path), doc=where):
                for m in (("GET", "POST", "DELETE") if method == "ANY" else (method,)):
                    # (a handler's 404 names what it did not find, the router's
                    # says "no route")
                    st, msg = self.route_answer(m, concrete)
                    self.assertFalse(st == 404 and msg.startswith("no route"),
                                     "%s %s (%s) has no route" % (m, path, where))
                    self.assertNotEqual(st, 405, "%s %s (%s): method not allowed"
                                        % (m, path, where))

    def test_every_route_is_documented(self):
        docs = documented_routes()
        for method, pattern in table_routes():
            m = "ANY" if method == "*" else method
            with self.subTest(route="%s %s" % (m, pattern)):
                path = sample(pattern)
                found = [d for d in docs if d[0] == m and doc_regex(d[1]).match(path)]
                self.assertTrue(found, "%s %s is served but neither docs/api.md nor the "
                                "design document lists it" % (m, pattern))
                where = {docs[d] for d in found}
                self.assertIn("api.md", where, "%s %s: not in docs/api.md" % (m, pattern))


class EnvdRoutes(unittest.TestCase):
    """The envd face's routes (runner/envd/routes.c, its own port) are exactly
    docs/api.md's `:49983` rows."""

    def test_envd_routes_are_the_documented_ones(self):
        text = read(os.path.join(ROOT, "runner", "envd", "routes.c"))
        served = set(re.findall(r'\{"([A-Z]+)", "(/[^"]*)",', text))
        served |= {("POST", "/process.Process/" + m) for m in re.findall(r'PROC\("(\w+)"', text)}
        served |= {("POST", "/filesystem.Filesystem/" + m)
                   for m in re.findall(r'FS\("(\w+)"', text)}
        self.assertGreater(len(served), 20, "envd's route table not found")
        documented = set(re.findall(r"^\| (GET|POST) :49983(/[^ |]*) \|", read(API), re.M))
        self.assertEqual(sorted(served - documented), [], "served on --envd-listen, not in api.md")
        self.assertEqual(sorted(documented - served), [], "in api.md, not served")


class Layout(unittest.TestCase):
    def test_item13_pure_tags_match_the_build(self):
        """docs/design.md's map tags [pure] exactly the modules of PURE_SRCS."""
        out = subprocess.run(["make", "-s", "-C", ROOT, "--no-print-directory",
                              "--eval", "print-pure:\n\t@echo $(filter $(RUNNER_SRCS),"
                              "$(PURE_SRCS))", "print-pure"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        built = set(out.stdout.split())
        self.assertGreater(len(built), 10)
        tagged = {p for p, duty in module_table().items()
                  if p.endswith(".c") and re.search(r"\[pure\]\s*$", duty)}
        self.assertEqual(sorted(tagged - built), [], "tagged [pure] but not in PURE_SRCS")
        self.assertEqual(sorted(built - tagged), [], "in PURE_SRCS but not tagged [pure]")


def module_table():
    """docs/design.md's map (## Floors and rooms): {first cell's path: duty}
    of its rows, the path a `runner/...` one (a folder ends in /)."""
    m = re.search(r"^## Floors and rooms\n(.*?)(?=^## )", read(DESIGN), re.S | re.M)
    assert m, "design.md has no '## Floors and rooms' section"
    rows = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `runner/") else []
        if len(cells) >= 2:
            rows[re.match(r"`([^`]*)`", cells[0]).group(1)] = cells[1]
    return rows


def runner_tree():
    """(folders, .c files, .h files) under runner/, as the tree is now."""
    folders, cfiles, hfiles = [], [], []
    for d, dirs, files in os.walk(os.path.join(ROOT, "runner")):
        rel = os.path.relpath(d, ROOT) + "/"
        folders.append(rel)
        for f in files:
            (cfiles if f.endswith(".c") else hfiles if f.endswith(".h") else []).append(rel + f)
    return sorted(folders), sorted(cfiles), sorted(hfiles)


class ModuleTable(unittest.TestCase):
    """The map (docs/design.md#floors-and-rooms) names every folder and every .c file of
    runner/ with its duty, derived from the tree at test time, and names no
    file that is gone."""

    def test_every_folder_and_c_file_has_a_row(self):
        rows = module_table()
        folders, cfiles, _ = runner_tree()
        self.assertGreater(len(cfiles), 50)
        self.assertEqual([f for f in folders + cfiles if f not in rows], [],
                         "folders and .c files under runner/ without a row in design.md's "
                         "module map (one row each: | `runner/FOLDER/FILE.c` | duty |)")
        self.assertEqual([p for p, duty in rows.items() if len(duty) < 8], [],
                         "module map rows without a duty")

    def test_no_row_names_a_file_that_is_gone(self):
        rows = module_table()
        gone = [p for p in rows if not os.path.exists(os.path.join(ROOT, p))]
        self.assertEqual(gone, [], "design.md's module map names paths the tree does not have")


class SectionRefs(unittest.TestCase):
    """Every reference to the design that README.md, tests/README.md,
    docs/*.md and docs/design/*.md make resolves to a file and a heading,
    none is an old section number (`§N.M`; an RFC's `RFC NNNN §x` and another
    document's `performance.md §N` are not the design's): the check is
    scripts/design_refs.py's. Every relative link names a file that exists."""

    def docs(self):
        import glob
        return ([README, os.path.join(ROOT, "tests", "README.md")]
                + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
                + sorted(glob.glob(os.path.join(DESIGN_DIR, "*.md"))))

    def test_section_refs_resolve(self):
        self.assertGreater(len(os.listdir(DESIGN_DIR)), 10)
        out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "design_refs.py"),
                              "--check"] + self.docs(), capture_output=True, text=True,
                             timeout=60)
        self.assertEqual(out.returncode, 0, "references to the design that do not resolve:\n"
                         + out.stdout + out.stderr)

    def test_relative_links_resolve(self):
        for path in self.docs():
            with self.subTest(doc=os.path.relpath(path, ROOT)):
                links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", read(path))
                gone = [l for l in links if "://" not in l and not l.startswith("mailto:")
                        and not os.path.exists(os.path.join(os.path.dirname(path), l))]
                self.assertEqual(gone, [], "links to files that do not exist")


class Events(RunnerTest):
    def test_item13_started_fields_documented(self):
        design = read(os.path.join(DESIGN_DIR, "wire.md"))
        m = re.search(r"`started` `\{([^}]*)\}", design)
        self.assertTrue(m, "design/wire.md#native-task-api lists no fields of `started`")
        documented = set(re.findall(r'"([a-z_]+)"', m.group(1)))
        ev = self.r.native({"task": "true"})
        started = [e for e in ev if e["event"] == "started"][0]["data"]
        self.assertEqual(sorted(set(started) - documented), [],
                         "fields of started the design document does not list")


if __name__ == "__main__":
    unittest.main()
