"""cffi API-mode build of ``mrc._dp`` from csrc/.

The declarations come from the contract headers in csrc/include/ (``HEADERS``:
one per audience), between their ``CDEF BEGIN`` and ``CDEF END`` markers, so
Python sees exactly what C declares and every constant comes from the
compiler.
"""

import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
#: the contract by audience, each call declared once: the wire, the application API (the C
#: library's public header), driving a context by hand and the in-memory link, the fabric
#: simulator, benchmark support
HEADERS = [os.path.join(HERE, "include", h)
           for h in ("mrc_wire.h", "mrc/mrc.h", "mrc_manual.h", "mrc_sim.h", "mrc_bench.h")]
# the core (sans-I/O), lowest layer first; then the in-memory link; then the
# I/O side and the engine thread; then benchmark support (csrc/core.h, io.h)
SOURCES = ["wire.c", "crc32c.c", "ep.c", "rings.c", "ev.c", "cc_nscc.c", "qp.c", "requester.c", "completer.c", "responder.c",
           "evprobe.c", "dispatch.c", "simlink.c", "io_packet.c", "link_watch.c", "engine.c", "verbs.c",
           "simfab.c", "simfab_setup.c", "bench/blast.c", "bench/verify.c", "bench/udpping.c", "bench/pingpong.c"]


def cdef_text() -> str:
    out = []
    for h in HEADERS:
        with open(h) as f:
            text = f.read()
        out.append(text.split("/* CDEF BEGIN */", 1)[1].split("/* CDEF END */", 1)[0])
    return "\n".join(out)


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "mrc._dp",
    "".join(f'#include "{os.path.relpath(h, os.path.join(HERE, "include"))}"\n' for h in HEADERS),
    sources=[os.path.relpath(os.path.join(HERE, s)) for s in SOURCES],
    include_dirs=[os.path.relpath(os.path.join(HERE, "include")), os.path.relpath(HERE)],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-std=gnu11"]
    + os.environ.get("MRC_CFLAGS", "").split(),
    extra_link_args=os.environ.get("MRC_LDFLAGS", "").split(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
