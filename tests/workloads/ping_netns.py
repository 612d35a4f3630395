"""Run by test_workloads.Ping under `unshare --net`: loopback up, every
group allowed ICMP datagram sockets, then a runner (in this namespace) runs
Debian's ping as shipped and a copy made the way image/install.sh makes it
(busybox cp: same bytes, no security.capability). Prints one JSON line."""
import json
import os
import shutil
import subprocess
import sys

from harness import Runner

ping = sys.argv[1]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
with open("/proc/sys/net/ipv4/ping_group_range", "w") as f:
    f.write("0 2147483647")
caps = subprocess.run(["getcap", ping], capture_output=True, text=True).stdout
r = Runner(default_roots=True)
try:
    stripped = os.path.join(r.work, "ping")
    bb = shutil.which("busybox")
    subprocess.run([bb, "cp", ping, stripped] if bb else ["cp", ping, stripped], check=True)
    os.chmod(stripped, 0o755)

    def run(exe):
        ev = r.execd({"command": "%s -c 1 -W 5 127.0.0.1" % exe})
        last = [e for e in ev if e["type"] in ("execution_complete", "error")][-1]
        out = "\n".join(e.get("text", "") for e in ev if e["type"] in ("stdout", "stderr"))
        return (0 if last["type"] == "execution_complete" else int(last["error"]["evalue"])), out

    shipped_rc, shipped_out = run(ping)
    stripped_rc, stripped_out = run(stripped)
    print(json.dumps({"file_caps": "cap_net_raw" in caps, "as_shipped": shipped_rc,
                      "as_shipped_out": shipped_out[-300:], "stripped": stripped_rc,
                      "stripped_out": stripped_out[-500:],
                      "stripped_caps": subprocess.run(["getcap", stripped], capture_output=True,
                                                      text=True).stdout}))
finally:
    r.stop()
    r.close()
