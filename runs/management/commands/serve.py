import os
import signal
import subprocess
import sys
import time

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
        python = sys.executable
        # Each child leads a process group of its own (the worker's holds its django-q2 cluster):
        # a Ctrl-C reaches this process only, which stops them in order, and a child that does
        # not stop in time is killed with everything it forked.
        children = [
            subprocess.Popen(
                [python, "-m", "daphne", "-b", host, "-p", str(port), "skillrunner.asgi:application"],
                process_group=0,
            ),
            subprocess.Popen([python, "manage.py", "worker"], process_group=0),
        ]
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        self.stdout.write(f"Skill Runner on http://{host}:{port}/ (Ctrl-C stops web and worker)")
        while not stopping and all(child.poll() is None for child in children):
            time.sleep(0.2)
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        if not stopping:
            sys.exit(1)
