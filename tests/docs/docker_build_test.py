#!/usr/bin/env python3
"""What deploy/docker/Dockerfile's build depends on, checked without Docker.

The image could not be built once: its own package list had drifted from
scripts/install-deps.sh (no libcpp-httplib-dev, libssl-dev, openssl), and with
no .dockerignore `COPY . .` sent the build folders (GBs). Three checks:

  dockerfile  the build stage installs its packages by running
              scripts/install-deps.sh --build (the one list), apt-get install
              nowhere else in that stage, and installs the programs with
              `cmake --install` (the project's install rules);
  deps        every dependency the configured build found (CMakeCache.txt:
              find_package's <Name>_DIR, pkg-config's modules and libraries)
              comes from a Debian package that `install-deps.sh --print
              --build` installs, itself or through its Depends (GTest, GMock
              and benchmark: the full list, they are test-only); what is not
              from a package (CUDA under /usr/local) is listed and skipped;
  context     the context .dockerignore leaves: every file git tracks is in
              it, nothing git ignores is, and it is under 200 MB;
  steps       the Dockerfile's RUN steps as a script, as far as no Docker allows:
              each `&&` step is run against this build (`cmake --install` into a
              scratch /opt/tpserve, the `test -x` checks, the ldd/dpkg list of
              runtime packages, the run stage's `ldd | grep 'not found'`), checked
              (the -D options name this project's cache variables; every runtime
              package is a Debian package installed here) or skipped with a
              reason; a step the test does not know fails it. The image's
              ENTRYPOINT takes its CMD and the `docker run` arguments of the
              Dockerfile's header and the README (--only_check_args), and EXPOSE
              is the port they listen on.

usage: docker_build_test.py --source DIR --build DIR
"""
import argparse
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

TEST_ONLY_PACKAGES = {"GTest", "GMock", "benchmark"}  # find_package names of the tests and benchmarks
CONTEXT_LIMIT_BYTES = 200 * 1024 * 1024

failures = []


def fail(message):
    failures.append(message)
    print("FAIL: " + message)


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, **kwargs)


def install_deps_list(source, build_only):
    argv = [os.path.join(source, "scripts/install-deps.sh"), "--print"] + (["--build"] if build_only else [])
    out = run(argv)
    if out.returncode != 0:
        fail(f"{' '.join(argv)} failed: {out.stderr}")
        return set()
    return set(out.stdout.split())


# ---- dockerfile ----

def dockerfile_stages(path):
    """The instructions after each FROM, one line each: continuation lines joined, comments dropped."""
    lines = re.sub(r"\\\n", " ", open(path).read()).splitlines()
    stages, current = [], None
    for line in lines:
        if line.strip().startswith("#") or not line.strip():
            continue
        if re.match(r"\s*FROM\s", line, re.I):
            current = []
            stages.append(current)
        elif current is not None:
            current.append(line.strip())
    return stages


def check_dockerfile(source):
    path = os.path.join(source, "deploy/docker/Dockerfile")
    stages = dockerfile_stages(path)
    if len(stages) < 2:
        fail(f"{path}: expected a build stage and a run stage, found {len(stages)} FROM lines")
        return
    build = "\n".join(stages[0])
    if not re.search(r"RUN\s+\S*install-deps\.sh\s+--build\b", build):
        fail(f"{path}: the build stage does not run scripts/install-deps.sh --build")
    copied = re.search(r"COPY\s+scripts/install-deps\.sh\s", build)
    if not copied or copied.start() > build.find("install-deps.sh --build"):
        fail(f"{path}: scripts/install-deps.sh is not copied in before it runs")
    for line in stages[0]:
        if re.search(r"apt-get\s+(-\S+\s+)*install", line):
            fail(f"{path}: the build stage installs packages itself ({line.strip()[:80]}...); "
                 "add them to scripts/install-deps.sh instead")
    if "cmake --install" not in build:
        fail(f"{path}: the build stage does not install the programs with cmake --install")
    print(f"dockerfile: the build stage runs install-deps.sh --build and cmake --install")


# ---- deps ----

def dpkg_owners(path):
    out = run(["dpkg-query", "-S", path])
    if out.returncode != 0 and os.path.realpath(path) != path:  # an alternatives link
        out = run(["dpkg-query", "-S", os.path.realpath(path)])
    if out.returncode != 0:
        return []
    owners = set()
    for line in out.stdout.splitlines():
        if line.startswith("diversion "):
            continue
        head = line.split(": ", 1)[0]
        owners.update(p.strip().split(":")[0] for p in head.split(","))
    return sorted(owners)


def depends_closure(packages):
    """Every installed package reachable from `packages` through Depends / Pre-Depends."""
    seen, todo = set(), list(packages)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        out = run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", p])
        if out.returncode != 0:
            continue
        for clause in out.stdout.split(","):
            for alternative in clause.split("|"):
                name = alternative.strip().split(" ")[0].split(":")[0]
                if name and name not in seen:
                    todo.append(name)
    return seen


def cmake_dependencies(build):
    """(what, path) pairs for the dependencies the configured build found."""
    cache = open(os.path.join(build, "CMakeCache.txt")).read()
    found = []
    for name, path in re.findall(r"^(\w+)_DIR:PATH=(/\S*/cmake/\S*)$", cache, re.M):  # config packages
        found.append((f"find_package({name})", path, name))
    for var, path in re.findall(r"^pkgcfg_lib_(\w+):FILEPATH=(/\S*)$", cache, re.M):
        found.append((f"pkg-config library {var}", path, var))
    for var, module in re.findall(r"^(\w+)_MODULE_NAME:INTERNAL=(\S+)$", cache, re.M):
        pcdir = run(["pkg-config", "--variable=pcfiledir", module]).stdout.strip()
        if pcdir:
            found.append((f"pkg-config module {module}", os.path.join(pcdir, module + ".pc"), var))
    return found


def check_deps(source, build):
    build_list = install_deps_list(source, build_only=True)
    full_list = install_deps_list(source, build_only=False)
    if not build_list:
        return
    if not build_list <= full_list:
        fail(f"install-deps.sh --print --build lists {sorted(build_list - full_list)} that the full list lacks")
    if run(["dpkg-query", "--version"]).returncode != 0:
        print("deps: skipped, no dpkg on this machine")
        return
    build_closure = depends_closure(build_list)
    full_closure = depends_closure(full_list)
    checked, paths = 0, set()
    for what, path, name in cmake_dependencies(build):
        if path in paths:
            continue
        paths.add(path)
        owners = dpkg_owners(path)
        if not owners:
            print(f"deps: {what} at {path}: not from a Debian package, skipped")
            continue
        test_only = name in TEST_ONLY_PACKAGES
        closure = full_closure if test_only else build_closure
        if not any(o in closure for o in owners):
            listing = "install-deps.sh's list" if test_only else "install-deps.sh --build"
            fail(f"{what} comes from {', '.join(owners)} ({path}), which {listing} does not install; "
                 "add it to scripts/install-deps.sh")
        checked += 1
    print(f"deps: {checked} dependencies of {build} come from packages install-deps.sh installs")


# ---- context ----

def dockerignore_patterns(source):
    patterns = []
    for line in open(os.path.join(source, ".dockerignore")):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            fail(".dockerignore: exceptions (!) are not modelled by this test; extend it")
            continue
        patterns.append(os.path.normpath(line.lstrip("/")))
    return patterns


def pattern_regex(pattern):
    """Docker's matching (Go filepath.Match per path element, plus **)."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if pattern.startswith("/", i):
                out += "/?"
                i += 1
            continue
        c = pattern[i]
        out += "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
        i += 1
    return re.compile("^" + out + "$")


def excluded(path, regexes):
    """Whether `path` (relative, '/'-separated) or a folder above it matches a pattern."""
    parts = path.split("/")
    return any(r.match("/".join(parts[:n])) for n in range(1, len(parts) + 1) for r in regexes)


def check_context(source):
    regexes = [pattern_regex(p) for p in dockerignore_patterns(source)]
    size, files = 0, set()
    for root, dirs, names in os.walk(source):
        rel_root = os.path.relpath(root, source)
        rel_root = "" if rel_root == "." else rel_root + "/"
        dirs[:] = [d for d in dirs if not excluded(rel_root + d, regexes)]
        for n in names:
            rel = rel_root + n
            if excluded(rel, regexes):
                continue
            files.add(rel)
            try:
                size += os.lstat(os.path.join(root, n)).st_size
            except OSError:
                pass
    print(f"context: {len(files)} files, {size / 1e6:.1f} MB")
    if size > CONTEXT_LIMIT_BYTES:
        fail(f"the Docker context is {size / 1e6:.0f} MB (limit {CONTEXT_LIMIT_BYTES / 1e6:.0f} MB): "
             "a build folder or a data file is not in .dockerignore")
    if run(["git", "-C", source, "rev-parse"]).returncode != 0:
        print("context: not a git checkout; the tracked/ignored checks are skipped")
        return
    tracked = run(["git", "-C", source, "ls-files", "-z"]).stdout.split("\0")
    missing = [t for t in tracked if t and os.path.lexists(os.path.join(source, t)) and t not in files]
    if missing:
        fail(f".dockerignore leaves out {len(missing)} tracked files the build may need, e.g. {missing[:5]}")
    ignored = run(["git", "-C", source, "ls-files", "--others", "--ignored", "--exclude-standard",
                   "--directory", "-z"]).stdout.split("\0")
    leaked = [p.rstrip("/") for p in ignored if p and not excluded(p.rstrip("/"), regexes)]
    if leaked:
        fail(f"paths git ignores reach the Docker context (add them to .dockerignore): {leaked[:10]}")
    print(f"context: all {len([t for t in tracked if t])} tracked files in, {len([p for p in ignored if p])} "
          "ignored paths out")


# ---- steps ----

PREFIX = "/opt/tpserve"  # the image's install prefix, mapped to a scratch folder


def cache_variables(build):
    return set(re.findall(r"^(\w+):\w+=", open(os.path.join(build, "CMakeCache.txt")).read(), re.M))


def run_step(step, prefix):
    """Runs one step with the image's /opt/tpserve mapped to `prefix`; (ok, output)."""
    out = run(["bash", "-o", "pipefail", "-c", step.replace(PREFIX, prefix)])
    return out.returncode == 0, (out.stdout + out.stderr).strip()


def and_steps(command):
    """A RUN command's `&&`-joined steps (an && inside quotes stays in its step)."""
    steps, current, quote, i = [], "", None, 0
    while i < len(command):
        c = command[i]
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif command.startswith("&&", i):
            steps.append(current.strip())
            current, i = "", i + 2
            continue
        current += c
        i += 1
    return [s for s in steps + [current.strip()] if s]


def step_action(step, build, prefix):
    """How one `&&` step of a RUN runs here: (action, detail); action run, check, skip or None (unknown)."""
    if re.fullmatch(r"\S*install-deps\.sh --build", step):
        return "skip", "its packages are checked above (deps)"
    if re.fullmatch(r"rm -rf (/var/lib/apt/lists/\*|build-docker)", step):
        return "skip", "cleans the image"
    if step.startswith("cmake -S . -B build-docker "):
        # CMAKE_*: CMake's own (CMAKE_CUDA_ARCHITECTURES is cached only where CUDA is found).
        unknown = [d for d in re.findall(r"-D(\w+)=", step)
                   if not d.startswith("CMAKE_") and d not in cache_variables(build)]
        if unknown:
            return "fail", f"-D{', -D'.join(unknown)}: not cache variables of this project (CMakeCache.txt)"
        return "check", "every -D option of the project is one of its cache variables"
    if re.fullmatch(r"cmake --build build-docker --parallel", step):
        return "skip", f"{build} stands in for build-docker, built already"
    m = re.fullmatch(r"cmake --install build-docker --prefix " + PREFIX + r"( --strip)?", step)
    if m:
        return "run", f"cmake --install {shlex.quote(build)} --prefix {PREFIX}{m.group(1) or ''}"
    if re.match(r"(test -x |ldd |if ldd |cat )", step):
        return "run", step
    if step.startswith("useradd ") or step.startswith("apt-get update"):
        return "skip", "changes this machine (users, package lists)"
    if step.startswith("apt-get install "):
        return "packages", step
    return None, ""


def check_runtime_packages(step, prefix):
    """The run stage's apt-get install: every package it names is a Debian package installed here."""
    names = [w for w in re.sub(r"\$\([^)]*\)", "", step).split()[2:] if not w.startswith("-")]
    listing = os.path.join(prefix, "runtime-packages.txt")
    names += open(listing).read().split() if os.path.exists(listing) else []
    if not names:
        fail("deploy/docker/Dockerfile: the run stage installs no runtime packages (runtime-packages.txt is empty)")
    missing = [n for n in names if "install ok installed" not in run(["dpkg-query", "-W", "-f=${Status}", n]).stdout]
    if missing:
        fail(f"deploy/docker/Dockerfile: the run stage's packages {missing} are not installed Debian packages here")
    print(f"steps: the run stage's apt-get install names {len(names)} installed packages")


def docker_run_args(source):
    """The arguments after the image name of each `docker run ... tpserve ARGS` the Dockerfile and README show."""
    texts = [open(os.path.join(source, f)).read() for f in ("deploy/docker/Dockerfile", "deploy/docker/README.md")]
    found = []
    for text in texts:
        text = re.sub(r"\\\n#?\s*", " ", text)
        for m in re.finditer(r"docker run (.*)", text):
            words = shlex.split(m.group(1).split("#", 1)[0] if "#" in m.group(1) else m.group(1))
            if "tpserve" in words:
                found.append(words[words.index("tpserve") + 1:])
    return found


def check_entrypoint(source, stages, prefix):
    run_stage = "\n".join(stages[-1])
    entry = json.loads(re.search(r"^ENTRYPOINT\s+(\[.*\])$", run_stage, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD\s+(\[.*\])$", run_stage, re.M).group(1))
    exposed = {int(p) for p in re.findall(r"^EXPOSE\s+(\d+)", run_stage, re.M)}
    program = os.path.join(prefix, "bin", entry[0])
    if not os.access(program, os.X_OK):
        fail(f"deploy/docker/Dockerfile: the ENTRYPOINT {entry[0]} is not among the installed programs")
        return
    if run([program] + entry[1:] + cmd).returncode != 0:
        fail(f"deploy/docker/Dockerfile: ENTRYPOINT + CMD ({' '.join(entry + cmd)}) exits non-zero")
    for args in docker_run_args(source):
        out = run([program] + entry[1:] + args + ["--only_check_args"])
        if out.returncode != 0:
            fail(f"deploy/docker: `docker run ... tpserve {' '.join(args)}`: {entry[0]} says {out.stderr.strip()}")
        listen = None
        for i, a in enumerate(args):
            if a == "--listen" and i + 1 < len(args):
                listen = int(args[i + 1].rsplit(":", 1)[1])
        if listen is not None and listen not in exposed:
            fail(f"deploy/docker: `docker run` listens on {listen}, the image EXPOSEs {sorted(exposed)}")
    print(f"steps: ENTRYPOINT {entry} + CMD {cmd} runs; {len(docker_run_args(source))} `docker run` command lines parse")


def check_steps(source, build):
    path = os.path.join(source, "deploy/docker/Dockerfile")
    stages = dockerfile_stages(path)
    scratch = tempfile.mkdtemp(prefix="docker-steps-")
    prefix = os.path.join(scratch, PREFIX.lstrip("/"))
    try:
        for number, stage in enumerate(stages):
            for line in stage:
                m = re.match(r"RUN\s+(.*)", line)
                if not m:
                    continue
                for step in and_steps(m.group(1)):
                    action, detail = step_action(step, build, prefix)
                    if action is None:
                        fail(f"{path}: stage {number + 1}: the test does not know how to run `{step[:80]}`; "
                             "teach step_action in tests/docs/docker_build_test.py")
                    elif action == "fail":
                        fail(f"{path}: `{step[:60]}...`: {detail}")
                    elif action == "run":
                        ok, said = run_step(detail, prefix)
                        # CUDA's libraries come with the nvidia/cuda base images, not from packages.
                        unheld = [l for l in said.splitlines()
                                  if l.startswith("no package holds") and not l.startswith("no package holds /usr/local/cuda")]
                        if not ok or unheld:
                            fail(f"{path}: `{step[:80]}` failed here: {said[-2000:]}")
                        else:
                            print(f"steps: ran `{step[:70]}`")
                    elif action == "packages":
                        check_runtime_packages(step, prefix)
                    else:
                        print(f"steps: {action} `{step[:60]}`: {detail}")
        check_entrypoint(source, stages, prefix)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    args = parser.parse_args()
    check_dockerfile(args.source)
    check_deps(args.source, args.build)
    check_context(args.source)
    check_steps(os.path.abspath(args.source), os.path.abspath(args.build))
    if failures:
        print(f"{len(failures)} problem(s)")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
