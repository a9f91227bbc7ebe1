#!/usr/bin/env python
import os
import sys


def main() -> None:
    # Everything the service creates (data dir, database, run folders, engine homes) is private
    # to its user (R-FS3); the process's children inherit this.
    os.umask(0o077)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skillrunner.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
