from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from kernel.errors import ApplicationError
from skills.services import install_path


class Command(BaseCommand):
    help = "Install or update a skill from a folder or a zip file."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)

    def handle(self, *args, path: Path, **options):
        if not path.exists():
            raise CommandError(f"{path} does not exist")
        try:
            version = install_path(path)
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self.stdout.write(f"installed {version.skill.skill_id} {version.version}")
