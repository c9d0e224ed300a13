"""The ``verikv`` command: ``verikv prove ...`` runs the proof suite, ``verikv size ...`` plans a device buffer."""

from __future__ import annotations

import sys
from collections.abc import Sequence

_USAGE = "usage: verikv {prove,size} [options]   (verikv COMMAND --help for details)"


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a subcommand; each subcommand module is imported only when used."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(_USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "prove":
        from verikv.proofs.runner import main as prove_main

        return prove_main(rest)
    if command == "size":
        from verikv.sizing.cli import main as size_main

        return size_main(rest)
    print(f"verikv: unknown command {command!r}\n{_USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
