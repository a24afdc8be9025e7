"""``python -m cypressc.cli``: the same command line as the ``cypressc`` script."""

from cypressc.cli import main

main()
