"""The ``rlcheck`` command line."""

from __future__ import annotations

import click

from rlcheck import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rlcheck")
def main() -> None:
    """Run RL-guided generation campaigns against a validity check."""


if __name__ == "__main__":
    main()
