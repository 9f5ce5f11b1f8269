"""The ``ckptzip`` command line."""

from __future__ import annotations

import click

from ckptzip import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ckptzip")
def main() -> None:
    """Compress PyTorch training checkpoints, inspect and verify them."""


if __name__ == "__main__":
    main()
