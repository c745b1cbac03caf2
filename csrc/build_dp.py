"""One build of the C data path: ``libmrc.so``, and the cffi API-mode module
``mrc._dp`` that links it.

``libmrc.so`` holds every source in ``SOURCES`` and exports only the ``mrc_*``
names (csrc/libmrc.map); the Python package and C programs
(``pkg-config --cflags --libs mrc``) load the same library. ``mrc._dp`` compiles
no data-path source: it wraps the declarations of the contract headers in
csrc/include/ (``HEADERS``: one per audience), between their ``CDEF BEGIN``
and ``CDEF END`` markers, so Python sees exactly what C declares and every
constant comes from the compiler, and finds the library next to itself
(rpath ``$ORIGIN``).

    python csrc/build_dp.py      # both, into mrc/ (MRC_CFLAGS, MRC_LDFLAGS: e.g. sanitizers)

Beside them, where libibverbs' headers are installed (libibverbs-dev),
``libmrc-verbs.so``: the libibverbs layer (csrc/ibv/, docs/verbs.md), a client
of libmrc's public calls, which exports only libibverbs' entry points at
their versions (csrc/ibv/libmrc-verbs.map).
"""

import os
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
#: the contract by audience, each call declared once: the wire, the application API (the C
#: library's public header), driving a context by hand and the in-memory link, the fabric
#: simulator, benchmark support
HEADERS = [os.path.join(HERE, "include", h)
           for h in ("mrc_wire.h", "mrc/mrc.h", "mrc_manual.h", "mrc_sim.h", "mrc_bench.h")]
# the sources by folder, lowest layer first (CONTRIBUTING.md: where a file goes): the wire format;
# the sans-I/O core; the drivers (raw-socket ports, the engine thread); the API calls; the in-memory
# link and the fabric simulator; opening by name and connection setup for C programs; benchmark support
LAYERS = ["wire", "core", "drivers", "api", "sim", "app", "bench"]
SOURCES = [f"{d}/{f}" for d in LAYERS for f in sorted(os.listdir(os.path.join(HERE, d))) if f.endswith(".c")]
IBV_SOURCES = ["ibv/base.c", "ibv/qp.c", "ibv/obj.c", "ibv/dev.c"]
IBV_HEADER = "/usr/include/infiniband/verbs.h"
IBV_LIBRARY = "libmrc-verbs.so"
LIBRARY = "libmrc.so"
SONAME = LIBRARY  # one version so far: the name is the soname
CFLAGS = ["-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-std=gnu11", "-fPIC"]


def env_flags(name: str) -> list[str]:
    """Extra compiler or linker flags from the environment (MRC_CFLAGS, MRC_LDFLAGS)."""
    return os.environ.get(name, "").split()


def build_library(out_dir: str, tmp_dir: str, compiler=None) -> str:
    """Compile ``SOURCES`` into ``out_dir``/libmrc.so (objects in ``tmp_dir``); returns its path."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler

    if compiler is None:
        compiler = new_compiler()
        customize_compiler(compiler)
    srcs = [os.path.join(HERE, s) for s in SOURCES]
    objs = compiler.compile(srcs, output_dir=tmp_dir, include_dirs=[os.path.join(HERE, "include"), HERE],
                            extra_postargs=CFLAGS + env_flags("MRC_CFLAGS"))
    os.makedirs(out_dir, exist_ok=True)
    compiler.link_shared_object(objs, LIBRARY, output_dir=out_dir, libraries=["pthread", "crypto"],
                                extra_postargs=[f"-Wl,-soname,{SONAME}",
                                                f"-Wl,--version-script={os.path.join(HERE, 'libmrc.map')}"]
                                + env_flags("MRC_LDFLAGS"))
    build_verbs_library(out_dir, tmp_dir, compiler)
    return os.path.join(out_dir, LIBRARY)


def build_verbs_library(out_dir: str, tmp_dir: str, compiler) -> str | None:
    """libmrc-verbs.so beside libmrc.so, linking it; None (and a line) without libibverbs' headers."""
    if not os.path.exists(IBV_HEADER):
        print(f"build_dp: {IBV_HEADER} is missing (apt-get install libibverbs-dev): no libmrc-verbs.so",
              file=sys.stderr)
        return None
    srcs = [os.path.join(HERE, s) for s in IBV_SOURCES]
    objs = compiler.compile(srcs, output_dir=os.path.join(tmp_dir, "ibv"),
                            include_dirs=[os.path.join(HERE, "include"), HERE],
                            extra_postargs=CFLAGS + env_flags("MRC_CFLAGS"))
    compiler.link_shared_object(objs, IBV_LIBRARY, output_dir=out_dir, libraries=["mrc", "dl"],
                                library_dirs=[out_dir],
                                extra_postargs=["-Wl,-rpath,$ORIGIN", f"-Wl,-soname,{IBV_LIBRARY}",
                                                f"-Wl,--version-script={os.path.join(HERE, 'ibv', 'libmrc-verbs.map')}"]
                                + env_flags("MRC_LDFLAGS"))
    return os.path.join(out_dir, IBV_LIBRARY)


def cdef_text() -> str:
    out = []
    for h in HEADERS:
        with open(h) as f:
            text = f.read()
        out.append(text.split("/* CDEF BEGIN */", 1)[1].split("/* CDEF END */", 1)[0])
    return "\n".join(out)


LIBRARY_DIRS: list[str] = []
ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "mrc._dp",
    "".join(f'#include "{os.path.relpath(h, os.path.join(HERE, "include"))}"\n' for h in HEADERS),
    include_dirs=[os.path.relpath(os.path.join(HERE, "include"))],
    libraries=["mrc"],
    # where libmrc.so is built: setup.py's build_ext adds the module's directory, __main__ mrc/
    library_dirs=LIBRARY_DIRS,
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-std=gnu11"]
    + env_flags("MRC_CFLAGS"),
    extra_link_args=["-Wl,-rpath,$ORIGIN"] + env_flags("MRC_LDFLAGS"),
)

if __name__ == "__main__":
    root = os.path.dirname(HERE)
    os.chdir(root)
    build_library(os.path.join(root, "mrc"), os.path.join(root, "build", "libmrc"))
    LIBRARY_DIRS.append(os.path.join(root, "mrc"))
    sys.exit(0 if ffibuilder.compile(verbose=True) else 1)
