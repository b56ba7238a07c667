"""``python -m gradwire`` = the ``gradwire`` command."""

from gradwire.cli import main

if __name__ == "__main__":
    main()
