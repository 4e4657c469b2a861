"""One module for bearer keys and tenants (``evolve.serve.protocols.keys``): the tables every protocol checks a
request's key against, in constant time, and the lookup A2A and MCP build from them."""

from __future__ import annotations

import doctest
from types import SimpleNamespace

import pytest

from connectors import ConfigError
from evolve.serve.protocols import keys
from evolve.serve.protocols.keys import admin_table, is_admin, key_table, tenant_for, tenant_lookup

TENANTS = {"sk-alice-3f9c": "alice", "sk-bob-77ad": "bob"}


def test_a_request_maps_to_the_tenant_of_its_key_and_to_none_without_one() -> None:
    tenant_of = tenant_lookup(TENANTS)
    asked = {
        "Bearer sk-alice-3f9c": "alice",
        "bearer  sk-bob-77ad ": "bob",
        "Bearer sk-alice-3f9": None,
        "sk-alice-3f9c": None,
        "": None,
    }
    for header, tenant in asked.items():
        assert tenant_of(SimpleNamespace(headers={"authorization": header})) == tenant, header
    assert tenant_of(SimpleNamespace(headers={})) is None


def test_the_tables_hold_checked_keys_and_an_operator_key_is_no_tenants() -> None:
    table = key_table(TENANTS)
    assert sorted(table) == [(b"sk-alice-3f9c", "alice"), (b"sk-bob-77ad", "bob")]
    admins = admin_table(TENANTS, ["sk-ops-b81e"])
    assert is_admin("Bearer sk-ops-b81e", admins) and tenant_for("Bearer sk-ops-b81e", table) is None
    with pytest.raises(ConfigError, match="also the API key of tenant 'alice'"):
        admin_table(TENANTS, ["sk-alice-3f9c"])
    with pytest.raises(ConfigError, match="at least one API key"):
        key_table({})


def test_the_module_example_runs() -> None:
    assert doctest.testmod(keys).failed == 0
