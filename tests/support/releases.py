"""A next release of fenceline in a directory of its own: this source tree's app/, migrations/
and alembic.ini copied, with migrations past this release's head that a later release would
carry. Its `fenceline` is `python -m app.cli` run there (tests and bench/)."""

import shutil
import subprocess
import sys
from pathlib import Path

from app.ops.migrate import head_revision
from tests.support.servers import clean_env

SOURCE = Path(__file__).resolve().parents[2]
COPIED = ("app", "migrations")

MIGRATION = '''"""a later release's migration ({kind})

Revision ID: {revision}
Revises: {down}
"""

import sqlalchemy as sa
from alembic import op

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None
expand_only = {expand_only}


def upgrade() -> None:
    op.create_table("{table}", sa.Column("id", sa.Integer(), primary_key=True))
    if {expand_only}:  # a column the older release's models do not know
        op.add_column("task_instances", sa.Column("{table}_note", sa.String(64), nullable=True))


def downgrade() -> None:
    if {expand_only}:
        with op.batch_alter_table("task_instances") as batch_op:
            batch_op.drop_column("{table}_note")
    op.drop_table("{table}")
'''


def next_release(directory: Path, *migrations: tuple[str, bool]) -> Path:
    """A copy of this release in `directory`/next-release with `migrations` (revision,
    expand_only) chained after its head, each adding a table (and, if expand-only, a nullable
    column of task_instances). Answers the copy's root."""
    root = directory / "next-release"
    for name in COPIED:
        shutil.copytree(SOURCE / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(SOURCE / "alembic.ini", root / "alembic.ini")
    down = head_revision()
    for revision, expand_only in migrations:
        kind = "expand only" if expand_only else "contract"
        table = f"t_{revision.lower()}"
        (root / "migrations" / "versions" / f"{revision}.py").write_text(MIGRATION.format(
            kind=kind, revision=revision, down=down, expand_only=expand_only, table=table))
        down = revision
    return root


def release_command(root: Path) -> list[str]:
    """The `fenceline` command of the release at `root`."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(root)!r}); "
                                  "from app.cli import main; sys.exit(main())"]


def run_release(root: Path | None, *args: str, env: dict[str, str],
                timeout: float = 120) -> subprocess.CompletedProcess:
    """`fenceline *args` of the release at `root` (None: this one), to its end."""
    command = release_command(root or SOURCE)
    return subprocess.run([*command, *args], env={**env, "PYTHONDONTWRITEBYTECODE": "1"}, cwd=root or SOURCE,
                          capture_output=True, text=True, timeout=timeout)


def database_env(url: str, data_dir: Path) -> dict[str, str]:
    """This environment with no fenceline settings but the database and the data directory."""
    return {**clean_env(data_dir), "FENCELINE_DATABASE_URL": url}


def release_before(directory: Path, migration: str) -> Path | None:
    """The release before the one that added `migration` (a path under migrations/versions/),
    as the git history holds it: its app/, migrations/, alembic.ini and tests/support in
    `directory`/release-before. None outside a git checkout of the history."""
    found = subprocess.run(["git", "log", "--diff-filter=A", "--format=%H", "-1", "--", migration], cwd=SOURCE,
                           capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.strip():
        return None
    root = directory / "release-before"
    root.mkdir()
    archive = subprocess.run(["git", "archive", f"{found.stdout.strip()}^", *COPIED, "alembic.ini", "tests/__init__.py",
                              "tests/support"], cwd=SOURCE, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
    return root
