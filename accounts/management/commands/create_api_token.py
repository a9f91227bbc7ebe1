from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from accounts.services import issue_token
from kernel.errors import ApplicationError


class Command(BaseCommand):
    help = "Create an API token for a user (created if missing); the key is printed alone on the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument(
            "--staff", action="store_true", help="make the user staff (may install skills, sees all runs)"
        )
        parser.add_argument("--name", default="", help='what the token is for (default: "Token N")')

    def handle(self, *args, username: str, staff: bool, name: str, **options):
        user, created = get_user_model().objects.get_or_create(username=username)
        if created:
            user.set_unusable_password()
        if staff and not user.is_staff:
            user.is_staff = True
        user.save()
        try:
            _, key = issue_token(user, name)
        except ApplicationError as exc:
            raise CommandError(f"{exc.message} ({exc.code})") from None
        self.stderr.write(
            f"{'Created' if created else 'Existing'} user {username}{' (staff)' if user.is_staff else ''}; new token:"
        )
        self.stdout.write(key)
