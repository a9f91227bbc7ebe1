from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from skills.services import sync_skill_directory


class Command(BaseCommand):
    help = "Install new versions of the bundled skills and of the folders in SKILLRUNNER_SKILLS_DIR."

    def handle(self, *args, **options):
        for directory in (Path(settings.SKILLRUNNER_BUNDLED_SKILLS_DIR), Path(settings.SKILLRUNNER_SKILLS_DIR)):
            for installed in sync_skill_directory(directory):
                self.stdout.write(f"installed {installed}")
