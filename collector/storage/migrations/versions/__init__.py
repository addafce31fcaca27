"""The revision scripts, oldest first by their number. Alembic loads them by path; this file
makes them a package so that they ship in the wheel."""
