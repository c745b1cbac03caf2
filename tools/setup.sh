#!/usr/bin/env bash
# Set up mrc on a fresh Debian machine (as root) and run the demo or the tests.
#
#   bash tools/setup.sh demo     install, then build the default fabric, prove it, tear down
#                                (demo --dash: with the live web view, mrc dash)
#   bash tools/setup.sh test     install (also tshark, clang and chromium), then run the whole
#                                test suite, the sanitizer build of the C tests, the
#                                fuzzers for 20 s each and a 10 s soak (what CI runs)
#   bash tools/setup.sh          install only (with OpenMPI, mpi4py and torch for the benches)
#
# It installs the Debian packages the fabric needs, makes a virtualenv in
# .venv, and installs mrc into it (building the C data path with cffi).
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-install}"

if [ "$(id -u)" != 0 ]; then
    echo "tools/setup.sh: run as root (it installs packages and builds network namespaces)" >&2
    exit 2
fi

need=()
for pair in ip:iproute2 nft:nftables tcpdump:tcpdump ping:iputils-ping cc:build-essential pkg-config:pkgconf; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
# the tests also read captures with tshark and the Lua dissector (tools/mrc.lua)
if [ "$what" = test ] && ! command -v tshark >/dev/null 2>&1; then
    need+=(tshark)
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
fi
# the switch queues' BPF program (mrc fabric up --link-rate, mrc fabric qos)
command -v clang >/dev/null 2>&1 || need+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
# authenticated MRC: AES-GCM and X25519 from OpenSSL's libcrypto (csrc/core/sec.c)
[ -f /usr/include/openssl/evp.h ] || need+=(libssl-dev)
# the libibverbs layer (libmrc-verbs.so, csrc/ibv) builds against rdma-core's headers; perftest and
# ibv_devinfo are what runs over it (mrc verbs run)
[ -f /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
if [ "$what" != demo ]; then
    command -v ib_write_bw >/dev/null 2>&1 || need+=(perftest)
    command -v ibv_devinfo >/dev/null 2>&1 || need+=(ibverbs-utils)
fi
# and fuzz the data path with libFuzzer (tools/fuzz.sh)
if [ "$what" = test ] && ! { command -v clang >/dev/null 2>&1 &&
        ls "$(clang -print-resource-dir)"/lib/linux/libclang_rt.fuzzer-*.a >/dev/null 2>&1; }; then
    need+=(libclang-rt-dev)
fi
# the collective bench's baseline (OpenMPI through mpi4py, and MPTCP sockets for it through mptcpize)
if [ "$what" != demo ]; then
    command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
    command -v mpicc >/dev/null 2>&1 || need+=(libopenmpi-dev)
    command -v mptcpize >/dev/null 2>&1 || need+=(mptcpize)
    # the baselines' fabric routes kernel traffic with FRR's BGP (mrc fabric up --routing bgp)
    [ -x /usr/lib/frr/bgpd ] && [ -x /usr/lib/frr/bfdd ] || need+=(frr)
fi
# the web view's browser test drives Debian's chromium (never a downloaded build)
if [ "$what" = test ]; then
    command -v chromium >/dev/null 2>&1 || need+=(chromium)
    command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
fi
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || need+=(python3-dev)
if [ "${#need[@]}" -gt 0 ]; then
    echo "== apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # packages with a service (frr) are installed without starting it: mrc starts the
    # daemons it needs inside its namespaces, and nothing of theirs should run on the machine itself
    policy=/usr/sbin/policy-rc.d
    made_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
    fi
    rc=0
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || rc=$?
    if [ -n "$made_policy" ]; then rm -f "$policy"; fi
    [ "$rc" -eq 0 ] || exit "$rc"
fi

if [ ! -x .venv/bin/python ]; then
    echo "== python3 -m venv .venv"
    python3 -m venv .venv
fi
extras="test,dash"
# torch (backend "mrc" for torch.distributed, its tests, bench/ddp_bench.py and the Gloo baseline) is pinned to
# the CPU build: a looser requirement fetches a CUDA build of several GB
[ "$what" != demo ] && extras="test,dash,mpi,torch"
echo "== pip install -e .[$extras]"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e ".[$extras]"
echo "== pkg-config mrc: the C library (mrc/libmrc.so) and its header (csrc/include/mrc/mrc.h)"
pcdir=/usr/local/lib/pkgconfig
mkdir -p "$pcdir"
cat > "$pcdir/mrc.pc" <<PC
# written by $PWD/tools/setup.sh: this checkout's libmrc
prefix=$PWD
includedir=\${prefix}/csrc/include
libdir=\${prefix}/mrc

Name: mrc
Description: MRC (Multipath Reliable Connection) in user space: the C library
URL: file://$PWD/docs/c-library.md
Version: $(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("mrc"))')
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lmrc
PC
echo "== build the BPF programs (csrc/bpf): the switch queues', and the SRv6 of a kernel without it (End, encap, End.DT6)"
.venv/bin/python -c 'from mrc.fabric import tcbpf
for n in ("port_queue", "usid_end", "host_encap", "host_decap"): tcbpf.build(n, "the fabric", force=True)'

case "$what" in
    demo) exec .venv/bin/mrc demo "${@:2}" ;;
    test)
        .venv/bin/python -m pytest -q tests
        echo "== the C data path again, built with AddressSanitizer and UBSan"
        bash tools/sanitize.sh "$PWD/.venv/bin/python"
        echo "== fuzz the parser, a responder and a requester, 20 s each (libFuzzer, ASan, UBSan)"
        bash tools/fuzz.sh 20
        echo "== soak: writes over a misbehaving in-memory link, every byte checked, 10 s"
        .venv/bin/mrc soak --seconds 10 --json
        ;;
    install) echo "installed: activate with '. .venv/bin/activate', then run 'mrc --help'" ;;
    *) echo "tools/setup.sh: unknown step '$what' (use demo, test or nothing)" >&2; exit 2 ;;
esac
