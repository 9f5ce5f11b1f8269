"""The compiled kernels (``ckptzip.kernels._native``); everything else is in pyproject.toml.

The extension is optional: without a working C compiler the build warns and goes on, and
``ckptzip.kernels`` runs its reference implementation (same results, slower).
"""

from __future__ import annotations

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class KernelBuild(build_ext):
    """Compiler flags by compiler: the kernels must not contract ``a*b + c`` into one fused
    multiply-add (the reference rounds twice), and are built optimised."""

    def build_extensions(self) -> None:
        msvc = self.compiler.compiler_type == "msvc"
        flags = ["/O2", "/fp:precise"] if msvc else ["-O3", "-ffp-contract=off"]
        for ext in self.extensions:
            ext.extra_compile_args = flags
        super().build_extensions()


setup(
    ext_modules=[
        Extension(
            "ckptzip.kernels._native",
            [
                "src/ckptzip/kernels/_native.c",
                "src/ckptzip/kernels/_entropy.c",
                "src/ckptzip/kernels/_delta.c",
                "src/ckptzip/kernels/_wide.c",
            ],
            # the ANS model both coders share and the vector search two passes share; listed
            # so a change rebuilds the library and the sdist carries them
            depends=["src/ckptzip/kernels/_ans.h", "src/ckptzip/kernels/_search.h"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": KernelBuild},
)
