"""Every connection string option greenpool accepts takes effect in greenpool.Client, or
the Client warns at construction, naming it and saying why: a walk over the parser's
option table. An option added to the table without a place here fails the walk.

The options the topology work acts on (replica set discovery, selection, monitoring) are
listed apart, in TOPOLOGY, and checked by their own tests.
"""

from __future__ import annotations

import ssl
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import greenpool
from greenpool import ConfigurationError
from greenpool.client.config import inert, uri
from tests.uri_tls import CLIENT_KEY_PASSWORD, Pki, make_pki

pytestmark = pytest.mark.timeout(60)

# No server listens there: construction is all these tests need.
BASE = "mongodb://user:pw@127.0.0.1:9/"

#: Acted on by the topology work (discovery, selection, monitoring), tested there.
TOPOLOGY = {"replicaSet", "directConnection", "localThresholdMS", "serverMonitoringMode",
            "srvMaxHosts", "srvServiceName", "srvAllowedHostsSuffix", "readPreference",
            "readPreferenceTags",
            "maxStalenessSeconds", "heartbeatFrequencyMS", "serverSelectionTimeoutMS"}

#: TLS options that need tls=true: alone, they warn.
TLS_SWITCHES = ("tlsInsecure", "tlsAllowInvalidCertificates", "tlsAllowInvalidHostnames")

Check = Callable[[greenpool.Client], object]


def link(client: greenpool.Client) -> Any:
    return client._link_options


def context(client: greenpool.Client) -> ssl.SSLContext:
    made = link(client).ssl_context
    assert made is not None
    return made


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("effects"))


def acts(pki: Pki) -> dict[str, tuple[str, Check]]:
    """Each option that acts: a value, and what it changes in the Client."""
    return {
        "maxPoolSize": ("7", lambda c: c.pool.options.max_pool_size == 7),
        "minPoolSize": ("1", lambda c: c.pool.options.min_pool_size == 1),
        "maxConnecting": ("3", lambda c: c.pool.options.max_connecting == 3),
        "maxIdleTimeMS": ("5000", lambda c: c.pool.options.max_idle_time == 5),
        "waitQueueTimeoutMS": ("250", lambda c: c.pool.options.wait_queue_timeout == 0.25),
        "timeoutMS": ("1500", lambda c: c.timeout == 1.5),
        "connectTimeoutMS": ("1500", lambda c: link(c).connect_timeout == 1.5),
        "socketTimeoutMS": ("2500", lambda c: link(c).socket_timeout == 2.5),
        "loadBalanced": ("true", lambda c: c.load_balanced and link(c).load_balanced),
        "appName": ("shop", lambda c: link(c).app_name == "shop"),
        "compressors": ("zlib", lambda c: link(c).compressors == ("zlib",)),
        "zlibCompressionLevel": ("5", lambda c: link(c).zlib_compression_level == 5),
        "retryReads": ("false", lambda c: c._operations.retry_reads is False),
        "retryWrites": ("false", lambda c: c._operations.retry_writes is False),
        "maxAdaptiveRetries": ("3", lambda c: c._operations.max_adaptive_retries == 3),
        "readConcernLevel": ("majority", lambda c: c.read_concern.level == "majority"),
        "w": ("2", lambda c: c.write_concern.document == {"w": 2}),
        "wTimeoutMS": ("100", lambda c: c.write_concern.document == {"wtimeout": 100}),
        "journal": ("true", lambda c: c.write_concern.document == {"j": True}),
        "fsync": ("true", lambda c: c.write_concern.document == {"fsync": True}),
        "connect": ("false", lambda c: not c.topology.started),
        "uuidRepresentation": ("standard",
                               lambda c: c.codec_options.uuid_representation == 4),
        "authMechanism": ("SCRAM-SHA-1", lambda c: link(c).credentials.mechanism
                          == "SCRAM-SHA-1"),
        "authSource": ("users", lambda c: link(c).credentials.source == "users"),
        "tls": ("true", lambda c: context(c).verify_mode == ssl.CERT_REQUIRED),
        "ssl": ("true", lambda c: context(c).verify_mode == ssl.CERT_REQUIRED),
        "tlsInsecure": ("true", lambda c: context(c).verify_mode == ssl.CERT_NONE
                        and not context(c).check_hostname),
        "tlsAllowInvalidCertificates": ("true",
                                        lambda c: context(c).verify_mode == ssl.CERT_NONE),
        "tlsAllowInvalidHostnames": ("true", lambda c: not context(c).check_hostname),
        "tlsCAFile": (str(pki.ca_file), lambda c: context(c).cert_store_stats()["x509_ca"] == 1),
        "tlsCRLFile": (str(pki.crl_file),
                       lambda c: context(c).verify_flags & ssl.VERIFY_CRL_CHECK_LEAF),
        # Loading the encrypted key needs the password: a wrong one refuses the Client.
        "tlsCertificateKeyFile": (str(pki.client_file), lambda c: True),
        "tlsCertificateKeyFilePassword": (CLIENT_KEY_PASSWORD, lambda c: True),
    }


def make(query: str, base: str = BASE) -> tuple[greenpool.Client, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        client = greenpool.Client(base + "?" + query)
    return client, [str(warning.message) for warning in caught]


def query_for(name: str, value: str, pki: Pki) -> str:
    query = f"{name}={quote(value, safe='')}"
    if name in TLS_SWITCHES:
        query += "&tls=true"
    if name == "tlsCertificateKeyFile":
        query += f"&tlsCertificateKeyFilePassword={CLIENT_KEY_PASSWORD}"
    if name == "tlsCertificateKeyFilePassword":
        query += f"&tlsCertificateKeyFile={quote(str(pki.client_file), safe='')}"
    return query


def test_every_option_has_a_place() -> None:
    known = {option.name for option in uri._OPTIONS.values()}
    placed = set(acts(make_pki_stub())) | TOPOLOGY | {name for name, _ in inert.INERT.values()}
    placed |= {"authMechanismProperties"}  # refused or warned: below
    # false is what greenpool does; true warns (tests/test_uri.py).
    placed |= {"enableOverloadRetargeting"}
    assert known == placed


def make_pki_stub() -> Pki:
    return Pki(*(Path(name) for name in ("ca", "crl", "server", "revoked", "client")))


@pytest.mark.parametrize("name", sorted(acts(make_pki_stub())))
def test_an_option_takes_effect_without_a_warning(name: str, pki: Pki) -> None:
    value, check = acts(pki)[name]
    client, warned = make(query_for(name, value, pki))
    with client:
        assert check(client), name
    assert warned == []


def test_a_wrong_key_password_refuses_the_client(pki: Pki) -> None:
    with pytest.raises(ConfigurationError, match="tlsCertificateKeyFile"):
        make(query_for("tlsCertificateKeyFile", str(pki.client_file), pki).replace(
            CLIENT_KEY_PASSWORD, "wrong"))


# What each inert option takes; the others are booleans.
INERT_VALUES = {"waitqueuemultiple": ("0", "4")}


@pytest.mark.parametrize(("key", "value"), [
    (key, value) for key in sorted(inert.INERT)
    for value in INERT_VALUES.get(key, ("true", "false"))])
def test_an_inert_option_warns_naming_itself_and_why(key: str, value: str) -> None:
    name, why = inert.INERT[key]
    client, warned = make(f"{name}={value}")
    client.close()
    assert warned == [f"connection string option {name} is ignored: {why}"]


@pytest.mark.parametrize("query", ["authSource=users",
                                   "authMechanismProperties=SERVICE_NAME:x"])
def test_credential_options_without_a_user_warn(query: str) -> None:
    name = query.partition("=")[0]
    client, warned = make(query, base="mongodb://127.0.0.1:9/")
    client.close()
    assert warned == [f"connection string option {name} is ignored: the connection string "
                      f"names no user to authenticate"]


def test_mechanism_properties_with_a_user_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="SCRAM takes no mechanism properties"):
        make("authMechanismProperties=SERVICE_NAME:x")


@pytest.mark.parametrize("name", TLS_SWITCHES)
def test_a_tls_switch_without_tls_warns(name: str) -> None:
    client, warned = make(f"{name}=true")
    client.close()
    assert warned == [f"connection string option {name} is ignored: TLS is off (tls=true "
                      f"turns it on)"]
