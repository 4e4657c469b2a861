"""The bearer keys of ``evolve serve``, ``evolve mcp --transport http`` and ``evolve a2a``: tenants' keys and
the operator's, for every protocol of ``evolve.serve.protocols``.

A tenant's key maps to its tenant: ``--key KEY=TENANT`` (repeatable), ``$EVOLVE_API_KEYS``
(``"key1=alice,key2=bob"``) and the ``[keys]`` table of a TOML file (``--keys FILE``). An operator key
(``--admin-key KEY``, repeatable; ``$EVOLVE_ADMIN_KEYS``, ``"key1,key2"``; ``keys = [...]`` in the same
file's ``[admin]`` table) opens the memory's defences (``memory.defences.trust``: distrust a writer, undo it,
release held memories, list them) and nothing else: it is no tenant, and a tenant's key never opens them.
``evolve a2a`` has no operator routes and reads no operator key. ::

    [keys]
    "sk-alice-3f9c..." = "alice"

    [admin]
    keys = ["sk-ops-b81e..."]

Every key is compared in constant time (``hmac.compare_digest``), against every key of its table
(``key_table``, ``admin_table``). Errors name where a bad key came from, never the key.

Example:
    >>> table = key_table({"sk-alice-3f9c": "alice"})
    >>> tenant_for("Bearer sk-alice-3f9c", table), tenant_for("Bearer sk-wrong", table)
    ('alice', None)
"""

from __future__ import annotations

import hmac
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from connectors import ConfigError

ADMIN_ENV = "EVOLVE_ADMIN_KEYS"
ENABLE_ADMIN = "--admin-key KEY, $EVOLVE_ADMIN_KEYS or keys = [...] in the [admin] table of the --keys file"
"""How an operator turns the operator routes and tools on (said wherever they are refused for being off)."""


# ---- tenants' keys ----------------------------------------------------------------------------------------


def check_keys(keys: Mapping[str, str]) -> dict[str, str]:
    """Validated ``{key: tenant}``; at least one, since an open server would mix every user in one namespace."""
    from evolve.spec import check_tenant  # here: building a command's parser loads no spec machinery

    if not keys:
        raise ConfigError(
            "evolve serve needs at least one API key (--key KEY=TENANT, --keys FILE or $EVOLVE_API_KEYS): "
            "without keys every caller would share one tenant's memories"
        )
    for i, (key, tenant) in enumerate(keys.items()):
        if not is_key(key):
            raise ConfigError(f"API key #{i + 1} (tenant {tenant!r:.80}) must be 1-512 characters without spaces")
        check_tenant(tenant)
    check_distinct(keys.values())
    return dict(keys)


def is_key(key: object) -> bool:
    return isinstance(key, str) and 0 < len(key) <= 512 and not any(c.isspace() for c in key)


def check_base_memory(memory: str, keys: Mapping[str, str]) -> None:
    """``[serve] memory = "base"`` serves the trained run to every key: refused for keys of several tenants,
    whose ratings would move each other's ranking (``evolve serve``, ``evolve mcp``, ``evolve a2a``)."""
    tenants = sorted(set(keys.values()))
    if memory == "base" and len(tenants) > 1:
        raise ConfigError(
            f'[serve] memory = "base" serves the trained run to every key, so one tenant\'s ratings would move '
            f"every other's ranking; these keys name {len(tenants)} tenants ({', '.join(tenants)}). Give every key "
            'one tenant, or serve each tenant its own memory (memory = "tenant")'
        )


def check_distinct(tenants: Iterable[str]) -> None:
    """Refuse tenants that differ only in case: a case-insensitive database collation would merge them."""
    seen: dict[str, str] = {}
    for tenant in tenants:
        other = seen.setdefault(tenant.casefold(), tenant)
        if other != tenant:
            raise ConfigError(f"tenants {other!r} and {tenant!r} differ only in case; give them distinct names")


def bearer(authorization: str | None) -> bytes | None:
    """The token of ``Authorization: Bearer <token>``, or None."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip().encode()


def tenant_for(authorization: str | None, keys: Sequence[tuple[bytes, str]]) -> str | None:
    """The tenant of ``Authorization: Bearer <key>``, or None; every key is compared in constant time."""
    given = bearer(authorization)
    if given is None:
        return None
    found = None
    for key, tenant in keys:
        if hmac.compare_digest(given, key) and found is None:
            found = tenant
    return found


def key_table(keys: Mapping[str, str]) -> list[tuple[bytes, str]]:
    """``tenant_for``'s table: the checked ``{key: tenant}`` (``check_keys``) as ``(key bytes, tenant)`` pairs."""
    return [(key.encode(), tenant) for key, tenant in check_keys(keys).items()]


def tenant_lookup(keys: Mapping[str, str]) -> Callable[[Any], str | None]:
    """``tenant_of(request)``: the tenant of a request's ``Authorization`` header (any object with ``.headers``,
    as Starlette's requests have), or None for a missing or wrong key."""
    table = key_table(keys)
    return lambda request: tenant_for(request.headers.get("authorization"), table)


def is_admin(authorization: str | None, keys: Sequence[bytes]) -> bool:
    """Whether ``Authorization: Bearer <key>`` carries an operator key; every key is compared in constant time."""
    given = bearer(authorization)
    if given is None:
        return False
    found = False
    for key in keys:
        found = hmac.compare_digest(given, key) or found
    return found


def admin_table(tenants: Mapping[str, str], keys: Sequence[str]) -> list[bytes]:
    """``is_admin``'s table: the operator ``keys``, checked against the tenants' (``load_admin_keys``), as bytes."""
    return [key.encode() for key in load_admin_keys(tenants=tenants, keys=keys)]


# ---- where keys come from -----------------------------------------------------------------------------------


def parse_pairs(items: Sequence[str], where: str) -> list[tuple[str, str]]:
    """``KEY=TENANT`` items (the tenant follows the last '='; keys may contain '='). Errors never echo a key."""
    pairs = []
    for i, item in enumerate(items, 1):
        if not item.strip():
            continue
        key, sep, tenant = item.strip().rpartition("=")
        if not sep or not key or not tenant:
            raise ConfigError(f"{where} entry #{i} must look like KEY=TENANT")
        pairs.append((key, tenant))
    return pairs


def read_keys_file(path: Path) -> dict[str, Any]:
    """The TOML of a keys file (``[keys]`` and, optionally, ``[admin]``)."""
    if not path.is_file():
        raise ConfigError(f'keys file {path} does not exist (expected TOML with a [keys] table of "KEY" = "TENANT")')
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"keys file {path}: not valid TOML: {e}") from None


def keys_file(path: Path) -> list[tuple[str, str]]:
    """The ``[keys]`` table of a TOML file: ``"KEY" = "TENANT"`` lines."""
    table = read_keys_file(path).get("keys")
    if not isinstance(table, dict) or not all(isinstance(t, str) for t in table.values()):
        raise ConfigError(f'keys file {path} must hold a [keys] table of "KEY" = "TENANT" strings')
    return list(table.items())


def load_keys(*, file: Path | None = None, pairs: Sequence[str] = (), env: str | None = None) -> dict[str, str]:
    """``{key: tenant}`` from a keys file, ``$EVOLVE_API_KEYS`` and ``--key`` items; at least one is required."""
    sources = [(str(file), keys_file(file))] if file is not None else []
    sources += [("$EVOLVE_API_KEYS", parse_pairs((env or "").split(","), "$EVOLVE_API_KEYS"))]
    sources += [("--key", parse_pairs(pairs, "--key"))]
    found: dict[str, str] = {}
    for where, items in sources:
        for key, tenant in items:
            if found.setdefault(key, tenant) != tenant:
                raise ConfigError(f"{where}: one API key is given to two tenants ({found[key]!r} and {tenant!r})")
    return check_keys(found)


def load_admin_keys(
    *, tenants: Mapping[str, str], file: Path | None = None, keys: Sequence[str] = (), env: str | None = None
) -> tuple[str, ...]:
    """The operator keys from the keys file's ``[admin]`` table, ``$EVOLVE_ADMIN_KEYS`` and ``--admin-key``
    items (none: the operator routes and tools are off). ``tenants`` are the tenants' keys: an operator key
    must be none of them."""
    sources: list[tuple[str, list[str]]] = []
    if file is not None:
        admin = read_keys_file(file).get("admin", {})
        listed = admin.get("keys", []) if isinstance(admin, dict) else None
        if not isinstance(listed, list) or not all(isinstance(k, str) for k in listed) or set(admin) - {"keys"}:
            raise ConfigError(f'keys file {file}: the [admin] table must hold only keys = ["KEY", ...] (operator keys)')
        sources.append((f"{file} [admin]", listed))
    sources += [
        (f"${ADMIN_ENV}", [k.strip() for k in (env or "").split(",") if k.strip()]),
        ("--admin-key", list(keys)),
    ]
    found: dict[str, None] = {}
    for where, items in sources:
        for i, key in enumerate(items, 1):
            if not is_key(key):
                raise ConfigError(f"{where}: operator key #{i} must be 1-512 characters without spaces")
            if key in tenants:
                raise ConfigError(
                    f"{where}: operator key #{i} is also the API key of tenant {tenants[key]!r}; an operator key "
                    "is no tenant's: give the operator a key of its own"
                )
            found[key] = None
    return tuple(found)


__all__ = [
    "ADMIN_ENV", "ENABLE_ADMIN", "admin_table", "bearer", "check_base_memory", "check_distinct", "check_keys",
    "is_admin", "key_table", "load_admin_keys", "load_keys", "tenant_for", "tenant_lookup",
]  # fmt: skip
