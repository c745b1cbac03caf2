from setuptools import find_packages, setup

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
    install_requires=["cffi>=1.15", "pyroute2==0.9.7", "numpy>=1.24", "prometheus-client>=0.17"],
    extras_require={
        # scapy is GPL: only the dissector, the tools and the tests use it
        "dissect": ["scapy>=2.5"],
        # topology files written in YAML (mrc.paths; JSON needs nothing)
        "yaml": ["pyyaml>=6"],
        # mrc dash, the web view (its page and Chart.js ship inside the package)
        "dash": ["aiohttp>=3.9"],
        "test": ["pytest>=7", "hypothesis>=6", "scapy>=2.5", "pyyaml>=6", "aiohttp>=3.9", "selenium>=4.10",
                 "matplotlib>=3.5"],
        # plots (bench/*.py --plots, mrc train --plot, mrc sim --plots)
        "bench": ["matplotlib>=3.5"],
        # the MPI baseline of bench/coll_bench.py (needs OpenMPI: tools/setup.sh installs it)
        "mpi": ["mpi4py>=3.1"],
    },
    entry_points={"console_scripts": ["mrc=mrc.tools.cli:main"]},
    zip_safe=False,
)
