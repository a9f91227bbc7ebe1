#!/usr/bin/env python
import os
import sys

# The long-lived processes, whose threads' allocator caches would hold memory for good.
SERVICE_COMMANDS = ("serve", "worker")


def main() -> None:
    if sys.argv[1:2] and sys.argv[1] in SERVICE_COMMANDS:
        from processes.memory import restart_without_thread_caches

        restart_without_thread_caches(sys.orig_argv)  # first: before a second's worth of imports
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "skillrunner.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    from processes.startup import keep_unused_libraries_out, start_process

    try:
        # Everything the service creates is private to its user (R-FS3), and every command finds
        # the installation prepared, its secret key made, or ends with one line saying why (R-OP12).
        keep_unused_libraries_out()  # first: the settings import httpx
        start_process()
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A setting refused (local mode without the relay, a bad number): what to change, on one
        # line, without a traceback of the settings module's import.
        sys.exit(f"ImproperlyConfigured: {exc}")


if __name__ == "__main__":
    main()
