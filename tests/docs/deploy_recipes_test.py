#!/usr/bin/env python3
"""deploy/'s recipes, run as far as a machine without systemd, Kubernetes or Slurm allows.

Each recipe's programs are replaced by stand-ins (standin.py) that record how
they were called and ask the real program whether it takes those flags (abseil's
--only_check_args), so a recipe that names a flag the programs lack fails here.

  coverage    every file in deploy/ is exercised by one of the docs.* tests
  systemd     `systemd-analyze verify` of every unit (under --root, with stand-in
              executables), then every ExecStart run as systemd would expand it
              (Environment=, the README's /etc/default/tpserve, %i for ranks 0, 1)
  kubernetes  every object of deploy/kubernetes/*.yaml and the README's YAML against
              the Kubernetes 1.27 API schemas, strict (scripts/fetch-k8s-schemas.sh;
              skipped with a message without them), the container's args through the
              image's ENTRYPOINT, and the ports, probes, GPU count and scrape
              annotations agreeing with those args and with the coordinator
  slurm       deploy/slurm/*.sbatch run with its #SBATCH environment, a stand-in
              for each tpserve program, the real mpirun (Slurm's variables taken
              away, so that it starts the ranks here) and stand-in srun/scontrol
              (slurm_standins.py): a clean run, scancel's SIGTERM, a dying worker

usage: deploy_recipes_test.py RECIPE --source DIR --program NAME=PATH ...
Exit 77 (skipped) when the recipe's tool is missing, saying so.
"""
import argparse
import fnmatch
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77
INSTALL_PREFIX = "/opt/tpserve/bin/"  # where the recipes expect the programs

# Which test exercises each file of deploy/ (shell patterns, relative to the source tree).
COVERAGE = [
    ("deploy/README.md", "docs.shell_blocks"),
    ("deploy/*/README.md", "docs.shell_blocks"),
    ("deploy/docker/Dockerfile", "docs.docker_build"),
    ("deploy/systemd/*.service", "docs.deploy_systemd"),
    ("deploy/kubernetes/*.yaml", "docs.deploy_kubernetes"),
    ("deploy/slurm/*.sbatch", "docs.deploy_slurm"),
]

failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


class Standins:
    """A folder of stand-ins for the programs, and what they recorded."""

    def __init__(self, scratch, programs, extra=()):
        self.dir = os.path.join(scratch, "bin")
        self.log = os.path.join(scratch, "standins.jsonl")
        os.makedirs(self.dir, exist_ok=True)
        standin = os.path.join(HERE, "standin.py")
        for name, real in list(programs.items()) + [(n, "-") for n in extra]:
            path = os.path.join(self.dir, name)
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(standin)} "
                        f"{shlex.quote(self.log)} {shlex.quote(name)} {shlex.quote(real)} \"$@\"\n")
            os.chmod(path, 0o755)

    def rows(self):
        return [json.loads(line) for line in open(self.log)] if os.path.exists(self.log) else []

    def entries(self, name=None):
        """The calls: {name, args, env, check_rc, check_message[, secret_file]}."""
        return [r for r in self.rows() if "args" in r and (name is None or r["name"] == name)]

    def signals(self, name):
        """The signals `name`'s stand-ins held for got ("hold" mode), one per process."""
        return [r["signal"] for r in self.rows() if r["name"] == name and "signal" in r]

    def reset(self):
        if os.path.exists(self.log):
            os.remove(self.log)


def check_flags(entries, where):
    for e in entries:
        if e["check_rc"] != 0:
            fail(f"{where}: {e['name']} refuses {' '.join(e['args'])}: {e['check_message']}")


def flag_value(args, flag):
    """The value of --flag in args (--flag=V or --flag V, '-' or '_'), or None."""
    names = {flag, flag.replace("-", "_")}
    for i, a in enumerate(args):
        key, eq, value = a.partition("=")
        if key.lstrip("-") in names and a.startswith("--"):
            return value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return None


def port_of(address):
    return int(address.rsplit(":", 1)[1]) if address and ":" in address else None


def seconds(duration):
    """30s, 2m, 1h (abseil's durations as the recipes use them) in seconds."""
    m = re.fullmatch(r"(\d+)(s|m|h)", duration or "")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)] if m else None


# ---- coverage ----

def recipe_coverage(source, _programs, _scratch):
    files = sorted(os.path.relpath(p, source) for p in glob.glob(os.path.join(source, "deploy/**"), recursive=True)
                   if os.path.isfile(p))
    for f in files:
        tests = [t for pattern, t in COVERAGE if fnmatch.fnmatch(f, pattern)]
        if not tests:
            fail(f"{f}: no test exercises it; add it to a docs.* test and to COVERAGE in {__file__}")
        else:
            print(f"coverage: {f}: {', '.join(tests)}")


# ---- systemd ----

def unit_sections(path):
    """{section: [(key, value), ...]} with continuation lines joined."""
    text = re.sub(r"\\\n", " ", open(path).read())
    sections, current = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
        elif current is not None:
            key, _, value = line.partition("=")
            current.append((key.strip(), value.strip()))
    return sections


def env_file_from_readme(readme, path):
    """The KEY=VALUE lines the README writes into `path` with a heredoc."""
    m = re.search(r"tee " + re.escape(path) + r" <<'(\w+)'\n(.*?)\n\1\n", open(readme).read(), re.S)
    if not m:
        fail(f"{readme}: no heredoc writing {path} (the test reads the settings from it)")
        return {}
    env = {}
    for line in m.group(2).splitlines():
        key, _, value = line.partition("=")
        env[key.strip()] = value.strip().strip('"')
    return env


def unit_command(service, instance, env_file):
    """(argv, env) of ExecStart as systemd runs it: %i, Environment=, EnvironmentFile=, $VAR and ${VAR}."""
    env = {}
    for key, value in service:
        if key == "Environment":
            for word in shlex.split(value.replace("%i", instance)):
                k, _, v = word.partition("=")
                env[k] = v
    if any(k == "EnvironmentFile" for k, _ in service):
        env.update(env_file)  # systemd: the files override Environment=
    line = [v for k, v in service if k == "ExecStart"][-1].replace("%i", instance)
    if re.search(r"%[a-zA-Z]", line):
        fail(f"ExecStart uses a specifier the test does not expand: {line}")
    argv = []
    for word in shlex.split(line.lstrip("-@+!:")):
        whole = re.fullmatch(r"\$(\w+)", word)
        if whole:
            argv += env.get(whole.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return argv, env


def verify_units(units, scratch):
    """systemd-analyze verify under a root holding the units, the system's units and stand-in executables."""
    system_units = next((d for d in ("/usr/lib/systemd/system", "/lib/systemd/system") if os.path.isdir(d)), None)
    root = os.path.join(scratch, "root")
    shutil.copytree(system_units, os.path.join(root, "usr/lib/systemd/system"), symlinks=True)
    os.makedirs(os.path.join(root, "etc/systemd/system"))
    for unit in units:
        shutil.copy(unit, os.path.join(root, "etc/systemd/system"))
        for key, value in unit_sections(unit).get("Service", []):
            if key.startswith("Exec"):
                exe = os.path.join(root, shlex.split(value)[0].lstrip("-@+!:").lstrip("/"))
                os.makedirs(os.path.dirname(exe), exist_ok=True)
                with open(exe, "w") as f:
                    f.write("#!/bin/sh\n")
                os.chmod(exe, 0o755)
    for unit in units:
        name = os.path.basename(unit).replace("@.", "@0.")
        out = subprocess.run(["systemd-analyze", "verify", f"--root={root}", name],
                             capture_output=True, text=True, timeout=60)
        said = (out.stdout + out.stderr).strip()
        if out.returncode != 0 or said:
            fail(f"systemd-analyze verify {name}: exit {out.returncode}: {said}")
        else:
            print(f"systemd: systemd-analyze verify {name}: clean")


def run_unit(unit, instance, env_file, standins):
    argv, env = unit_command(unit_sections(unit).get("Service", []), instance, env_file)
    argv = [a.replace(INSTALL_PREFIX, standins.dir + "/") for a in argv]
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        fail(f"{os.path.basename(unit)} (%i={instance}): ExecStart exited {out.returncode}: {out.stderr.strip()}")
    return env


def recipe_systemd(source, programs, scratch):
    if not shutil.which("systemd-analyze") or not os.path.isdir("/usr/lib/systemd/system"):
        print("skipped: no systemd-analyze (Debian package systemd; scripts/install-deps.sh installs it)")
        return SKIP
    units = sorted(glob.glob(os.path.join(source, "deploy/systemd/*.service")))
    verify_units(units, scratch)
    readme = os.path.join(source, "deploy/systemd/README.md")
    settings = env_file_from_readme(readme, "/etc/default/tpserve")
    standins = Standins(scratch, programs)
    for unit in units:
        for instance in (["0", "1"] if "@." in unit else [""]):
            run_unit(unit, instance, settings, standins)
    check_flags(standins.entries(), "deploy/systemd")
    coordinators, workers = standins.entries("tpserve-coordinator"), standins.entries("tpserve-worker")
    if len(coordinators) != 1:
        fail(f"deploy/systemd: expected the coordinator unit to start tpserve-coordinator once, got {len(coordinators)}")
    if [w["env"].get("RANK") for w in workers] != ["0", "1"]:
        fail(f"deploy/systemd: tpserve-worker@0 and @1 should start ranks 0 and 1, got {[w['env'] for w in workers]}")
    for w in workers:
        e = w["env"]
        if e.get("LOCAL_RANK") != e.get("RANK") or e.get("WORLD_SIZE") != settings.get("TPSERVE_TP"):
            fail(f"deploy/systemd: a worker unit's torchrun variables are off ({e}; TPSERVE_TP={settings.get('TPSERVE_TP')})")
    # The README's worker setup: TPSERVE_ARGS="--worker-listen ADDR" on the coordinator; the workers dial ADDR.
    m = re.search(r'TPSERVE_ARGS="(--worker-listen [^"]+)"', open(readme).read())
    if not m:
        fail(f"{readme}: no TPSERVE_ARGS=\"--worker-listen ...\" for the worker units")
    else:
        standins.reset()
        run_unit(os.path.join(source, "deploy/systemd/tpserve-coordinator.service"), "",
                 dict(settings, TPSERVE_ARGS=m.group(1)), standins)
        check_flags(standins.entries(), "deploy/systemd README's worker setup")
        listen = flag_value(standins.entries("tpserve-coordinator")[0]["args"], "worker-listen")
        dials = {flag_value(w["args"], "coordinator") for w in workers}
        if dials != {listen}:
            fail(f"deploy/systemd: the workers dial {dials}, the README's coordinator listens on {listen}")
    print(f"systemd: {len(units)} units verified; {len(coordinators)} coordinator and {len(workers)} worker command lines checked")
    return 0


# ---- kubernetes ----

def npm_modules():
    cache = os.environ.get("TPSERVE_NPM_CACHE") or os.path.join(
        os.environ.get("TPSERVE_CACHE") or os.path.expanduser("~/.cache/tpserve"), "npm")
    return os.path.join(cache, "node_modules")


def validate_schemas(items, source):
    """Each {where, object[, schema]} against the Kubernetes API schemas; False when they are unavailable."""
    fetch = subprocess.run([os.path.join(source, "scripts/fetch-k8s-schemas.sh")], capture_output=True, text=True)
    if fetch.returncode != 0 or not shutil.which("node"):
        print("kubernetes: schema check skipped, the Kubernetes schemas are unavailable "
              f"(scripts/fetch-k8s-schemas.sh: {fetch.stderr.strip() or 'no node'})")
        return False
    out = subprocess.run(["node", os.path.join(HERE, "k8s_validate.cjs"), npm_modules()],
                         input=json.dumps(items), capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        fail(f"k8s_validate.cjs failed: {out.stderr.strip()}")
        return True
    for result in json.loads(out.stdout):
        for e in result["errors"]:
            fail(f"{result['where']} ({result['schema']}): {e}")
        if not result["errors"]:
            print(f"kubernetes: {result['where']}: valid {result['schema']}")
    return True


def dockerfile_entrypoint(source):
    m = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", open(os.path.join(source, "deploy/docker/Dockerfile")).read(), re.M)
    return json.loads(m.group(1)) if m else None


def service_names(source):
    """The health service names the coordinator registers (coordinator/coordinator.h)."""
    text = open(os.path.join(source, "coordinator/coordinator.h")).read()
    return set(re.findall(r'constexpr char k\w+Service\[\] = "([^"]+)";', text))


def check_pod(where, pod, source, standins):
    """A pod template's containers: args through the image's entry point, ports, probes, GPUs."""
    entry = dockerfile_entrypoint(source)
    names = service_names(source)
    for c in pod.get("spec", {}).get("containers", []):
        here = f"{where} container {c.get('name')}"
        command = c.get("command") or entry
        argv = (command or []) + c.get("args", [])
        if not argv or os.path.basename(argv[0]) not in ("tpserve-coordinator", "tpserve-client"):
            continue
        standins.reset()
        subprocess.run([os.path.join(standins.dir, os.path.basename(argv[0]))] + argv[1:], timeout=60)
        check_flags(standins.entries(), here)
        args = argv[1:]
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
        listen, metrics = port_of(flag_value(args, "listen")), port_of(flag_value(args, "metrics-listen"))
        if "grpc" in ports and ports["grpc"] != listen:
            fail(f"{here}: port grpc is {ports['grpc']}, --listen is on {listen}")
        if "metrics" in ports and ports["metrics"] != metrics:
            fail(f"{here}: port metrics is {ports['metrics']}, --metrics-listen is on {metrics}")
        annotations = pod.get("metadata", {}).get("annotations", {})
        if "prometheus.io/port" in annotations and int(annotations["prometheus.io/port"]) != metrics:
            fail(f"{here}: prometheus.io/port {annotations['prometheus.io/port']} is not --metrics-listen's {metrics}")
        if annotations.get("prometheus.io/path", "/metrics") != "/metrics":
            fail(f"{here}: the coordinator serves /metrics, not {annotations['prometheus.io/path']}")
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = c.get(kind, {})
            if "grpc" in probe:
                if probe["grpc"].get("port") not in (listen, "grpc"):
                    fail(f"{here}: {kind} asks port {probe['grpc'].get('port')}, --listen is on {listen}")
                if probe["grpc"].get("service") not in names:
                    fail(f"{here}: {kind} asks health service {probe['grpc'].get('service')!r}; "
                         f"the coordinator registers {sorted(names)}")
            if "exec" in probe:
                check_exec_probe(f"{here} {kind}", probe["exec"]["command"], names, standins)
        gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        tp = flag_value(args, "tp")
        if gpus is not None and tp is not None and int(gpus) != int(tp):
            fail(f"{here}: nvidia.com/gpu is {gpus} but --tp is {tp} (the workers are the pod's processes)")
        print(f"kubernetes: {here}: {' '.join(argv[:1])} flags, ports and probes agree")


def check_exec_probe(where, command, names, standins):
    if os.path.basename(command[0]) != "tpserve-client":
        return
    standins.reset()
    subprocess.run([os.path.join(standins.dir, "tpserve-client")] + command[1:], timeout=60)
    check_flags(standins.entries(), where)
    service = flag_value(command[1:], "service")
    if service not in names:
        fail(f"{where}: asks health service {service!r}; the coordinator registers {sorted(names)}")


def readme_yaml(readme):
    """The README's ```yaml blocks (pod template fragments)."""
    import yaml
    blocks = re.findall(r"```yaml\n(.*?)\n```", open(readme).read(), re.S)
    return [yaml.safe_load(b) for b in blocks]


def recipe_kubernetes(source, programs, scratch):
    try:
        import yaml
    except ImportError:
        print("skipped: no PyYAML for this python3 (Debian package python3-yaml; scripts/install-deps.sh installs it)")
        return SKIP
    standins = Standins(scratch, programs)
    items, pods = [], []
    for path in sorted(glob.glob(os.path.join(source, "deploy/kubernetes/*.yaml"))):
        rel = os.path.relpath(path, source)
        for i, doc in enumerate(d for d in yaml.safe_load_all(open(path)) if d):
            items.append({"where": f"{rel} document {i + 1} ({doc.get('kind')})", "object": doc})
            if doc.get("kind") in ("Deployment", "StatefulSet", "Job", "DaemonSet"):
                pods.append((f"{rel} {doc['kind']} {doc['metadata']['name']}", doc, doc["spec"]["template"]))
    readme = os.path.join(source, "deploy/kubernetes/README.md")
    for i, fragment in enumerate(readme_yaml(readme)):
        items.append({"where": f"deploy/kubernetes/README.md yaml block {i + 1}",
                      "schema": "io.k8s.api.core.v1.PodTemplateSpec", "object": fragment})
        pods.append((f"deploy/kubernetes/README.md yaml block {i + 1}", None, fragment))
    validate_schemas(items, source)
    for where, workload, pod in pods:
        if workload is not None:
            selector = workload["spec"].get("selector", {}).get("matchLabels", {})
            labels = pod.get("metadata", {}).get("labels", {})
            if any(labels.get(k) != v for k, v in selector.items()):
                fail(f"{where}: the selector {selector} does not match the pod's labels {labels}")
        check_pod(where, pod, source, standins)
    check_services(items, pods)
    return 0


def check_services(items, pods):
    """Each Service selects a pod of the recipe and targets ports it names."""
    for item in items:
        svc = item["object"]
        if svc.get("kind") != "Service":
            continue
        selected = [pod for _, w, pod in pods if w is not None and all(
            pod.get("metadata", {}).get("labels", {}).get(k) == v for k, v in svc["spec"].get("selector", {}).items())]
        if not selected:
            fail(f"{item['where']}: selects no pod of the recipe")
            continue
        named = {p.get("name"): p.get("containerPort") for pod in selected
                 for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        for port in svc["spec"].get("ports", []):
            target = port.get("targetPort", port.get("port"))
            if target not in named and target not in named.values():
                fail(f"{item['where']}: targetPort {target} is not a port of the pod ({named})")


# ---- slurm ----

def sbatch_directives(path):
    """{option: value} of the script's #SBATCH lines (--key=value or --key value)."""
    opts = {}
    for line in open(path):
        m = re.match(r"#SBATCH\s+--([\w-]+)(?:[= ](\S+))?", line)
        if m:
            opts[m.group(1)] = m.group(2)
    return opts


class SlurmJob:
    """One batch script run as Slurm would start it, its launchers and programs stood in."""

    def __init__(self, script, programs, scratch):
        self.script, self.scratch = script, scratch
        self.opts = sbatch_directives(script)
        self.standins = Standins(scratch, programs)
        self.launchers = os.path.join(scratch, "launchers")
        self.launch_log = os.path.join(scratch, "launchers.jsonl")
        os.makedirs(self.launchers, exist_ok=True)
        for name in ("mpirun", "srun", "scontrol", "ssh"):
            path = os.path.join(self.launchers, name)
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(os.path.join(HERE, 'slurm_standins.py'))} "
                        f"{shlex.quote(self.launch_log)} {name} \"$@\"\n")
            os.chmod(path, 0o755)

    @property
    def nodes(self):
        return int(self.opts.get("nodes", 1))

    @property
    def per_node(self):
        """Tasks (workers) per node: --ntasks-per-node, else --ntasks over the nodes."""
        if "ntasks-per-node" in self.opts:
            return int(self.opts["ntasks-per-node"])
        return -(-int(self.opts.get("ntasks", 1)) // self.nodes)

    @property
    def ntasks(self):
        return int(self.opts.get("ntasks", self.nodes * self.per_node))

    def node_names(self):
        """This machine for one node; for several, names no resolver knows (mpirun reaches them by the stand-in ssh)."""
        if self.nodes == 1:
            return [subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()]
        return [f"tpserve-node{i}" for i in range(1, self.nodes + 1)]

    def start(self, coordinator="exit:0", worker="exit:0"):
        self.standins.reset()
        if os.path.exists(self.launch_log):
            os.remove(self.launch_log)
        names = self.node_names()
        nodelist = names[0] if len(names) == 1 else f"tpserve-node[1-{len(names)}]"
        env = dict(os.environ, PATH=self.launchers + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                   TPSERVE_BIN=self.standins.dir, TPSERVE_REAL_MPIRUN=shutil.which("mpirun") or "",
                   TPSERVE_STANDIN_SSH=os.path.join(self.launchers, "ssh"),
                   TPSERVE_STANDIN_TPSERVE_COORDINATOR=coordinator, TPSERVE_STANDIN_TPSERVE_WORKER=worker,
                   SLURM_JOB_ID="4242", SLURM_JOBID="4242", SLURM_NTASKS=str(self.ntasks),
                   SLURM_NNODES=str(self.nodes), SLURM_JOB_NUM_NODES=str(self.nodes), SLURM_JOB_NODELIST=nodelist,
                   SLURM_NODELIST=nodelist, SLURM_SUBMIT_DIR=self.scratch, TMPDIR=self.scratch)
        if "ntasks-per-node" in self.opts:
            env["SLURM_NTASKS_PER_NODE"] = self.opts["ntasks-per-node"]
        return subprocess.Popen(["bash", self.script, "/models/Qwen3-8B"], env=env, cwd=self.scratch,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def launches(self, name):
        """The launcher stand-ins' calls named `name` (mpirun, srun, scontrol, ssh): their args."""
        if not os.path.exists(self.launch_log):
            return []
        return [r["args"] for r in map(json.loads, open(self.launch_log)) if r["name"] == name]

    def wait_for(self, name, count, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.standins.entries(name)) >= count:
                return True
            time.sleep(0.05)
        return False


def finish(proc, where, timeout=30):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        fail(f"{where}: the script did not end within {timeout} s; its output:\n{out}")
    return proc.returncode, out


def still_running(pids, grace=5.0):
    """The pids still alive after `grace` seconds (mpirun's SIGTERM, then SIGKILL, takes a moment)."""
    deadline = time.monotonic() + grace
    while True:
        alive = []
        for pid in pids:
            try:
                os.kill(pid, 0)
                alive.append(pid)
            except ProcessLookupError:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def check_slurm_run(job, where):
    """A clean run: the coordinator once, one worker per task with its Open MPI rank, the secret handed over;
    with several nodes, the workers spread over every node by mpirun's host list, local ranks 0.. on each."""
    entries = job.standins.entries()
    check_flags(entries, where)
    coordinators, workers = job.standins.entries("tpserve-coordinator"), job.standins.entries("tpserve-worker")
    ntasks = job.ntasks
    if len(coordinators) != 1:
        fail(f"{where}: tpserve-coordinator started {len(coordinators)} times, expected once")
        return
    args = coordinators[0]["args"]
    if flag_value(args, "tp") != str(ntasks):
        fail(f"{where}: --tp is {flag_value(args, 'tp')} but the job has --ntasks={ntasks}")
    ranks = sorted(int(w["env"].get("OMPI_COMM_WORLD_RANK", -1)) for w in workers)
    if ranks != list(range(ntasks)):
        fail(f"{where}: the workers' Open MPI ranks are {ranks}, expected 0..{ntasks - 1}")
    listen = flag_value(args, "worker-listen")
    if job.nodes > 1:
        check_nodes(job, listen, workers, where)
    for w in workers:
        if flag_value(w["args"], "coordinator") != listen:
            fail(f"{where}: a worker dials {flag_value(w['args'], 'coordinator')}, the coordinator listens on {listen}")
    for e in coordinators + workers:
        secret = e.get("secret_file")
        if not secret or secret.get("mode") != "0o600" or not secret.get("size"):
            fail(f"{where}: {e['name']} got no private, non-empty cluster secret file ({secret})")
    drain, notice = seconds(flag_value(args, "drain-timeout")), job.opts.get("signal", "")
    m = re.fullmatch(r"(?:B:)?TERM@(\d+)", notice or "")
    if not m or drain is None or int(m.group(1)) <= drain:
        fail(f"{where}: #SBATCH --signal={notice} must give SIGTERM more than --drain-timeout ({drain} s) before the end")


def check_nodes(job, listen, workers, where):
    names = job.node_names()
    if (listen or "").rsplit(":", 1)[0] != names[0]:
        fail(f"{where}: the coordinator's worker port {listen} is not on the first node, {names[0]}")
    local = sorted(int(w["env"].get("OMPI_COMM_WORLD_LOCAL_RANK", -1)) for w in workers)
    if local != sorted(list(range(job.per_node)) * job.nodes):
        fail(f"{where}: the workers' local ranks are {local}, expected 0..{job.per_node - 1} on each of {job.nodes} nodes")
    hosts = [flag_value(args, "host") for args in job.launches("mpirun")]
    want = ",".join(f"{n}:{job.per_node}" for n in names)
    if hosts != [want]:
        fail(f"{where}: mpirun's host lists are {hosts}, expected [{want!r}] (every node, a slot per GPU)")
    reached = sorted({next(a for a in args if not a.startswith("-")) for args in job.launches("ssh")})
    if reached != names:
        fail(f"{where}: mpirun started its daemons on {reached}, expected {names}")


def recipe_slurm(source, programs, scratch):
    if not shutil.which("mpirun"):
        print("skipped: no mpirun (Debian package openmpi-bin; scripts/install-deps.sh installs it)")
        return SKIP
    scripts = sorted(glob.glob(os.path.join(source, "deploy/slurm/*.sbatch")))
    for script in scripts:
        rel = os.path.relpath(script, source)
        job = SlurmJob(script, programs, tempfile.mkdtemp(dir=scratch))
        if str(job.per_node) != job.opts.get("gpus-per-node") or job.ntasks != job.nodes * job.per_node:
            fail(f"{rel}: {job.ntasks} tasks on {job.nodes} node(s), {job.per_node} a node, against "
                 f"--gpus-per-node={job.opts.get('gpus-per-node')} (one worker per GPU on every node)")
        # 1. The workers end cleanly (the coordinator told them to): the job stops
        # the coordinator and ends 0, and the secret file is gone.
        rc, out = finish(job.start(coordinator="hold"), f"{rel} (clean run)")
        check_slurm_run(job, f"{rel} (clean run)")
        if rc != 0 or job.standins.signals("tpserve-coordinator") != ["SIGTERM"]:
            fail(f"{rel} (clean run): exit {rc}, the coordinator got {job.standins.signals('tpserve-coordinator')}; "
                 f"expected exit 0 and SIGTERM to the coordinator; output:\n{out}")
        leftover = [e.get("env", {}).get("TPSERVE_CLUSTER_SECRET_FILE") for e in job.standins.entries()]
        if any(p and os.path.exists(p) for p in leftover):
            fail(f"{rel}: the cluster secret file outlives the job")
        # 2. scancel: SIGTERM to the batch script drains the coordinator, stops the workers, exits 0.
        ntasks = job.ntasks
        proc = job.start(coordinator="hold", worker="hold")
        if job.wait_for("tpserve-coordinator", 1) and job.wait_for("tpserve-worker", ntasks):
            time.sleep(0.3)  # the script reaches `wait -n`
            proc.send_signal(signal.SIGTERM)
            rc, out = finish(proc, f"{rel} (scancel)")
            if rc != 0 or job.standins.signals("tpserve-coordinator") != ["SIGTERM"]:
                fail(f"{rel} (scancel): exit {rc}, the coordinator got {job.standins.signals('tpserve-coordinator')}; "
                     f"expected exit 0 after SIGTERM to the coordinator; output:\n{out}")
            alive = still_running([w["pid"] for w in job.standins.entries("tpserve-worker")])
            if alive:
                fail(f"{rel} (scancel): workers {alive} outlive the job")
        else:
            finish(proc, f"{rel} (scancel)", timeout=1)
            fail(f"{rel} (scancel): the coordinator and {ntasks} workers did not all start")
        # 3. A worker dies: the job stops the coordinator and fails.
        rc, out = finish(job.start(coordinator="hold", worker="exit:3"), f"{rel} (a worker dies)")
        if rc != 3 or job.standins.signals("tpserve-coordinator") != ["SIGTERM"]:
            fail(f"{rel} (a worker dies): exit {rc}, the coordinator got {job.standins.signals('tpserve-coordinator')}; "
                 f"expected the worker's status 3 and SIGTERM to the coordinator; output:\n{out}")
        print(f"slurm: {rel}: a clean run, scancel and a dying worker behave; {ntasks} workers on {job.nodes} "
              f"node(s) under mpirun")
    return 0


# ---- the test's own test ----

# (recipe, file, text, replacement): each breaks one recipe with a flag no program has.
DRIFTS = [
    ("systemd", "deploy/systemd/tpserve-coordinator.service", "--drain-timeout 30s", "--drain-timeout 30s --tpp 2"),
    ("systemd", "deploy/systemd/tpserve-worker@.service", "--coordinator $TPSERVE_COORDINATOR",
     "--coordinator $TPSERVE_COORDINATOR --tpp 2"),
    ("kubernetes", "deploy/kubernetes/tpserve.yaml", "- --tp=2", "- --tpp=2"),
    ("kubernetes", "deploy/kubernetes/README.md", "--timeout, \"4\"", "--timout, \"4\""),
    ("slurm", "deploy/slurm/tpserve.sbatch", '--coordinator "$HOST:$WORKER_PORT"', '--coordinator "$HOST:$WORKER_PORT" --tpp 2'),
    ("slurm", "deploy/slurm/tpserve-2node.sbatch", '--coordinator "$HEAD:$WORKER_PORT"',
     '--coordinator "$HEAD:$WORKER_PORT" --tpp 2'),
]


def recipe_selftest(source, programs, scratch):
    """Each recipe with a flag the programs lack makes its test fail, naming the flag."""
    for i, (recipe, rel, text, replacement) in enumerate(DRIFTS):
        copy = os.path.join(scratch, f"source{i}")
        for part in ("deploy", "scripts", "coordinator"):
            shutil.copytree(os.path.join(source, part), os.path.join(copy, part), symlinks=True)
        path = os.path.join(copy, rel)
        original = open(path).read()
        if text not in original:
            fail(f"self-test: {rel} no longer holds {text!r}; update DRIFTS")
            continue
        with open(path, "w") as f:
            f.write(original.replace(text, replacement, 1))
        argv = [sys.executable, __file__, recipe, "--source", copy]
        for name, real in programs.items():
            argv += ["--program", f"{name}={real}"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        bad = re.search(r"--(\w+)", replacement.replace(text, "")).group(1)
        if out.returncode == SKIP:
            print(f"self-test: {recipe} skipped here, {rel} not checked")
        elif out.returncode == 0 or bad.replace("-", "_") not in out.stdout.replace("-", "_"):
            fail(f"self-test: {recipe} test passed or did not name '{bad}' with it in {rel}:\n{out.stdout}")
        else:
            print(f"self-test: {recipe} test fails on --{bad} in {rel}")
    return 0


RECIPES = {"coverage": recipe_coverage, "selftest": recipe_selftest, "systemd": recipe_systemd, "kubernetes": recipe_kubernetes,
           "slurm": recipe_slurm}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", choices=sorted(RECIPES))
    parser.add_argument("--source", required=True)
    parser.add_argument("--program", action="append", default=[], metavar="NAME=PATH",
                        help="a tpserve program the stand-ins check flags with")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    programs = {k: os.path.abspath(v) for k, v in (p.split("=", 1) for p in args.program)}
    source = os.path.abspath(args.source)
    for name, path in programs.items():
        if not os.access(path, os.X_OK):
            print(f"FAIL: {name} is not built at {path} (cmake --build build --target {name})")
            return 1
    scratch = tempfile.mkdtemp(prefix=f"deploy-{args.recipe}-")
    try:
        status = RECIPES[args.recipe](source, programs, scratch)
    finally:
        if args.keep:
            print(f"scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    if failures:
        print(f"{len(failures)} problem(s)")
        return 1
    print("skipped" if status == SKIP else "ok")
    return status


if __name__ == "__main__":
    sys.exit(main())
