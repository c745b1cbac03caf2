import os

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext


class BuildWithLibrary(build_ext):
    """Build libmrc.so (csrc/build_dp.py: the one data-path build) beside
    mrc._dp, which links it, before the module itself, with libmrc-verbs.so
    (the libibverbs layer) where libibverbs' headers are installed; installed
    (and copied in place) with it."""

    def _libraries(self) -> list[tuple[str, str]]:
        """Each library where it is built, and where it goes in the source tree."""
        pkg = self.get_finalized_command("build_py").get_package_dir("mrc")
        out = []
        for name in ("libmrc.so", "libmrc-verbs.so"):
            built = os.path.join(self.build_lib, "mrc", name)
            if name == "libmrc.so" or os.path.exists(built):
                out.append((built, os.path.join(pkg, name)))
        return out

    def copy_extensions_to_source(self):
        super().copy_extensions_to_source()
        for built, dest in self._libraries():
            self.copy_file(built, dest, level=self.verbose)

    def _get_output_mapping(self):
        yield from super()._get_output_mapping()
        if self.inplace:
            yield from self._libraries()

    def get_outputs(self):
        outs = super().get_outputs()
        return outs if self.inplace else sorted([*outs, *(b for b, _ in self._libraries())])

    def build_extension(self, ext):
        if ext.name == "mrc._dp":
            import importlib.util

            spec = importlib.util.spec_from_file_location("build_dp", os.path.join("csrc", "build_dp.py"))
            build_dp = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(build_dp)
            out = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
            build_dp.build_library(out, os.path.join(self.build_temp, "libmrc"), self.compiler)
            ext.library_dirs = [*ext.library_dirs, out]
        super().build_extension(ext)


setup(
    name="mrc",
    version="0.1.0",
    description="MRC (Multipath Reliable Connection) in user space: engine, fabric and tools",
    license="Apache-2.0",
    python_requires=">=3.11",
    packages=find_packages(include=["mrc", "mrc.*"]),
    package_data={"mrc.dash": ["static/*.html", "static/*.js", "static/*.css", "static/vendor/*"]},
    setup_requires=["cffi>=1.15"],
    cffi_modules=["csrc/build_dp.py:ffibuilder"],
    cmdclass={"build_ext": BuildWithLibrary},
    install_requires=["cffi>=1.15", "pyroute2==0.9.7", "numpy>=1.24", "prometheus-client>=0.17"],
    extras_require={
        # scapy is GPL: only the dissector, the tools and the tests use it
        "dissect": ["scapy>=2.5"],
        # topology files written in YAML (mrc.paths; JSON needs nothing)
        "yaml": ["pyyaml>=6"],
        # mrc dash, the web view (its page and Chart.js ship inside the package)
        "dash": ["aiohttp>=3.9"],
        # mrc sim sweep on a Dask cluster (BSD-3-Clause)
        "sweep": ["dask[distributed]>=2024.1"],
        "test": ["pytest>=7", "hypothesis>=6", "scapy>=2.5", "pyyaml>=6", "aiohttp>=3.9", "selenium>=4.10",
                 "matplotlib>=3.5", "dask[distributed]>=2024.1"],
        # plots (bench/*.py --plots, mrc train --plot, mrc sim --plots)
        "bench": ["matplotlib>=3.5"],
        # the MPI baseline of bench/coll_bench.py (needs OpenMPI: tools/setup.sh installs it)
        "mpi": ["mpi4py>=3.1"],
        # backend "mrc" for torch.distributed (mrc.torch) and bench/ddp_bench.py: the CPU build, pinned (a looser
        # requirement fetches a CUDA build of several GB)
        "torch": ["torch==2.13.0"],
    },
    entry_points={"console_scripts": ["mrc=mrc.tools.cli:main"]},
    zip_safe=False,
)
