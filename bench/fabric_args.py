"""The benches' shared options for the fabric they build: how it routes the kernel's traffic."""

from __future__ import annotations


def add_routing(ap) -> None:
    """``--routing`` (default bgp) and ``--bfd-ms`` (default 0) on ``ap``."""
    ap.add_argument("--bfd-ms", type=int, default=0, metavar="MS",
                    help="BFD on the BGP fabric's sessions every MS ms (default 0: none; every fault this bench "
                         "makes takes a link's carrier down, which BGP sees at once, and bfdd at 50 ms costs this "
                         "VM about a core: bench/bgp_convergence.py measures BFD)")
    ap.add_argument("--routing", choices=("bgp", "static"), default="bgp",
                    help="the kernel traffic's routing (default bgp: FRR's eBGP and ECMP; static: the SRv6 encap "
                         "through one spine per host pair)")
