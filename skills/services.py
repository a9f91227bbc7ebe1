"""Installing skills: every path (zip upload, folder, bundled set) ends in `install_package`."""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, BinaryIO

from django.conf import settings
from django.db import IntegrityError, transaction
from packaging.version import Version

from kernel.archives import ArchiveLimits, extract_zip

from .models import Skill, SkillVersion
from .packages import SkillPackage, SkillPackageError, load_skill_dir

logger = logging.getLogger(__name__)

# Stripped from packages: version-control metadata is never part of a skill.
STRIPPED_NAMES = (".git",)


def snapshot_root() -> Path:
    return settings.DATA_DIR / "skill-snapshots"


def temporary_snapshot_root() -> Path:
    """Where the snapshots of skills uploaded for one run live (R-UP4), until their run ends."""
    return snapshot_root() / ".temporary"


def staging_root() -> Path:
    """Where a package is unpacked and copied while it is checked and installed (runs.sweeps
    removes what a process killed in the middle left there)."""
    return settings.DATA_DIR / "tmp"


def _staging_dir() -> Path:
    path = staging_root()
    path.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="skill-", dir=path))


def archive_limits() -> ArchiveLimits:
    return ArchiveLimits(
        max_members=settings.SKILLRUNNER_ZIP_MAX_MEMBERS,
        max_total_bytes=settings.SKILLRUNNER_ZIP_MAX_TOTAL_BYTES,
        max_ratio=settings.SKILLRUNNER_ZIP_MAX_RATIO,
    )


def _check_newer(package: SkillPackage) -> None:
    skill = Skill.objects.filter(skill_id=package.skill_id, temporary=False).select_related("current").first()
    if skill and skill.current and Version(package.version) <= Version(skill.current.version):
        raise SkillPackageError(
            "SKILL_VERSION_NOT_NEWER",
            f"{package.skill_id} {skill.current.version} is installed; an update needs a strictly greater version than {package.version}",
        )


def _copy_snapshot(package: SkillPackage, target: Path) -> None:
    staging = _staging_dir()
    try:
        copy = staging / package.skill_id
        shutil.copytree(package.root, copy, ignore=shutil.ignore_patterns(*STRIPPED_NAMES), symlinks=False)
        target.parent.mkdir(parents=True, exist_ok=True)
        copy.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _new_version(skill: Skill, package: SkillPackage, target: Path, user) -> SkillVersion:
    return SkillVersion.objects.create(
        skill=skill,
        version=package.version,
        name=package.name,
        description=package.description,
        manifest=package.manifest,
        schemas=package.schemas,
        property_order={
            section: list((package.schemas.get(section) or {}).get("properties") or {})
            for section in ("input", "parameter")
        },
        engines=package.engines,
        unsupported_engines=package.unsupported_engines,
        effective_engines=package.effective_engines,
        execution_modes=package.execution_modes,
        max_attempt=package.max_attempt,
        artifacts=package.artifacts,
        warnings=package.warnings,
        snapshot_dir=str(target),
        package_sha256=package.fingerprint(),
        installed_by=user,
    )


def install_package(package: SkillPackage, *, user=None) -> SkillVersion:
    """Snapshot the validated package and make it the current version (R-SK6)."""
    _check_newer(package)
    # A fresh folder per install: processes installing at once (workers starting together)
    # never share, overwrite or delete one another's snapshot; the database decides who wins.
    target = snapshot_root() / package.skill_id / f"{package.version}-{uuid.uuid4().hex[:12]}"
    _copy_snapshot(package, target)
    try:
        with transaction.atomic():
            skill, _ = Skill.objects.select_for_update().get_or_create(skill_id=package.skill_id, temporary=False)
            if skill.current and Version(package.version) <= Version(skill.current.version):
                raise SkillPackageError(
                    "SKILL_VERSION_NOT_NEWER", f"{package.skill_id} {skill.current.version} was installed meanwhile"
                )
            version = _new_version(skill, package, target, user)
            skill.current = version
            skill.save(update_fields=["current", "updated_at"])
    except IntegrityError as exc:  # the same version was installed concurrently
        shutil.rmtree(target, ignore_errors=True)
        raise SkillPackageError(
            "SKILL_VERSION_NOT_NEWER", f"{package.skill_id} {package.version} was installed meanwhile"
        ) from exc
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    logger.info("installed skill %s %s", package.skill_id, package.version)
    return version


def temporary_version(package: SkillPackage, *, user) -> SkillVersion:
    """A snapshot of `package` for one run only (R-UP4): a temporary skill that is never current,
    so never listed or run by id. Call inside the transaction that gives it to its run; if that
    rolls back, remove_snapshot(version) removes the folder."""
    target = temporary_snapshot_root() / uuid.uuid4().hex
    _copy_snapshot(package, target)
    try:
        skill = Skill.objects.create(skill_id=package.skill_id, temporary=True)
        return _new_version(skill, package, target, user)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def remove_snapshot(version: SkillVersion) -> None:
    """A temporary skill's files, once its run needs them no more; its record stays for the audit."""
    shutil.rmtree(version.path, ignore_errors=True)


def _single_top_level(root: Path) -> Path:
    entries = [p for p in root.iterdir() if p.name != "__MACOSX"]
    if len(entries) != 1 or not entries[0].is_dir():
        names = ", ".join(sorted(p.name for p in entries)) or "nothing"
        raise SkillPackageError(
            "SKILL_PACKAGE_INVALID", f"a skill zip must hold exactly one top-level folder; found {names}"
        )
    return entries[0]


@contextmanager
def zipped_package(source: BinaryIO | IO[bytes] | Path, *, versioned: bool = True) -> Iterator[SkillPackage]:
    """The validated package in a zip (R-SK1–R-SK9, with the zip's safety checks), unpacked for
    the duration of the block; a refused archive leaves nothing behind. Without `versioned` (a
    package for one run only, R-UP8) runner.json need not name a version."""
    staging = _staging_dir()
    try:
        extract_zip(source, staging, archive_limits())  # an ArchiveError is the caller's coded error
        yield load_skill_dir(_single_top_level(staging), versioned=versioned)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def install_zip(source: BinaryIO | Path, *, user=None) -> SkillVersion:
    """Install a zipped package; a refused archive leaves nothing behind."""
    with zipped_package(source) as package:
        return install_package(package, user=user)


def install_path(path: Path, *, user=None) -> SkillVersion:
    if path.is_dir():
        return install_package(load_skill_dir(path), user=user)
    with open(path, "rb") as handle:
        return install_zip(handle, user=user)


def sync_skill_directory(directory: Path) -> list[str]:
    """Install every skill folder in `directory` whose version is new; returns what was installed.

    Folders placed by hand may predate `execution_modes` (R-SK4: loaded as auto, with a warning).
    """
    installed: list[str] = []
    if not directory.is_dir():
        return installed
    for folder in sorted(p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            package = load_skill_dir(folder, legacy=True)
            current = (
                Skill.objects.filter(skill_id=package.skill_id, temporary=False)
                .values_list("current__version", flat=True)
                .first()
            )
            if current and Version(package.version) <= Version(current):
                continue
            install_package(package)
            installed.append(f"{package.skill_id} {package.version}")
        except SkillPackageError as exc:
            logger.warning("skipping skill folder %s: %s %s", folder, exc.code, exc.message)
    return installed
