"""``python -m lre``: the same as the ``lre`` command."""

from lre.cli import main

if __name__ == "__main__":
    main()
