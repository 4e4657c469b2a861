"""The task sets and run specs shipped with Evolve: the repository's top-level ``data/`` folder.

A wheel carries ``data/*.jsonl`` and ``data/*.toml`` as the resources of the package ``evolve.data``
(pyproject's ``package-dir`` maps ``data/`` there), read through ``importlib.resources``; a source
checkout, whose ``evolve/`` has no ``data`` folder, reads its own ``data/``. Every command and benchmark
finds the bundled files here, never through a path relative to its own source file.

A command line may name a bundled spec from any folder: ``facility_codes``, ``facility_codes.toml`` or
``data/facility_codes.toml`` (``spec_file``). An installed spec keeps a relative SQLite database under
``$EVOLVE_HOME`` rather than inside the installed package (``database_folder``).

Example:
    >>> bundled_file("facility_codes.jsonl").name
    'facility_codes.jsonl'
    >>> "facility_codes" in bundled_specs()
    True
    >>> spec_file("facility_codes") == bundled_file("facility_codes.toml")  # from a folder with no such file
    True
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from connectors.db import evolve_home
from connectors.errors import ConfigError

PACKAGE = "evolve.data"
CHECKOUT = Path(__file__).resolve().parents[2] / "data"  # evolve/envs/bundled.py -> the repository's data/


def bundled_root() -> Path:
    """The folder of the bundled files: the installed ``evolve.data``, else a source checkout's ``data/``."""
    try:
        root = importlib.resources.files(PACKAGE)
    except ModuleNotFoundError:  # a source checkout (or an editable install made before data/ was mapped)
        return CHECKOUT
    # A namespace package's root is a MultiplexedPath; a file in it is a plain Path (wheels install unzipped).
    return Path(str(root.joinpath("facility_codes.toml"))).parent


def bundled_file(name: str) -> Path:
    """One bundled file by name (``"facility_codes.jsonl"``).

    Raises:
        ConfigError: no such file is bundled; the message lists the bundled files.
    """
    path = bundled_root() / name
    if not path.is_file():
        have = ", ".join(sorted(p.name for p in bundled_root().iterdir() if p.suffix in (".jsonl", ".toml")))
        raise ConfigError(f"no bundled file {name!r} in {bundled_root()} (bundled: {have or 'none'})")
    return path


def bundled_specs() -> list[str]:
    """The bundled run specs' names (``facility_codes``, ...), sorted."""
    return sorted(p.stem for p in bundled_root().glob("*.toml"))


def spec_file(given: str | Path) -> Path:
    """The spec file a command names: ``given`` when it is a file, else the bundled spec it names.

    A bundled spec is named bare (``facility_codes``, ``facility_codes.toml``) or as the repository names it
    (``data/facility_codes.toml``), so the commands the docs show work from any folder once installed.

    Raises:
        ConfigError: neither; the message lists the bundled specs.
    """
    path = Path(given)
    if path.is_file():
        return path
    name = path.name.removesuffix(".toml")
    if path.parent in (Path("."), Path("data")) and name in bundled_specs():
        return bundled_file(f"{name}.toml")
    raise ConfigError(
        f"spec file {path} does not exist (expected a TOML file, see evolve/spec.py; or a bundled spec by name: "
        f"{', '.join(bundled_specs()) or 'none are installed'}, e.g. `evolve run facility_codes`)"
    )


def database_folder(spec: Path) -> Path:
    """The folder a spec's relative SQLite database is relative to: the spec's own, except for a bundled spec
    of an installed package, whose databases go under ``$EVOLVE_HOME`` (``runs/`` keeps the spec's own names):
    a package's folder may be read-only, and an uninstall would delete the runs with it."""
    root = bundled_root()
    if root != CHECKOUT and spec.resolve().parent == root.resolve():
        return evolve_home()
    return spec.parent


__all__ = ["CHECKOUT", "PACKAGE", "bundled_file", "bundled_root", "bundled_specs", "database_folder", "spec_file"]
