import os
import sys

from django.core.management import call_command
from django.core.management.base import BaseCommand

from skillrunner.startup import prepare_installation


class Command(BaseCommand):
    help = "Migrate, load bundled skills, then serve web (daphne) and worker together until SIGINT/SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))

    def handle(self, *args, host: str, port: int, **options):
        prepare_installation()  # before the children start: they read the key it creates
        call_command("migrate", interactive=False, verbosity=0)
        call_command("createcachetable", verbosity=0)
        call_command("load_skills")
        sys.stdout.flush()
        sys.stderr.flush()
        # The same process (pid, signals, exit status) goes on as a parent without Django.
        python = sys.executable
        os.execv(python, [python, "-m", "skillrunner.launcher", host, str(port)])
