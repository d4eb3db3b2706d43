"""Build the optional C accelerator; everything else is declared in pyproject.toml.

``optional=True``: where no compiler is available the install still succeeds and agentlog runs on
its pure-Python gate (same results, slower appends).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "agentlog._speedups",
            sources=["src/agentlog/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
