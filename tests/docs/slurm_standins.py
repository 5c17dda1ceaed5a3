#!/usr/bin/env python3
"""Slurm's and Open MPI's launchers as a batch script sees them, on one machine without Slurm.

  slurm_standins.py LOG NAME [ARGS...]      NAME: mpirun, srun, scontrol or ssh

Each call is appended to LOG as a JSON line ({"name", "args"}). An option the
stand-in does not model exits 2 naming it, so a script that drifts from what
these tools take fails instead of passing unchecked.

  mpirun    the real mpirun (TPSERVE_REAL_MPIRUN), with Slurm's variables taken
            out of its environment so that it starts every rank here rather than
            through srun, root and oversubscription allowed (a container), and
            the ssh below (TPSERVE_STANDIN_SSH) as its agent: a --host list of
            nodes no resolver knows has each node's daemon started here.
  ssh       [options] HOST COMMAND...: runs COMMAND here through sh, as ssh's
            remote shell would on HOST (mpirun's daemon for that node), with
            TMPDIR a folder of HOST's own ($TMPDIR/node-HOST), as each node has
            its own /tmp.
  scontrol  `show hostnames [LIST]`: LIST (default $SLURM_JOB_NODELIST) one name a
            line; node[1-3,5] ranges expand.
  srun      -n/--ntasks, -N/--nodes, --ntasks-per-node, -w/--nodelist,
            --kill-on-bad-exit, --export, -l/--label, --overlap, --mpi: starts the
            tasks here with SLURM_PROCID / SLURM_LOCALID / SLURM_NODEID /
            SLURM_NTASKS, forwards SIGTERM/SIGINT, exits with the first failure.
"""
import json
import os
import re
import signal
import subprocess
import sys


def record(log, name, args):
    with open(log, "a") as f:
        f.write(json.dumps({"name": name, "args": args}) + "\n")


def refuse(name, what):
    print(f"stand-in {name}: {what} is not modelled (tests/docs/slurm_standins.py); teach it or change the script",
          file=sys.stderr)
    return 2


def expand_hostlist(text):
    """node[1-3,5],login -> node1 node2 node3 node5 login."""
    names = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", text):
        prefix, ranges = m.group(1), m.group(2)
        if not ranges:
            names.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{i:0{width}d}")
    return names


def scontrol(args):
    if args[:2] != ["show", "hostnames"]:
        return refuse("scontrol", " ".join(args[:2]))
    listing = args[2] if len(args) > 2 else os.environ.get("SLURM_JOB_NODELIST", "")
    print("\n".join(expand_hostlist(listing)))
    return 0


SRUN_VALUE = {"-n": "ntasks", "--ntasks": "ntasks", "-N": "nodes", "--nodes": "nodes",
              "--ntasks-per-node": "ntasks-per-node", "-w": "nodelist", "--nodelist": "nodelist",
              "--export": "export", "--mpi": "mpi"}
SRUN_BOOL = {"--kill-on-bad-exit", "-l", "--label", "--overlap"}


def srun(args):
    opts, i = {}, 0
    while i < len(args) and args[i].startswith("-"):
        key, eq, value = args[i].partition("=")
        if key in SRUN_VALUE:
            if not eq:
                i += 1
                value = args[i]
            opts[SRUN_VALUE[key]] = value
        elif key not in SRUN_BOOL:
            return refuse("srun", f"option {key}")
        i += 1
    program = args[i:]
    if not program:
        return refuse("srun", "a call without a program")
    nodes = int(opts.get("nodes", 1))
    ntasks = int(opts.get("ntasks", nodes * int(opts.get("ntasks-per-node", 1))))
    per_node = -(-ntasks // nodes)
    children = []
    for rank in range(ntasks):
        env = dict(os.environ, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank % per_node),
                   SLURM_NODEID=str(rank // per_node), SLURM_NTASKS=str(ntasks), SLURM_STEP_NUM_TASKS=str(ntasks))
        children.append(subprocess.Popen(program, env=env))
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signum, _f: [c.send_signal(signum) for c in children if c.poll() is None])
    status = 0
    for c in children:
        rc = c.wait()
        status = status or rc
    return status


def mpirun(args):
    real = os.environ.get("TPSERVE_REAL_MPIRUN")
    if not real:
        return refuse("mpirun", "a run without Open MPI installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1",
               # Both "nodes" are this machine: the second node's orted adopting the first's
               # shared-memory topology at a fixed address segfaulted in hwloc_shmem_topology_write
               # in one CI-like run of four; without the rtc hwloc component there is nothing to share.
               OMPI_MCA_rtc="^hwloc")
    if os.environ.get("TPSERVE_STANDIN_SSH"):
        env["OMPI_MCA_plm_rsh_agent"] = os.environ["TPSERVE_STANDIN_SSH"]
    os.execve(real, [real] + args, env)
    return 1


def ssh(args):
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in ("-l", "-p", "-i", "-F", "-o", "-J") else 1
    if len(args) < i + 2:
        return refuse("ssh", "a call without a host and a command")
    # Open MPI's daemons keep their session folders under TMPDIR
    # (ompi.HOSTNAME.UID/jf.N/...); both "nodes" are this machine with one
    # hostname, so with one TMPDIR they built the same tree at the same time,
    # and in one CI-like run of the sanitized suite the second node's daemon
    # failed "mkdir ... File exists" (session_dir.c) and the job never started.
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), "node-" + re.sub(r"[^A-Za-z0-9._-]", "_", args[i]))
    os.makedirs(tmp, exist_ok=True)
    os.execve("/bin/sh", ["sh", "-c", " ".join(args[i + 1:])], dict(os.environ, TMPDIR=tmp))
    return 1


def main():
    log, name, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    record(log, name, args)
    return {"mpirun": mpirun, "srun": srun, "scontrol": scontrol, "ssh": ssh}[name](args)


if __name__ == "__main__":
    sys.exit(main())
