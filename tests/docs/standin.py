#!/usr/bin/env python3
"""A stand-in for a program a deploy/ recipe starts, put where the recipe looks for it.

  standin.py LOG NAME REAL [ARGS...]

Appends one JSON line to LOG: the program's NAME, its ARGS, the environment
variables a recipe hands it (rank, world size, the cluster secret's file, ...)
and what the real program said of ARGS: REAL --only_check_args ARGS (abseil's
parse-only mode: an unknown flag or a value that does not parse exits 1 with
"ERROR: ..."), or, for tpserve-launch, its own parser (tpserve-launch --help
after the flags). REAL '-' checks nothing (a program that is not tpserve's).

Then it behaves as the test asks through TPSERVE_STANDIN_<NAME> (NAME upper-
cased, '-' as '_'): "exit:N" exits N at once (default "exit:0"); "hold" waits
for SIGTERM or SIGINT, records it, and exits 0 (a server that drains).
"""
import json
import os
import signal
import subprocess
import sys
import time

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
            "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
            "TPSERVE_CLUSTER_SECRET_FILE", "SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID")


def record(log, entry):
    with open(log, "a") as f:
        f.write(json.dumps(entry) + "\n")


def check_flags(name, real, args):
    """(exit status, message) of the real program's parse of `args`."""
    if real == "-":
        return 0, ""
    if name == "tpserve-launch":
        # Its parser stops at "--" (the program follows); --help after the flags
        # prints the usage once they parse, else it names the bad flag (exit 2).
        head = args[:args.index("--")] if "--" in args else args
        argv = [real] + head + ["--help"]
    else:
        cut = args.index("--") if "--" in args else len(args)
        argv = [real] + args[:cut] + ["--only_check_args"] + args[cut:]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return out.returncode, "\n".join(out.stderr.splitlines()[:3]) if out.returncode else ""


def main():
    log, name, real, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    rc, message = check_flags(name, real, args)
    entry = {"name": name, "args": args, "pid": os.getpid(),
             "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
             "check_rc": rc, "check_message": message}
    secret = os.environ.get("TPSERVE_CLUSTER_SECRET_FILE")
    if secret:  # a recipe that makes the secret: it must exist, private, when the program starts
        try:
            st = os.stat(secret)
            entry["secret_file"] = {"mode": oct(st.st_mode & 0o777), "size": st.st_size}
        except OSError as e:
            entry["secret_file"] = {"error": str(e)}
    record(log, entry)
    mode = os.environ.get("TPSERVE_STANDIN_" + name.upper().replace("-", "_"), "exit:0")
    if mode == "hold":
        got = []
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, lambda signum, _frame: got.append(signum))
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        record(log, {"name": name, "pid": os.getpid(), "signal": signal.Signals(got[0]).name if got else None})
        return 0
    return int(mode.split(":", 1)[1])


if __name__ == "__main__":
    sys.exit(main())
