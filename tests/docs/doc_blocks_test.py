#!/usr/bin/env python3
"""Runs the shell blocks of README.md and deploy/**/README.md as written.

The blocks are read from the Markdown when the test runs, so the text cannot
drift from what is tested. Every ```sh (bash, shell, console) block carries a
marker, an HTML comment on the line before it (invisible when rendered):

  <!-- doctest: skip REASON -->     not run here, and why (a GPU, Docker, Slurm,
                                      systemd, a build from scratch, ...)
  <!-- doctest: run [KEY=VALUE]... -->    run it; it must exit 0
  <!-- doctest: serve [KEY=VALUE]... -->  start it in the background (it serves
                                      until stopped); `ready` must then succeed

Other blocks (```python, ```js, output) run only when marked. Keys (a value
with spaces goes in double quotes):

  ready="CMD"   retried (every 0.5 s, up to `timeout`) until it exits 0: the
                block's server is up. A serve block needs one.
  bg=N          run: the block's first N commands are servers, started in the
                background; `ready` is awaited before the rest runs
  id=NAME       the block's background processes stay up for later blocks
                that say uses=NAME (until the last of them has run)
  uses=A,B      the sessions this block talks to (started by earlier blocks)
  expect=next   the block's stdout must equal the next fenced block (trailing
                spaces and blank lines aside)
  vary=K1,K2    with expect: the values of these JSON keys differ from run to
                run (ids, timestamps) and are not compared
  omit="TEXT"   the block's lines holding TEXT are not run; why="..." says why
  setup         run before every other block (the install into PATH)
  timeout=S     seconds for the block, and for `ready` (default 120)
  lang=python   run it with python3 (default: from the fence, else bash)

Where the blocks run (so that they run as written on any CPU machine):

  * in a private network namespace (`unshare -rn`, loopback only): fixed ports
    (50051, 50052, 8000) and 0.0.0.0 stay off the network and free of other
    tests; the host's name is given to loopback there. mpirun then sees root
    and more ranks than cores: the environment allows both
    (OMPI_ALLOW_RUN_AS_ROOT=1 ..., OMPI_MCA_rmaps_base_oversubscribe=1, the
    settings README's "Serving a model" names). Without user namespaces the
    test is skipped (exit 77), saying so;
  * in a scratch folder holding links to the source tree's entries, with
    `build` linked to this build folder; HOME and TMPDIR are scratch too;
  * paths outside it are mapped into the scratch folder: /models/NAME (a tiny
    random model of NAME's family is made there by tpserve-make-model),
    /etc/tpserve, /opt/tpserve, /tmp/.

usage: doc_blocks_test.py --source DIR --build DIR [--only FILE[:LINE]] [--keep]
"""
import argparse
import difflib
import glob
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

SHELL_LANGS = {"sh", "bash", "shell", "console"}
KEYS = {"ready", "bg", "id", "uses", "expect", "vary", "omit", "why", "setup", "timeout", "lang"}
SKIP_EXIT = 77
RUN_MARK = "TPSERVE_DOCTEST_RUN"  # in every process's environment, to find them all at the end


class Block:
    def __init__(self, path, line, lang, text):
        self.path, self.line, self.lang, self.text = path, line, lang, text
        self.kind = None  # run, serve, skip; None: unmarked
        self.reason = ""
        self.opts = {}
        self.next_text = None  # the next fenced block's text (expect=next)

    def where(self):
        return f"{self.path}:{self.line}"


def parse_marker(comment, where):
    body = comment.strip()[len("<!--"):-len("-->")].strip()[len("doctest:"):].strip()
    kind, _, rest = body.partition(" ")
    if kind not in ("run", "serve", "skip"):
        raise ValueError(f"{where}: a doctest marker starts with run, serve or skip")
    if kind == "skip":  # the rest is prose
        if not rest.strip():
            raise ValueError(f"{where}: 'doctest: skip' needs a reason")
        return kind, rest.strip(), {}
    try:
        words = shlex.split(rest, posix=True)
    except ValueError as e:
        raise ValueError(f"{where}: the doctest marker does not parse ({e})") from e
    opts = {}
    for w in words:
        key, _, value = w.partition("=")
        if key not in KEYS:
            raise ValueError(f"{where}: unknown doctest key '{key}' (known: {', '.join(sorted(KEYS))})")
        opts[key] = value if _ else True
    if kind == "serve" and "ready" not in opts:
        raise ValueError(f"{where}: a serve block needs ready=\"CMD\"")
    if "bg" in opts and "ready" not in opts:
        raise ValueError(f"{where}: bg=N needs ready=\"CMD\"")
    if "omit" in opts and "why" not in opts:
        raise ValueError(f"{where}: omit=\"TEXT\" needs why=\"...\"")
    return kind, "", opts


def read_blocks(root, rel):
    """The fenced blocks of one Markdown file, with their markers."""
    lines = open(os.path.join(root, rel), encoding="utf-8").read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        block = Block(rel, start + 1, lang, "\n".join(body) + "\n")
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and lines[j].strip().startswith("<!-- doctest:"):
            block.kind, block.reason, block.opts = parse_marker(lines[j], block.where())
        if blocks:
            blocks[-1].next_text = block.text
        blocks.append(block)
    return blocks


# ---- the commands of a block ----

def logical_commands(text):
    """The block's commands: lines joined at trailing backslashes, comment-only lines dropped."""
    commands, current = [], ""
    for line in text.split("\n"):
        if not current and (not line.strip() or line.strip().startswith("#")):
            continue
        current += line + "\n"
        if not line.rstrip().endswith("\\"):
            commands.append(current)
            current = ""
    if current.strip():
        commands.append(current)
    return commands


class Sandbox:
    def __init__(self, source, build, keep):
        self.source, self.build = os.path.abspath(source), os.path.abspath(build)
        self.root = tempfile.mkdtemp(prefix="tpserve-doctest-")
        self.keep = keep
        self.tree = os.path.join(self.root, "tree")
        self.logs = os.path.join(self.root, "logs")
        for d in ("tree", "logs", "home", "tmp", "models", "etc", "opt"):
            os.makedirs(os.path.join(self.root, d))
        for entry in os.listdir(self.source):
            if entry == ".git" or entry.startswith("build"):
                continue
            os.symlink(os.path.join(self.source, entry), os.path.join(self.tree, entry))
        os.symlink(self.build, os.path.join(self.tree, "build"))
        self.env = dict(os.environ)
        self.env.update({
            "HOME": os.path.join(self.root, "home"),
            "TMPDIR": os.path.join(self.root, "tmp"),
            "PATH": os.path.join(self.root, "home/.local/bin") + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
            # mpirun sees root in the user namespace, and a machine with fewer cores than ranks:
            # the settings README's "Serving a model" names for both.
            "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1",
            RUN_MARK: uuid.uuid4().hex,
        })
        for var in ("TPSERVE_CLUSTER_SECRET_FILE", "TPSERVE_API_KEY"):
            self.env.pop(var, None)

    def map_paths(self, text):
        """Paths outside the scratch folder, mapped into it."""
        # One pass, so a mapped path (under $TMPDIR itself, often /tmp) is not mapped again.
        return re.sub(r"(?<![\w./-])(/models/|/etc/tpserve\b|/opt/tpserve\b|/tmp(?=/|\s|$))",
                      lambda m: self.root + m.group(1), text)

    def cleanup(self):
        kill_marked(self.env[RUN_MARK], grace=0.1)
        if not self.keep:
            subprocess.run(["rm", "-rf", self.root])


def marked(var, mark):
    """The processes whose environment holds var=mark (what a run, or one block, started)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{var}={mark}".encode() in f.read().split(b"\0"):
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def kill_marked(mark, var=RUN_MARK, grace=0.0):
    """SIGTERM (when given a grace period), then SIGKILL, to every process marked; waits until none is left."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        if wait <= 0:
            continue
        for pid in marked(var, mark):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while marked(var, mark) and time.time() < deadline:
            time.sleep(0.1)


BLOCK_MARK = "TPSERVE_DOCTEST_BLOCK"  # which block started a process, to stop exactly its processes


class Background:
    """A block's background processes, each in its own process group. Stopping
    them ends every process the block started (marked in its environment, as
    launchers may move their children to groups of their own) and waits until
    all are gone, so the next block finds the ports free."""

    def __init__(self):
        self.procs = []
        self.mark = uuid.uuid4().hex

    def start(self, argv, sandbox, log):
        out = open(log, "ab")
        p = subprocess.Popen(argv, cwd=sandbox.tree, env=dict(sandbox.env, **{BLOCK_MARK: self.mark}), stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)  # the coordinator drains, then stops its workers
            except ProcessLookupError:
                pass
        deadline = time.time() + 15
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        kill_marked(self.mark, BLOCK_MARK, grace=max(0.1, deadline - time.time()))
        for p in self.procs:
            p.wait()
        self.procs = []


def group_alive(pgid):
    """Whether any process of the group is left (a block's server may outlive its shell)."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def interpreter(block):
    lang = block.opts.get("lang", block.lang)
    return ["/usr/bin/python3", "-c"] if lang == "python" else ["bash", "-e", "-o", "pipefail", "-c"]


def normalize(text, vary):
    for key in vary:
        text = re.sub(r'("' + re.escape(key) + r'"\s*:\s*)("(?:[^"\\]|\\.)*"|-?[0-9.]+)', r"\1<varies>", text)
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def await_ready(block, sandbox, background, timeout, log):
    command = sandbox.map_paths(block.opts["ready"])
    deadline = time.time() + timeout
    while time.time() < deadline:
        for p in background.procs:
            if p.poll() not in (None, 0):
                return f"it exited with status {p.returncode} before `{block.opts['ready']}` succeeded"
        if all(not group_alive(p.pid) for p in background.procs):
            return f"all its processes ended before `{block.opts['ready']}` succeeded"
        try:
            r = subprocess.run(["bash", "-c", command], cwd=sandbox.tree, env=sandbox.env, capture_output=True,
                               timeout=15)
            if r.returncode == 0:
                return ""
            with open(log, "ab") as f:
                f.write(b"[ready] " + r.stdout[-300:] + r.stderr[-300:] + b"\n")
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.5)
    return f"`{block.opts['ready']}` did not succeed within {timeout} s"


def run_block(block, sandbox, sessions):
    """Runs one marked block; '' when it did what the Markdown says, else why not."""
    timeout = float(block.opts.get("timeout", 120))
    log = os.path.join(sandbox.logs, re.sub(r"[^\w.]", "_", block.where()) + ".log")
    text = sandbox.map_paths(block.text)
    if "omit" in block.opts:
        text = "\n".join(l for l in text.split("\n") if block.opts["omit"] not in l) + "\n"
    background = Background()
    if block.kind == "serve":
        background.start(interpreter(block) + [text], sandbox, log)
        why = await_ready(block, sandbox, background, timeout, log)
    else:
        commands = logical_commands(text) if "bg" in block.opts else [text]
        servers = int(block.opts.get("bg", 0))
        for command in commands[:servers]:
            background.start(interpreter(block) + [command], sandbox, log)
        why = await_ready(block, sandbox, background, timeout, log) if servers else ""
        if not why:
            rest = "".join(commands[servers:])
            try:
                with open(log, "ab") as err:
                    r = subprocess.run(interpreter(block) + [rest], cwd=sandbox.tree,
                                       env=dict(sandbox.env, **{BLOCK_MARK: background.mark}),
                                       stdout=subprocess.PIPE, stderr=err, timeout=timeout)
                with open(log, "ab") as f:
                    f.write(b"[stdout]\n" + r.stdout)
                if r.returncode != 0:
                    why = f"it exited with status {r.returncode}"
                elif block.opts.get("expect") == "next":
                    vary = [k for k in str(block.opts.get("vary", "")).split(",") if k]
                    got = normalize(r.stdout.decode("utf-8", "replace"), vary)
                    want = normalize(sandbox.map_paths(block.next_text or ""), vary)
                    if got != want:
                        diff = "\n".join(difflib.unified_diff(want.split("\n"), got.split("\n"),
                                                              "the README's output", "this run's output",
                                                              lineterm=""))
                        why = "its output differs from the block after it:\n" + diff
            except subprocess.TimeoutExpired:
                why = f"it did not finish within {timeout} s"
    if block.opts.get("id") and not why:
        sessions[block.opts["id"]] = background
    else:
        background.stop()
    if why:
        with open(log, "rb") as f:
            tail = f.read()[-4000:].decode("utf-8", "replace")
        why += f"\n--- {log} (last 4000 bytes) ---\n{tail}"
    return why


# ---- the environment ----

def enter_network_namespace():
    """Re-runs this script in a private user + network namespace; returns only when already in one."""
    if os.environ.get("TPSERVE_DOCTEST_NETNS") == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        # The host's name must reach loopback here, as the blocks dial $(hostname).
        try:
            address = socket.gethostbyname(socket.gethostname())
            if not address.startswith("127."):
                subprocess.run(["ip", "addr", "add", address + "/32", "dev", "lo"], check=True)
        except OSError as e:
            print(f"note: the host name does not resolve ({e}); blocks that dial $(hostname) will fail")
        return
    probe = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"], capture_output=True, text=True)
    if probe.returncode != 0:
        print("SKIP: this machine cannot make a private network namespace (unshare -rn: "
              f"{probe.stderr.strip() or 'not found'}), which keeps the README's fixed ports and 0.0.0.0 "
              "off the network; nothing was run")
        sys.exit(SKIP_EXIT)
    env = dict(os.environ, TPSERVE_DOCTEST_NETNS="1")
    sys.exit(subprocess.run(["unshare", "-rn", sys.executable] + sys.argv, env=env).returncode)


def make_models(blocks, sandbox):
    """A tiny random model for every /models/NAME a block that runs names (its family from NAME)."""
    names = set()
    for b in blocks:
        if b.kind in ("run", "serve"):
            names.update(re.findall(r"(?<![\w./-])/models/([\w.-]+)", b.text + str(b.opts.get("ready", ""))))
    for name in sorted(names):
        lower = name.lower()
        arch = "llama" if "llama" in lower else "qwen2" if "qwen2" in lower and "qwen3" not in lower else "qwen3"
        r = subprocess.run(["tpserve-make-model", os.path.join(sandbox.root, "models", name), "--arch", arch],
                           env=sandbox.env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"tpserve-make-model for /models/{name}: {r.stderr}")
    return names


def session_ends(order):
    """For each session: the index in `order` after which nothing uses it."""
    ends = {}
    changed = True
    while changed:
        changed = False
        for i, b in enumerate(order):
            users = [s for s in str(b.opts.get("uses", "")).split(",") if s]
            last = max(i, ends.get(b.opts.get("id"), i)) if b.opts.get("id") else i
            for s in users:
                if ends.get(s, -1) < last:
                    ends[s] = last
                    changed = True
    return ends


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--only", default="", help="FILE or FILE:LINE: run only that (and its setup and sessions)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder and its logs")
    args = parser.parse_args()

    files = ["README.md"] + sorted(os.path.relpath(p, args.source)
                                   for p in glob.glob(os.path.join(args.source, "deploy/**/README.md"), recursive=True))
    blocks, problems = [], []
    for f in files:
        try:
            blocks += read_blocks(args.source, f)
        except ValueError as e:
            problems.append(str(e))
    for b in blocks:
        if b.lang in SHELL_LANGS and b.kind is None:
            problems.append(f"{b.where()}: a shell block without a marker: say before it "
                            "<!-- doctest: run|serve ... --> or <!-- doctest: skip REASON -->")
    ids = {b.opts["id"]: b for b in blocks if b.opts.get("id")}
    for b in blocks:
        for s in str(b.opts.get("uses", "")).split(","):
            if s and (s not in ids or blocks.index(ids[s]) > blocks.index(b)):
                problems.append(f"{b.where()}: uses={s}, but no earlier block has id={s}")
    if problems:
        print("\n".join("FAIL: " + p for p in problems))
        return 1

    enter_network_namespace()
    for tool in ("tpserve-coordinator", "tpserve-worker", "tpserve-client", "tpserve-http", "tpserve-make-model",
                 "tpserve-launch"):
        if not glob.glob(os.path.join(args.build, "**", tool), recursive=True):
            print(f"FAIL: {tool} is not built in {args.build}; build every target first (scripts/test.sh does)")
            return 1

    runnable = [b for b in blocks if b.kind in ("run", "serve")]
    order = [b for b in runnable if b.opts.get("setup")] + [b for b in runnable if not b.opts.get("setup")]
    if args.only:
        wanted = [b for b in order if b.where() == args.only or b.path == args.only]
        needed = set(map(id, wanted))
        for b in reversed(order):  # the sessions they use, and what those use
            if id(b) in needed:
                for s in str(b.opts.get("uses", "")).split(","):
                    if s:
                        needed.add(id(ids[s]))
        order = [b for b in order if b.opts.get("setup") or id(b) in needed]
    ends = session_ends(order)

    sandbox = Sandbox(args.source, args.build, args.keep)
    sessions, failed, started = {}, [], time.time()
    try:
        print(f"scratch folder {sandbox.root}")
        for i, b in enumerate(order):
            if not b.opts.get("setup") and (i == 0 or order[i - 1].opts.get("setup")):
                models = make_models(order, sandbox)  # after the setup blocks: tpserve-make-model is on PATH now
                print(f"tiny models for /models/{{{','.join(sorted(models))}}}")
            t0 = time.time()
            try:
                why = run_block(b, sandbox, sessions)
            except Exception as e:  # noqa: BLE001 - reported as this block's failure
                why = f"the harness failed: {e!r}"
            label = b.kind + (f" id={b.opts['id']}" if b.opts.get("id") else "")
            if why:
                failed.append(b.where())
                print(f"FAIL {b.where()} ({label}, {time.time() - t0:.1f} s): {why}")
            else:
                note = f"; omitted the lines with {b.opts['omit']!r}: {b.opts['why']}" if "omit" in b.opts else ""
                print(f"ok   {b.where()} ({label}, {time.time() - t0:.1f} s){note}")
            for s, end in ends.items():
                if end == i and s in sessions:
                    sessions.pop(s).stop()
            sys.stdout.flush()
        for b in blocks:
            if b.kind == "skip":
                print(f"skip {b.where()}: {b.reason}")
    finally:
        for background in sessions.values():
            background.stop()
        sandbox.cleanup()
    print(f"{len(order) - len(failed)} of {len(order)} blocks as written, "
          f"{sum(b.kind == 'skip' for b in blocks)} skipped, in {time.time() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
