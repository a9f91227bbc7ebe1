#!/usr/bin/env python
import os
import sys


def main() -> None:
    # Everything the service creates (data dir, database, run folders, engine homes) is private
    # to its user (R-FS3); the process's children inherit this.
    os.umask(0o077)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skillrunner.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A setting refused (local mode without the relay, a bad number): what to change, on one
        # line, without a traceback of the settings module's import.
        sys.exit(f"ImproperlyConfigured: {exc}")


if __name__ == "__main__":
    main()
