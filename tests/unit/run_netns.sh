#!/usr/bin/env bash
# tests/unit/run_netns.sh PROGRAM MIN_RX_BYTES [SKIP_REASON] — runs PROGRAM
# as 2 MPI processes on two "hosts" made of network namespaces on this
# machine, so every byte between the ranks crosses a network interface (a
# veth pair) over TCP, never shared memory; for ctest
# (test_comm_mpi_netns, test_pe_trainers_netns).
#
#   pe_h0_<pid>: lo, pe0_<pid> 10.213.0.1/24 ─ veth ─ pe1_<pid> 10.213.0.2/24, lo :pe_h1_<pid>
#
# mpirun runs in the first namespace with --host 10.213.0.1:1,10.213.0.2:1;
# its "ssh" (plm_rsh_agent) is a script written here that starts the
# remote orted inside the second namespace (`ip netns exec`). Each side
# has its own UTS namespace and hostname (pe-h0, pe-h1), so Open MPI sees
# two nodes. Not bound to cores (--bind-to none): each "host" is the whole
# machine, so mpirun's default binding put every rank of every job on core
# 0; two jobs at once then starved a rank of CPU until PE_MPI_TIMEOUT (a
# runnable rank got no CPU for seconds while its peer spun in a blocking
# MPI call on the same core). Transports are forced: pml ob1, btl self,tcp, and TCP (MPI
# and Open MPI's own out-of-band channel) only on 10.213.0.0/24. The
# namespaces hold nothing but lo and the veth pair, so no packet can leave
# them. The veth counters prove the data crossed: each end's rx_bytes must
# grow by MIN_RX_BYTES at least (what each rank has to receive; CMake
# says how it is counted for each program).
#
# In the environment of tests/unit/mpi_env.sh, under `timeout`
# (PE_MPI_TEST_LIMIT seconds, default 100); the namespaces
# and every process inside them are removed on exit, whatever happened.
# Exit 77 (ctest: skipped) with a visible line when SKIP_REASON is set,
# mpirun is missing, or namespaces cannot be made here (not root, no
# CAP_NET_ADMIN). Run it by hand (as root):
#     bash tests/unit/run_netns.sh build/bin/test_pe_trainers $((2 << 20))
#
# PROGRAM `launch`: `run_netns.sh launch MIN_RX_BYTES "" SCRIPT [ARGS...]`
# runs `python3 -m pe.distributed.launch --ips 10.213.0.1,10.213.0.2
# --nproc_per_node 1 SCRIPT ARGS` in the first namespace instead (the
# transports and the agent given to mpirun as OMPI_MCA_* variables, which
# the launcher's mpirun reads), so the launcher's multi-host path runs for
# real; its logs go to $PE_NETNS_LOG_DIR (default: a temporary directory).
set -u
prog=$1
min_rx=$2
skip=${3:-}
shift 3 2>/dev/null || shift $#
name=$(basename "$prog")
[ "$prog" != launch ] || name="pe.distributed.launch ${1:-}"
skip() {
    echo "[  SKIPPED ] $name on two network namespaces: $*"
    exit 77
}
[ -z "$skip" ] || skip "$skip"
command -v mpirun >/dev/null 2>&1 || skip "mpirun not found (openmpi-bin; scripts/setup.sh installs it)"
command -v ip >/dev/null 2>&1 || skip "ip not found (iproute2)"
command -v unshare >/dev/null 2>&1 || skip "unshare not found (util-linux)"

limit=${PE_MPI_TEST_LIMIT:-100}
ns0=pe_h0_$$ ns1=pe_h1_$$
if0=pe0_$$ if1=pe1_$$ # at most 15 characters: pid_max is 4194304
addr0=10.213.0.1 addr1=10.213.0.2 net=10.213.0.0/24
tmp= run=

# Every process in our namespaces, by id: TERM, up to 5 s, then KILL.
kill_in_namespaces() {
    local pids i
    pids=$(ip netns pids "$ns0" 2>/dev/null; ip netns pids "$ns1" 2>/dev/null)
    [ -n "$pids" ] || return 0
    kill -TERM $pids 2>/dev/null
    for i in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns0" 2>/dev/null; ip netns pids "$ns1" 2>/dev/null)
        [ -n "$pids" ] || return 0
        sleep 0.5
    done
    echo "run_netns: killing what is left in $ns0, $ns1: $pids"
    kill -KILL $pids 2>/dev/null
}
cleanup() {
    local rc=$?
    trap - EXIT
    [ -z "$run" ] || kill -TERM "$run" 2>/dev/null # timeout, outside the namespaces
    kill_in_namespaces
    ip netns del "$ns0" 2>/dev/null # takes the veth pair with it
    ip netns del "$ns1" 2>/dev/null
    ip link del "$if0" 2>/dev/null # still here if setup stopped before moving it
    [ -z "$tmp" ] || rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM INT HUP # ctest's timeout, ^C: through cleanup

# Namespaces left by a run that was killed before its cleanup (its pid is gone).
for ns in $(ip netns list 2>/dev/null | grep -oE '^pe_h[01]_[0-9]+'); do
    kill -0 "${ns##*_}" 2>/dev/null && continue
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -z "$pids" ] || kill -KILL $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null
done

if ! err=$(ip netns add "$ns0" 2>&1); then
    trap - EXIT
    skip "cannot create a network namespace (root or CAP_NET_ADMIN needed): $err"
fi
if ! err=$(ip netns exec "$ns0" cat /sys/class/net/lo/operstate 2>&1); then
    skip "cannot enter a network namespace (ip netns exec): $err"
fi
if ! err=$(unshare --uts true 2>&1); then
    skip "cannot create a UTS namespace (unshare --uts): $err"
fi
set -e
ip netns add "$ns1"
ip link add "$if0" type veth peer name "$if1"
ip link set "$if0" netns "$ns0"
ip link set "$if1" netns "$ns1"
ip -n "$ns0" addr add "$addr0/24" dev "$if0"
ip -n "$ns1" addr add "$addr1/24" dev "$if1"
for ns in "$ns0" "$ns1"; do ip -n "$ns" link set lo up; done
ip -n "$ns0" link set "$if0" up
ip -n "$ns1" link set "$if1" up
tmp=$(mktemp -d /tmp/pe_netns.XXXXXX)
set +e

# The link comes up in a moment (no ping in minimal images: a bounded wait on
# the carrier instead; TCP retries meanwhile anyway).
for i in $(seq 1 20); do
    [ "$(ip netns exec "$ns0" cat /sys/class/net/$if0/operstate)" = up ] &&
        [ "$(ip netns exec "$ns1" cat /sys/class/net/$if1/operstate)" = up ] && break
    sleep 0.1
done

# mpirun's "ssh": `agent HOST COMMAND...` runs COMMAND as a remote shell would
# (its words joined, through sh), in HOST's namespaces.
cat >"$tmp/agent" <<EOF
#!/bin/sh
host=\$1
shift
case "\$host" in
$addr1) exec ip netns exec $ns1 unshare --uts sh -c 'hostname pe-h1 && exec sh -c "\$*"' sh "\$@" ;;
*) echo "run_netns agent: no namespace for host '\$host'" >&2; exit 1 ;;
esac
EOF
chmod +x "$tmp/agent"

rx() { ip netns exec "$1" cat "/sys/class/net/$2/statistics/rx_bytes"; }
rx0=$(rx "$ns0" "$if0") rx1=$(rx "$ns1" "$if1")

. "$(dirname "$0")/mpi_env.sh" # the remote orted inherits it through the agent

echo "run_netns: $name, rank 0 on $addr0 ($ns0), rank 1 on $addr1 ($ns1), TCP over $if0-$if1 only"
# In the background and waited for, so a signal (^C) reaches the trap at once.
if [ "$prog" = launch ]; then
    export OMPI_MCA_plm_rsh_agent="$tmp/agent" OMPI_MCA_plm_rsh_no_tree_spawn=1 OMPI_MCA_pml=ob1 \
        OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include="$net" OMPI_MCA_oob_tcp_if_include="$net" \
        OMPI_MCA_hwloc_base_binding_policy=none
    timeout -k 5 "$limit" ip netns exec "$ns0" unshare --uts sh -c 'hostname pe-h0 && exec "$@"' sh \
        /usr/bin/python3 -m pe.distributed.launch --ips "$addr0,$addr1" --nproc_per_node 1 \
        --log_dir "${PE_NETNS_LOG_DIR:-$tmp/log}" "$@" &
else
    timeout -k 5 "$limit" ip netns exec "$ns0" unshare --uts sh -c 'hostname pe-h0 && exec "$@"' sh \
        mpirun --oversubscribe -np 2 --host "$addr0:1,$addr1:1" --bind-to none \
        --mca plm_rsh_agent "$tmp/agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include "$net" --mca oob_tcp_if_include "$net" \
        "$prog" &
fi
run=$!
wait "$run"
rc=$?
run=
if [ "$rc" -ne 0 ]; then
    [ "$rc" -ne 124 ] || echo "run_netns: $name did not finish in $limit s"
    exit "$rc"
fi

d0=$(($(rx "$ns0" "$if0") - rx0)) d1=$(($(rx "$ns1" "$if1") - rx1))
echo "run_netns: received over the veth: $d0 bytes on $if0 (rank 0), $d1 bytes on $if1 (rank 1); at least $min_rx each expected"
if [ "$d0" -lt "$min_rx" ] || [ "$d1" -lt "$min_rx" ]; then
    echo "run_netns: FAILED: less than $min_rx bytes crossed the veth; the ranks talked another way"
    exit 1
fi
exit 0
