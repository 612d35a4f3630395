# forceai-runner: the driver of a Python code context (docs/design/code.md).
# Embedded in the runner (runner/code/driver_blob.c) and run as
# `python3 -I -c SOURCE` in a confined task: one IPython InteractiveShell,
# driven by line-delimited JSON. Requests come on stdin, one per line:
#   {"code": "...", "env": {"NAME": "value"}}
# Messages go out on the task's stdout, one JSON object per line:
#   {"t":"ready"}  {"t":"out","s":...}  {"t":"err","s":...}
#   {"t":"result","main":bool,"data":{mime: value}}  {"t":"count","n":N}
#   {"t":"error","ename":...,"evalue":...,"traceback":[...]}  {"t":"done"}
# Whatever else the process or its children write to fd 1 or 2 goes to the
# task's stderr, which the runner passes on as stderr of the execution.
# SIGINT interrupts the cell running (KeyboardInterrupt); state is kept.
import base64
import io
import json
import os
import signal
import sys
import warnings

# The driver's source came in the environment: user code does not see it.
os.environ.pop("FORCEAI_CODE_DRIVER", None)

# The protocol's own descriptors: user code's input() reads /dev/null and
# its children's fd 1 is the task's stderr, so nothing can corrupt a line.
_proto_out = os.dup(1)
_proto_in = os.dup(0)
os.dup2(2, 1)
_null = os.open("/dev/null", os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
os.environ.setdefault("MPLBACKEND", "Agg")
# IPython wants a directory of its own; the task's HOME may not be writable.
if "IPYTHONDIR" not in os.environ:
    import tempfile

    for _where in (os.environ.get("TMPDIR"), "/tmp", "/dev/shm", "/var/tmp", os.getcwd()):
        try:
            _home = tempfile.mkdtemp(prefix="forceai-code-", dir=_where)
        except (OSError, TypeError):
            continue
        os.environ["IPYTHONDIR"] = _home
        os.environ.setdefault("MPLCONFIGDIR", _home)
        break

_running = False
_in_emit = False
_pending_int = False


def _on_sigint(signum, frame):
    global _pending_int
    if not _running:
        return  # between cells: nothing to interrupt
    if _in_emit:
        _pending_int = True  # a line half written must be finished first
        return
    raise KeyboardInterrupt


signal.signal(signal.SIGINT, _on_sigint)


def _emit(msg):
    global _in_emit, _pending_int
    line = (json.dumps(msg, ensure_ascii=True, default=str) + "\n").encode()
    _in_emit = True
    try:
        view = memoryview(line)
        while view:
            n = os.write(_proto_out, view)
            view = view[n:]
    finally:
        _in_emit = False
    if _pending_int and _running:
        _pending_int = False
        raise KeyboardInterrupt


class _Stream(io.TextIOBase):
    """sys.stdout / sys.stderr: whole lines go out as they are printed
    (a partial line on flush, at the end of the cell, or past 8 KiB)."""

    def __init__(self, kind):
        self._kind = kind
        self._buf = []
        self._len = 0

    def writable(self):
        return True

    @property
    def encoding(self):
        return "utf-8"

    def isatty(self):
        return False

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        if not s:
            return 0
        self._buf.append(s)
        self._len += len(s)
        if "\n" in s or self._len >= 8192:
            self.flush()
        return len(s)

    def flush(self):
        if not self._buf:
            return
        text = "".join(self._buf)
        self._buf = []
        self._len = 0
        text = text.encode("utf-8", "replace").decode("utf-8")
        _emit({"t": self._kind, "s": text})


sys.stdout = _Stream("out")
sys.stderr = _Stream("err")

from IPython.core.displayhook import DisplayHook  # noqa: E402
from IPython.core.displaypub import DisplayPublisher  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402


def _bundle(data):
    out = {}
    for mime, value in (data or {}).items():
        if isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        elif not isinstance(value, str) and not mime.endswith("json"):
            value = str(value)
        out[mime] = value
    return out


class _Publisher(DisplayPublisher):
    def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kw):
        sys.stdout.flush()
        sys.stderr.flush()
        _emit({"t": "result", "main": False, "data": _bundle(data)})

    def clear_output(self, wait=False):
        pass


class _Hook(DisplayHook):
    def start_displayhook(self):
        self._data = None

    def write_output_prompt(self):
        pass

    def write_format_data(self, format_dict, md_dict=None):
        self._data = format_dict

    def finish_displayhook(self):
        sys.stdout.flush()
        sys.stderr.flush()
        if self._data:
            _emit({"t": "result", "main": True, "data": _bundle(self._data)})
        self._data = None


from traitlets.config import Config  # noqa: E402

_cfg = Config()
_cfg.HistoryManager.enabled = False  # no sqlite file: history stays in memory
shell = InteractiveShell.instance(colors="NoColor", config=_cfg)
shell.display_pub = _Publisher(shell=shell, parent=shell)
shell.displayhook = _Hook(shell=shell, cache_size=shell.cache_size, parent=shell)
shell.display_trap.hook = shell.displayhook


def _showtraceback(etype, evalue, stb):
    sys.stdout.flush()
    sys.stderr.flush()
    _emit(
        {
            "t": "error",
            "ename": getattr(etype, "__name__", str(etype)),
            "evalue": str(evalue),
            "traceback": list(stb),
        }
    )


shell._showtraceback = _showtraceback
warnings.filterwarnings("ignore", message=".*non-interactive.*")


def _figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


shell.display_formatter.formatters["image/png"].for_type_by_name(
    "matplotlib.figure", "Figure", _figure_png
)
_patched_show = False


def _flush_figures():
    """Figures a cell left open are shown once it ends, as the inline
    backend does; plt.show() shows them at once."""
    global _patched_show
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    if not _patched_show:
        _patched_show = True
        plt.show = lambda *a, **k: _flush_figures()
    from IPython.display import display

    for num in plt.get_fignums():
        display(plt.figure(num))
    plt.close("all")


def _run(req):
    global _running
    code = req.get("code", "")
    env = req.get("env") or {}
    saved = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        os.environ[str(k)] = str(v)
    _running = True
    try:
        try:
            result = shell.run_cell(code, store_history=True)
            _flush_figures()
        except KeyboardInterrupt:
            result = None
            _showtraceback(KeyboardInterrupt, "", ["KeyboardInterrupt"])
        sys.stdout.flush()
        sys.stderr.flush()
        count = result.execution_count if result is not None else shell.execution_count
        _running = False
        _emit({"t": "count", "n": count})
    finally:
        _running = False
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    _emit({"t": "done"})


def _main():
    _emit({"t": "ready", "pid": os.getpid()})
    rd = os.fdopen(_proto_in, "rb", buffering=1 << 16)
    for line in rd:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        try:
            _run(req)
        except KeyboardInterrupt:
            _emit({"t": "done"})


_main()
