#!/bin/sh
# ssh for mpirun across network namespaces (tests/e2e/two_hosts_test.cc).
#
#   mpirun --mca plm_rsh_agent netns_ssh_agent.sh --host HOST0:N,HOST1:N ...
#
# mpirun starts its daemon (orted) on every host but its own by running
# `AGENT [ssh options] HOST COMMAND...`, as it would run ssh. This enters
# HOST's network namespace (TPSERVE_NETNS_HOSTS="HOST=NAMESPACE ...", set
# where mpirun starts), takes HOST as its host name (a UTS namespace of its
# own) and runs COMMAND through sh, as ssh's remote shell would. Each call is
# appended to $TPSERVE_NETNS_AGENT_LOG when that is set.
set -eu
[ -n "${TPSERVE_NETNS_AGENT_LOG:-}" ] && echo "$*" >> "$TPSERVE_NETNS_AGENT_LOG"
while [ $# -gt 0 ]; do
  case "$1" in
    -[lpiFoJ]) shift 2 ;;  # ssh options that take a value
    -*) shift ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "netns_ssh_agent: usage: $0 [ssh options] HOST COMMAND..." >&2; exit 255; }
host=$1
shift
ns=
for pair in ${TPSERVE_NETNS_HOSTS:-}; do
  [ "${pair%%=*}" = "$host" ] && ns=${pair#*=}
done
[ -n "$ns" ] || { echo "netns_ssh_agent: no namespace for host '$host' in TPSERVE_NETNS_HOSTS" >&2; exit 255; }
exec ip netns exec "$ns" unshare --uts -- sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
