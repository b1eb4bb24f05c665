"""greenpool's connection strings beyond the spec files: the settings, secrets,
messages, load-balancer validation and the TLS context."""

from __future__ import annotations

import doctest
import errno
import os
import re
import ssl
import time
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import dns.exception
import dns.name
import dns.rdatatype
import gevent
import pytest
from pymongo import errors as pymongo_errors

import greenpool
import greenpool.client.config.uri
from greenpool import ConfigurationError, PoolOptions
from greenpool.client.config.uri import (
    ClientSettings,
    Credentials,
    InvalidURIError,
    Secret,
    client_settings,
    parse_uri,
)
from tests.uri_dns import StubResolver, install_stub, seedlist_zone
from tests.uri_spec import MISSING, SEEDLIST_DIR
from tests.uri_tls import CLIENT_KEY_PASSWORD, Pki, handshake, make_pki, server_context

PASSWORD = "S3cr3t-Pa55"
needs_zone = pytest.mark.skipif(not (SEEDLIST_DIR / "README.md").exists(), reason=MISSING)


@pytest.fixture(autouse=True)
def stub_dns(monkeypatch: pytest.MonkeyPatch) -> StubResolver:
    return install_stub(monkeypatch, seedlist_zone())


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def option(path: Path) -> str:
    return quote(str(path), safe="/")


def parse_quietly(uri: str) -> ClientSettings:
    """parse_uri, failing the test on any warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return parse_uri(uri)


def warnings_of(uri: str) -> list[str]:
    """The warnings parsing ``uri`` gives (UserWarnings: a ResourceWarning of a socket
    an earlier test left to the garbage collector may be caught meanwhile)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parse_uri(uri)
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


# --- the settings -------------------------------------------------------------------


def test_defaults() -> None:
    settings = parse_quietly("mongodb://localhost")
    assert settings == ClientSettings(hosts=(("localhost", 27017),))
    assert settings.pool == PoolOptions()
    assert (settings.connect_timeout, settings.socket_timeout) == (20.0, None)
    assert settings.credentials is None and not settings.tls and not settings.load_balanced
    assert settings.server_monitoring_mode == "auto"
    assert dict(settings.extra) == {}


def test_every_field(pki: Pki) -> None:
    uri = (
        f"mongodb://ann:{PASSWORD}@db1.example.com:27018,[::1]/shop"
        "?maxPoolSize=20&minPoolSize=2&maxIdleTimeMS=60000&maxConnecting=3"
        "&waitQueueTimeoutMS=1500&appName=checkout&compressors=zlib&zlibCompressionLevel=6"
        "&connectTimeoutMS=5000&socketTimeoutMS=30000"
        f"&tls=true&tlsCAFile={option(pki.ca_file)}&tlsCertificateKeyFile={option(pki.client_file)}"
        f"&tlsCertificateKeyFilePassword={CLIENT_KEY_PASSWORD}&tlsAllowInvalidHostnames=true"
        "&heartbeatFrequencyMS=2000&serverMonitoringMode=poll&serverSelectionTimeoutMS=4000"
        "&replicaSet=rs0&retryReads=false&retryWrites=false&readPreference=secondaryPreferred"
        "&authSource=users&authMechanism=SCRAM-SHA-256&w=majority&readConcernLevel=local"
    )
    assert parse_quietly(uri) == ClientSettings(
        hosts=(("db1.example.com", 27018), ("::1", 27017)),
        pool=PoolOptions(max_pool_size=20, min_pool_size=2, max_idle_time_ms=60000,
                         max_connecting=3, wait_queue_timeout_ms=1500),
        credentials=Credentials("ann", Secret(PASSWORD), "users", "SCRAM-SHA-256"),
        database="shop",
        app_name="checkout",
        compressors=("zlib",),
        zlib_compression_level=6,
        connect_timeout=5.0,
        socket_timeout=30.0,
        tls=True,
        tls_ca_file=str(pki.ca_file),
        tls_certificate_key_file=str(pki.client_file),
        tls_certificate_key_file_password=Secret(CLIENT_KEY_PASSWORD),
        tls_allow_invalid_hostnames=True,
        heartbeat_frequency=2.0,
        server_monitoring_mode="poll",
        server_selection_timeout=4.0,
        replica_set="rs0",
        retry_reads=False,
        retry_writes=False,
        read_preference="secondaryPreferred",
        extra={"w": "majority", "readconcernlevel": "local"},
    )


def test_option_names_are_case_insensitive() -> None:
    settings = parse_quietly("mongodb://h/?MAXPOOLSIZE=7&appname=x&LoadBalanced=true")
    assert settings.pool.max_pool_size == 7
    assert (settings.app_name, settings.load_balanced) == ("x", True)


def test_unix_domain_socket() -> None:
    assert parse_quietly("mongodb://%2Ftmp%2Fmongodb-27017.sock").hosts == (
        ("/tmp/mongodb-27017.sock", None),)


@pytest.mark.parametrize(("query", "value"), [
    ("connectTimeoutMS=0", {"connect_timeout": None}),
    ("socketTimeoutMS=0", {"socket_timeout": None}),
    ("socketTimeoutMS=1500", {"socket_timeout": 1.5}),
    ("serverSelectionTimeoutMS=0", {"server_selection_timeout": 0}),
    ("maxIdleTimeMS=1234567", {"max_idle_time_ms": 1234567}),
    ("waitQueueTimeoutMS=2.5", {"wait_queue_timeout_ms": 2.5}),
])
def test_durations(query: str, value: dict[str, Any]) -> None:
    settings = parse_quietly(f"mongodb://h/?{query}")
    [(name, expected)] = value.items()
    assert getattr(settings.pool if "_ms" in name else settings, name) == expected


def test_tls_insecure_allows_invalid_certificates_and_host_names() -> None:
    settings = parse_quietly("mongodb://h/?tls=true&tlsInsecure=true")
    assert settings.tls_insecure
    assert settings.tls_allow_invalid_certificates and settings.tls_allow_invalid_hostnames


def test_tls_file_options_turn_tls_on(pki: Pki) -> None:
    assert parse_quietly(f"mongodb://h/?tlsCAFile={option(pki.ca_file)}").tls


def test_tls_false_with_tls_files_is_an_error(pki: Pki) -> None:
    with pytest.raises(ConfigurationError, match="tls=false conflicts with tlsCAFile"):
        parse_uri(f"mongodb://h/?tls=false&tlsCAFile={option(pki.ca_file)}")


@needs_zone
def test_srv_defaults_to_tls_and_keeps_its_host() -> None:
    settings = parse_quietly("mongodb+srv://test3.test.build.10gen.cc/")
    assert settings.tls and settings.srv_host == "test3.test.build.10gen.cc"
    assert settings.hosts == (("localhost.test.build.10gen.cc", 27017),)


@needs_zone
def test_srv_service_name(stub_dns: StubResolver) -> None:
    settings = parse_quietly("mongodb+srv://test22.test.build.10gen.cc/?srvServiceName=customname")
    assert settings.srv_service_name == "customname"
    assert ("_customname._tcp.test22.test.build.10gen.cc", "SRV") in stub_dns.queries


@needs_zone
def test_txt_record_options() -> None:
    settings = parse_quietly("mongodb+srv://test5.test.build.10gen.cc/")
    assert settings.replica_set == "repl0"
    assert settings.extra["authsource"] == "thisDB"  # no user: nobody to authenticate


def test_the_examples_in_the_docstrings() -> None:
    assert doctest.testmod(greenpool.client.config.uri).failed == 0


# --- credentials --------------------------------------------------------------------


@pytest.mark.parametrize(("uri", "expected"), [
    ("mongodb://h", None),
    ("mongodb://h/?authSource=users", None),
    ("mongodb://ann@h", Credentials("ann")),
    (f"mongodb://ann:{PASSWORD}@h/shop", Credentials("ann", Secret(PASSWORD), "shop")),
    (f"mongodb://ann:{PASSWORD}@h/shop?authSource=users",
     Credentials("ann", Secret(PASSWORD), "users")),
    (f"mongodb://ann:{PASSWORD}@h/?authMechanism=DEFAULT", Credentials("ann", Secret(PASSWORD))),
    (f"mongodb://ann:{PASSWORD}@h/shop?authMechanism=PLAIN",
     Credentials("ann", Secret(PASSWORD), "shop", "PLAIN")),
    (f"mongodb://ann:{PASSWORD}@h/?authMechanism=PLAIN",
     Credentials("ann", Secret(PASSWORD), "$external", "PLAIN")),
    ("mongodb://h/shop?authMechanism=MONGODB-X509",
     Credentials(None, None, "$external", "MONGODB-X509")),
    (f"mongodb://AKID:{PASSWORD}@h/?authMechanism=MONGODB-AWS"
     "&authMechanismProperties=AWS_SESSION_TOKEN:t0ken-xyz",
     Credentials("AKID", Secret(PASSWORD), "$external", "MONGODB-AWS",
                 {"AWS_SESSION_TOKEN": Secret("t0ken-xyz")})),
])
def test_credentials(uri: str, expected: Credentials | None) -> None:
    assert parse_quietly(uri).credentials == expected


def test_a_password_mechanism_needs_a_user_name() -> None:
    with pytest.raises(ConfigurationError, match="SCRAM-SHA-256 needs a user name"):
        parse_uri("mongodb://h/?authMechanism=SCRAM-SHA-256")


# --- secrets ------------------------------------------------------------------------


def test_secret_hides_itself() -> None:
    secret = Secret(PASSWORD)
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!r}"):
        assert PASSWORD not in shown
    assert secret.reveal() == PASSWORD
    assert secret == Secret(PASSWORD) != Secret("other")
    assert len({secret, Secret(PASSWORD)}) == 1


def test_settings_never_show_secrets(pki: Pki) -> None:
    token = "t0ken-xyz"
    settings = parse_quietly(
        f"mongodb://AKID:{PASSWORD}@h/?authMechanism=MONGODB-AWS"
        f"&authMechanismProperties=AWS_SESSION_TOKEN:{token}"
        f"&tlsCertificateKeyFile={option(pki.client_file)}"
        f"&tlsCertificateKeyFilePassword={CLIENT_KEY_PASSWORD}"
    )
    for shown in (repr(settings), str(settings), repr(settings.credentials)):
        for secret in (PASSWORD, token, CLIENT_KEY_PASSWORD):
            assert secret not in shown


def test_secrets_in_extra_are_hidden() -> None:
    # Without a user or mechanism the properties are not credentials: they
    # land in extra, still hidden.
    settings = parse_quietly("mongodb://h/?authMechanismProperties=AWS_SESSION_TOKEN:t0ken-xyz")
    assert settings.extra["authmechanismproperties"] == {"AWS_SESSION_TOKEN": Secret("t0ken-xyz")}
    assert "t0ken-xyz" not in repr(settings)


@pytest.mark.parametrize("uri", [
    f"mongodb://ann:{PASSWORD}@h/?loadBalanced=true&replicaSet=rs",
    f"mongodb://ann:{PASSWORD}@a,b/?loadBalanced=true",
    f"mongodb://ann:{PASSWORD}@h:99999",
    f"mongodb://ann:{PASSWORD}@h/bad db",
    f"mongodb://ann:{PASSWORD}@h/?tlsCAFile=/no/such/ca.pem",
    f"mongodb://ann:{PASSWORD}@h/?minPoolSize=9&maxPoolSize=3",
    f"mongodb+srv://ann:{PASSWORD}@h1,h2/",
    f"mongodb://ann:{PASSWORD}@h/?tlsCertificateKeyFilePassword={PASSWORD}&tls=false",
    # Malformed: PyMongo cuts the URI inside the password.
    "mongodb://ann:S3cr3t/Pa55@h",
    "mongodb://ann:S3cr3t?Pa55@h",
    "mongodb://ann:S3cr3t@Pa55@h",
    "mongodb://ann:S3cr3t:Pa55@h",
    "mongodb://ann:S3cr3t%Pa55@h",
])
def test_errors_never_show_the_password(uri: str) -> None:
    with pytest.raises(ConfigurationError) as failure:
        parse_uri(uri)
    error = failure.value
    assert error.__cause__ is None and error.__context__ is None
    shown = "".join([str(error), repr(error), *traceback.format_exception(error)])
    for piece in ("S3cr3t", "Pa55"):
        assert piece not in shown


def test_warnings_never_show_secrets() -> None:
    messages = warnings_of(f"mongodb://ann:{PASSWORD}@h/?maxPoolSize={PASSWORD}"
                           "&tlsCertificateKeyFilePasword=hunter22")
    assert len(messages) == 2
    assert not any(PASSWORD in m or "hunter22" in m for m in messages)
    assert any("maxPoolSize='***'" in m for m in messages)
    assert any("tlsCertificateKeyFilePasword='***'" in m for m in messages)


# --- warnings -----------------------------------------------------------------------


@pytest.mark.parametrize(("query", "quoted"), [
    ("maxIdleTimeMS=soon", "maxIdleTimeMS='soon'"),
    ("maxConnecting=0", "maxConnecting='0'"),
    ("loadBalanced=1", "loadBalanced='1'"),
    ("readPreference=bogus", "readPreference='bogus'"),
    ("compressors=brotli", "compressors='brotli'"),
    ("zlibCompressionLevel=12", "zlibCompressionLevel='12'"),
    ("maxPoolSie=10", "maxPoolSie='10'"),
])
def test_warnings_name_the_option_and_value(query: str, quoted: str) -> None:
    messages = warnings_of(f"mongodb://h/?{query}")
    assert len(messages) == 1 and quoted in messages[0], messages


def test_warnings_point_at_the_caller() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parse_uri("mongodb://h/?maxIdleTimeMS=soon")
    assert [w.filename for w in caught if issubclass(w.category, UserWarning)] == [__file__]


def test_warnings_follow_the_callers_filters() -> None:
    before = list(warnings.filters)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="maxIdleTimeMS='soon'"):
            parse_uri("mongodb://h/?maxIdleTimeMS=soon")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parse_uri("mongodb://h/?maxIdleTimeMS=soon")
    assert warnings.filters == before


@needs_zone
def test_concurrent_srv_parses_keep_their_warnings_apart(
    stub_dns: StubResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    def slow_resolve(*args: Any, **kwargs: Any) -> Any:
        gevent.sleep(0.01)  # a DNS lookup yields to other greenlets
        return stub_dns.resolve(*args, **kwargs)

    monkeypatch.setattr("dns.resolver.resolve", slow_resolve)
    filters, showwarning = list(warnings.filters), warnings.showwarning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        greenlets = [gevent.spawn(parse_uri, f"mongodb+srv://{host}/?maxIdleTimeMS={value}")
                     for host, value in (("test1.test.build.10gen.cc", "one"),
                                         ("test3.test.build.10gen.cc", "two"))]
        gevent.joinall(greenlets, timeout=10, raise_error=True)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 2
    assert all(any(f"maxIdleTimeMS='{v}'" in m for m in messages) for v in ("one", "two"))
    assert (warnings.filters, warnings.showwarning) == (filters, showwarning)


# --- errors -------------------------------------------------------------------------


@pytest.mark.parametrize(("uri", "words"), [
    ("mongodb://a,b/?loadBalanced=true", ["allows one host", "names 2: a:27017,b:27017"]),
    ("mongodb://a/?loadBalanced=true&replicaSet=rs", ["replicaSet", "loadBalanced=true"]),
    ("mongodb://a/?loadBalanced=true&directConnection=true",
     ["directConnection=true", "loadBalanced=true"]),
    ("mongodb+srv://test3.test.build.10gen.cc/?loadBalanced=true&srvMaxHosts=1",
     ["loadBalanced", "srvMaxHosts"]),
    # The conflict comes from DNS: the message says where to look.
    ("mongodb+srv://test1.test.build.10gen.cc/?loadBalanced=true",
     ["allows one host", "SRV records give 2"]),
    ("mongodb+srv://test24.test.build.10gen.cc/?replicaSet=rs", ["replicaSet", "TXT record"]),
])
def test_load_balancer_uri_validation(uri: str, words: list[str]) -> None:
    if uri.startswith("mongodb+srv") and not (SEEDLIST_DIR / "README.md").exists():
        pytest.skip(MISSING)
    with pytest.raises(ConfigurationError) as failure:
        parse_uri(uri)
    assert isinstance(failure.value, pymongo_errors.ConfigurationError)
    for word in words:
        assert word in str(failure.value)


def test_load_balanced() -> None:
    settings = parse_quietly("mongodb://lb.example.com/?loadBalanced=true")
    assert settings.load_balanced and settings.pool.load_balanced


def test_a_malformed_uri_is_also_pymongos_invalid_uri() -> None:
    with pytest.raises(InvalidURIError, match="^a connection string must start with mongodb:// "
                       r"or mongodb\+srv://, not 'postgres://'$") as failure:
        parse_uri("postgres://h")
    assert isinstance(failure.value, pymongo_errors.InvalidURI)
    assert isinstance(failure.value, ConfigurationError)


def test_not_a_string() -> None:
    with pytest.raises(ConfigurationError, match="must be a str, not bytes"):
        parse_uri(b"mongodb://h")  # type: ignore[arg-type]


def test_pool_option_conflicts_name_both_values() -> None:
    with pytest.raises(ConfigurationError, match=r"minPoolSize \(9\).*maxPoolSize \(3\)"):
        parse_uri("mongodb://h/?minPoolSize=9&maxPoolSize=3")


@pytest.mark.parametrize("name", ["tlsCAFile", "tlsCertificateKeyFile", "tlsCRLFile",
                                  "TLSCAFILE"])
def test_a_missing_tls_file_is_named(name: str) -> None:
    with pytest.raises(ConfigurationError) as failure:
        parse_uri(f"mongodb://h/?{name}=/no/such/ca.pem")
    assert str(failure.value) == (
        f"connection string option {name}='/no/such/ca.pem': cannot read the file: "
        "no such file (No such file or directory)")


def test_a_tls_file_that_is_a_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as failure:
        parse_uri(f"mongodb://h/?tlsCAFile={option(tmp_path)}")
    assert str(failure.value) == (
        f"connection string option tlsCAFile='{tmp_path}': cannot read the file: "
        "it is a directory")


def test_an_unreadable_tls_file_is_named(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    # The tests may run as root, whom file modes do not stop: the operating
    # system's refusal is played by os.open.
    def refuse(path: str, flags: int) -> int:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    monkeypatch.setattr(greenpool.client.config.uri.os, "open", refuse)
    with pytest.raises(ConfigurationError) as failure:
        parse_uri(f"mongodb://h/?tlsCertificateKeyFile={option(pki.client_file)}")
    assert str(failure.value) == (
        f"connection string option tlsCertificateKeyFile='{pki.client_file}': cannot read "
        "the file: permission denied (Permission denied)")


@needs_zone
def test_a_missing_srv_record_is_an_error() -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        parse_uri("mongodb+srv://test4.test.build.10gen.cc/")


def test_a_dns_timeout_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    def time_out(*args: Any, **kwargs: Any) -> Any:
        raise dns.exception.Timeout(timeout=0.1)

    monkeypatch.setattr("dns.resolver.resolve", time_out)
    with pytest.raises(ConfigurationError, match=r"timed out|timeout"):
        parse_uri("mongodb+srv://test1.test.build.10gen.cc/?connectTimeoutMS=100")


@needs_zone
def test_connect_timeout_bounds_the_srv_and_txt_lookups_together(
    stub_dns: StubResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    def slow_resolve(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)  # in the lookup's worker thread
        return stub_dns.resolve(*args, **kwargs)

    monkeypatch.setattr("dns.resolver.resolve", slow_resolve)
    with pytest.raises(ConfigurationError) as failure:
        parse_uri("mongodb+srv://test5.test.build.10gen.cc/?connectTimeoutMS=450")
    # Each lookup alone fits in 450 ms: only a deadline shared by both fails the TXT one.
    assert re.fullmatch(r"the DNS lookup of the TXT records of 'test5\.test\.build\.10gen\.cc' "
                        r"timed out after 0\.\d+ s \(the time left before its deadline\)",
                        str(failure.value)), failure.value


# --- the TLS context ----------------------------------------------------------------


def context(uri: str) -> ssl.SSLContext:
    result = parse_quietly(uri).ssl_context()
    assert result is not None
    return result


def test_no_tls_no_context() -> None:
    assert parse_quietly("mongodb://h").ssl_context() is None


def test_the_context_verifies_by_default(pki: Pki) -> None:
    client = context(f"mongodb://h/?tlsCAFile={option(pki.ca_file)}")
    assert (client.verify_mode, client.check_hostname) == (ssl.CERT_REQUIRED, True)
    handshake(client, server_context(pki.server_file), "localhost")
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(client, server_context(pki.server_file), "db.example.com")


def test_without_a_ca_file_the_system_cas_decide(pki: Pki) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(context("mongodb://h/?tls=true"), server_context(pki.server_file), "localhost")


def test_allow_invalid_hostnames_still_checks_the_certificate(pki: Pki) -> None:
    client = context(f"mongodb://h/?tlsCAFile={option(pki.ca_file)}&tlsAllowInvalidHostnames=true")
    assert (client.verify_mode, client.check_hostname) == (ssl.CERT_REQUIRED, False)
    handshake(client, server_context(pki.server_file), "db.example.com")
    untrusting = context("mongodb://h/?tls=true&tlsAllowInvalidHostnames=true")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(untrusting, server_context(pki.server_file), "db.example.com")


@pytest.mark.parametrize("query", ["tlsAllowInvalidCertificates=true", "tlsInsecure=true"])
def test_allow_invalid_certificates(pki: Pki, query: str) -> None:
    client = context(f"mongodb://h/?tls=true&{query}")
    assert (client.verify_mode, client.check_hostname) == (ssl.CERT_NONE, False)
    handshake(client, server_context(pki.server_file), "db.example.com")


def test_client_certificate_with_an_encrypted_key(pki: Pki) -> None:
    server = server_context(pki.server_file, client_ca=pki.ca_file)
    client = context(f"mongodb://h/?tlsCAFile={option(pki.ca_file)}"
                     f"&tlsCertificateKeyFile={option(pki.client_file)}"
                     f"&tlsCertificateKeyFilePassword={CLIENT_KEY_PASSWORD}")
    handshake(client, server, "localhost")
    with pytest.raises(ssl.SSLError, match="PEER_DID_NOT_RETURN_A_CERTIFICATE"):
        handshake(context(f"mongodb://h/?tlsCAFile={option(pki.ca_file)}"), server, "localhost")


def test_a_wrong_key_password_is_named_not_shown(pki: Pki) -> None:
    settings = parse_quietly(f"mongodb://h/?tlsCertificateKeyFile={option(pki.client_file)}"
                             "&tlsCertificateKeyFilePassword=wrong-guess-42")
    with pytest.raises(ConfigurationError, match="tlsCertificateKeyFile") as failure:
        settings.ssl_context()
    assert str(pki.client_file) in str(failure.value)
    assert "wrong-guess-42" not in "".join(traceback.format_exception(failure.value))


def test_an_encrypted_key_without_a_password_fails_at_once(pki: Pki) -> None:
    # OpenSSL would otherwise ask on the terminal, and wait.
    settings = parse_quietly(f"mongodb://h/?tlsCertificateKeyFile={option(pki.client_file)}")
    with pytest.raises(ConfigurationError, match="give its passphrase as tlsCertificateKey"):
        settings.ssl_context()


def test_crl_file_rejects_revoked_servers(pki: Pki) -> None:
    client = context(f"mongodb://h/?tlsCAFile={option(pki.ca_file)}"
                     f"&tlsCRLFile={option(pki.crl_file)}")
    assert client.verify_flags & ssl.VERIFY_CRL_CHECK_LEAF
    handshake(client, server_context(pki.server_file), "localhost")
    with pytest.raises(ssl.SSLCertVerificationError, match="revoked"):
        handshake(client, server_context(pki.revoked_server_file), "localhost")


@pytest.fixture
def copied_ca(pki: Pki, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ca.pem"
    path.write_bytes(pki.ca_file.read_bytes())
    yield path


def test_a_tls_file_gone_after_parsing_is_named(copied_ca: Path) -> None:
    settings = parse_quietly(f"mongodb://h/?tlsCAFile={option(copied_ca)}")
    copied_ca.unlink()
    with pytest.raises(ConfigurationError, match=f"tlsCAFile '{copied_ca}' does not exist"):
        settings.ssl_context()


def test_a_tls_file_that_is_not_pem_is_named(copied_ca: Path) -> None:
    copied_ca.write_text("not a certificate\n")
    settings = parse_quietly(f"mongodb://h/?tlsCAFile={option(copied_ca)}")
    with pytest.raises(ConfigurationError, match=f"tlsCAFile '{copied_ca}' could not be loaded"):
        settings.ssl_context()


# --- every option's bad value, in greenpool's words ---------------------------------

# A bad value of each option greenpool knows: (value, as the message quotes it, what
# the message says is accepted). Options that take any value are None.
MILLISECONDS = "expected a number of milliseconds >= 0"
BOOLEAN = "expected true or false"
BAD_VALUES: dict[str, tuple[str, str, str] | None] = {
    "maxPoolSize": ("-1", "'-1'", "expected a whole number >= 0"),
    "minPoolSize": ("x", "'x'", "expected a whole number >= 0"),
    "maxConnecting": ("0", "'0'", "expected a whole number >= 1"),
    "maxIdleTimeMS": ("soon", "'soon'", f"{MILLISECONDS} (0: never idle)"),
    "waitQueueTimeoutMS": ("-1", "'-1'", f"{MILLISECONDS} (0: no limit)"),
    "timeoutMS": ("inf", "'inf'", f"{MILLISECONDS} (0: no limit)"),
    "connectTimeoutMS": ("nan", "'nan'", f"{MILLISECONDS} (0: no limit)"),
    "socketTimeoutMS": ("-2", "'-2'", f"{MILLISECONDS} (0: no limit)"),
    "serverSelectionTimeoutMS": ("1e400", "'1e400'", MILLISECONDS),
    "heartbeatFrequencyMS": ("499", "'499'", "expected a number of milliseconds >= 500"),
    "localThresholdMS": ("-1", "'-1'", MILLISECONDS),
    "directConnection": ("yes", "'yes'", BOOLEAN),
    "loadBalanced": ("1", "'1'", BOOLEAN),
    "retryReads": ("TRUE", "'TRUE'", BOOLEAN),
    "retryWrites": ("no", "'no'", BOOLEAN),
    "maxAdaptiveRetries": ("-1", "'-1'", "expected a whole number >= 0"),
    "enableOverloadRetargeting": ("yes", "'yes'", BOOLEAN),
    "journal": ("maybe", "'maybe'", BOOLEAN),
    "tls": ("on", "'on'", BOOLEAN),
    "ssl": ("1", "'1'", BOOLEAN),
    "tlsInsecure": ("y", "'y'", BOOLEAN),
    "tlsAllowInvalidCertificates": ("t", "'t'", BOOLEAN),
    "tlsAllowInvalidHostnames": ("False", "'False'", BOOLEAN),
    "tlsDisableOCSPEndpointCheck": ("0", "'0'", BOOLEAN),
    "tlsDisableCertificateRevocationCheck": ("x", "'x'", BOOLEAN),
    "replicaSet": ("", "''", "expected a replica set name, not nothing"),
    "srvMaxHosts": ("-1", "'-1'", "expected a whole number >= 0"),
    "srvServiceName": ("", "''", "expected a service name, not nothing"),
    "srvAllowedHostsSuffix": ("co.uk", "'co.uk'", "'co.uk' is a public suffix (anyone may "
                              "register a name under it), so it would let a forged SRV record "
                              "name any host"),
    "serverMonitoringMode": ("push", "'push'", "expected one of auto, stream, poll"),
    "appName": ("é" * 65, repr("é" * 65), "expected at most 128 bytes of UTF-8, not 130"),
    "compressors": ("brotli", "'brotli'",
                    "'brotli' is not a compressor (expected snappy, zlib, zstd, noop)"),
    "zlibCompressionLevel": ("10", "'10'", "expected a whole number from -1 to 9"),
    "readPreference": ("PRIMARY", "'PRIMARY'", "expected one of primary, primaryPreferred, "
                       "secondary, secondaryPreferred, nearest"),
    "readPreferenceTags": ("dc", "'dc'", "expected a tag set: name:value pairs separated by "
                           "commas (dc:ny,rack:1), or nothing for any server"),
    "maxStalenessSeconds": ("0", "'0'",
                            "expected -1 (no maximum) or a positive whole number of seconds"),
    "readConcernLevel": ("", "''", "expected a read concern level, not nothing"),
    "w": ("-1", "'-1'", "expected a number of servers >= 0, majority, or a tag set's name"),
    "wTimeoutMS": ("1.5", "'1.5'", "expected a whole number >= 0"),
    "uuidRepresentation": ("java", "'java'", "expected one of unspecified, standard, "
                           "pythonLegacy, javaLegacy, csharpLegacy"),
    "authMechanism": ("SCRAM-SHA-512", "'SCRAM-SHA-512'", "expected one of DEFAULT, "
                      "SCRAM-SHA-1, SCRAM-SHA-256, MONGODB-X509, GSSAPI, PLAIN, MONGODB-AWS, "
                      "MONGODB-OIDC"),
    "authSource": ("", "''", "expected a database name, not nothing"),
    "authMechanismProperties": ("SERVICE_NAME:x,REALM:y", "'SERVICE_NAME:x,REALM:***'",
                                "'REALM' is not a property (expected AWS_SESSION_TOKEN, "
                                "CANONICALIZE_HOST_NAME, ENVIRONMENT, SERVICE_HOST, "
                                "SERVICE_NAME, SERVICE_REALM, TOKEN_RESOURCE)"),
    "tlsCAFile": ("/no/such.pem", "'/no/such.pem'",
                  "cannot read the file: no such file (No such file or directory)"),
    "tlsCertificateKeyFile": ("/no/such.pem", "'/no/such.pem'",
                              "cannot read the file: no such file (No such file or directory)"),
    "tlsCRLFile": ("/no/such.pem", "'/no/such.pem'",
                   "cannot read the file: no such file (No such file or directory)"),
    "tlsCertificateKeyFilePassword": None,
    "fsync": ("sure", "'sure'", BOOLEAN),
    "connect": ("later", "'later'", BOOLEAN),
    "waitQueueMultiple": ("-2", "'-2'", "expected a whole number >= 0"),
}
# A bad value of these raises: going on without it would connect differently.
STRICT = {"authMechanism", "authSource", "authMechanismProperties", "tlsCAFile",
          "tlsCertificateKeyFile", "tlsCRLFile", "w", "wTimeoutMS", "journal", "fsync",
          "readConcernLevel"}


def test_every_option_has_a_bad_value_here() -> None:
    known = {option.name for option in greenpool.client.config.uri._OPTIONS.values()}
    assert known == set(BAD_VALUES)


@pytest.mark.parametrize("name", [name for name, bad in BAD_VALUES.items() if bad])
@pytest.mark.parametrize("spelling", [str, str.upper], ids=["as-the-spec", "upper-case"])
def test_a_bad_value_names_the_option_as_written_the_value_and_what_it_takes(
    name: str, spelling: Any
) -> None:
    written = spelling(name)
    value, quoted, accepted = BAD_VALUES[name]  # type: ignore[misc]
    uri = f"mongodb://ann:pw@h/?{written}={quote(value, safe='')}"
    if name in STRICT:
        with pytest.raises(ConfigurationError) as failure:
            parse_uri(uri)
        assert str(failure.value) == f"connection string option {written}={quoted}: {accepted}"
        return
    assert warnings_of(uri) == [
        f"connection string option {written}={quoted} is ignored: {accepted}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert parse_uri(uri) == parse_quietly("mongodb://ann:pw@h/")


def test_overload_retargeting_is_refused_with_a_warning() -> None:
    uri = "mongodb://h/?enableOverloadRetargeting=true&maxAdaptiveRetries=5"
    assert warnings_of(uri) == [
        "connection string option enableOverloadRetargeting='true': greenpool does not "
        "deprioritize the server that refused an overloaded operation when it retries it; "
        "false is used"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert parse_uri(uri).max_adaptive_retries == 5
    assert parse_quietly("mongodb://h/").max_adaptive_retries == 2


def test_a_list_with_one_bad_item_keeps_the_others() -> None:
    uri = "mongodb://h/?compressors=zlib,brotli,snappy"
    assert warnings_of(uri) == [
        "connection string option compressors='zlib,brotli,snappy': 'brotli' is not a "
        "compressor (expected snappy, zlib, zstd, noop); the others are used"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert parse_uri(uri).compressors == ("zlib", "snappy")


def test_a_repeated_option_is_warned_about_once_and_the_last_counts() -> None:
    uri = "mongodb://h/?w=1&w=2&W=majority"
    assert warnings_of(uri) == [
        "connection string option w is given 3 times; the last, W='majority', is used"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert parse_uri(uri).extra["w"] == "majority"


def test_read_preference_tags_list_in_order_with_the_empty_set() -> None:
    settings = parse_quietly("mongodb://h/?readPreference=nearest&readPreferenceTags=dc:ny,rack:1"
                             "&readPreferenceTags=")
    assert [dict(tags) for tags in settings.read_preference_tags] == [
        {"dc": "ny", "rack": "1"}, {}]
    assert settings.read_preference_object().document == {
        "mode": "nearest", "tags": [{"dc": "ny", "rack": "1"}, {}]}


@pytest.mark.parametrize(("uri", "message"), [
    ("mongodb://h/?maxPoolSize", "option 'maxPoolSize' in the connection string has no value: "
     "write maxPoolSize=<value>"),
    ("mongodb://h/?maxPoolSize=5&&minPoolSize=1", "the connection string has an empty option "
     "(two separators in a row, or one at the end)"),
    ("mongodb://h/?appName=a=b", "option 'appName' in the connection string has more than "
     "one '=': percent-encode '=' in a value as %3D"),
    ("mongodb://h/?w=1;appName=x&journal=true", "the connection string separates its options "
     "with both '&' and ';': use one"),
    ("mongodb://", "the connection string names no host"),
    ("mongodb://h,,i", "the host list 'h,,i' has an empty host (an extra comma?)"),
    ("mongodb://h:0", "not a server address: 'h:0' (bad port '0'); a password's ':', '/' or "
     "'?' must be percent-encoded"),
    ("mongodb://::1", "not a server address: '::1' (IPv6 hosts need [brackets]); a password's "
     "':', '/' or '?' must be percent-encoded"),
    ("mongodb://h/shop.orders", "database name 'shop.orders' holds '.', which a database name "
     "cannot"),
    ("mongodb://h/a/b", "a connection string may hold one '/' after the hosts, before the "
     "database; percent-encode '/' in a Unix domain socket path (%2F) or a password"),
    ("mongodb://:pw@h", "the connection string has user information ('...@') but no user name"),
    ("mongodb+srv://h1,h2/", "a mongodb+srv:// connection string names one host, not 2: h1,h2"),
    ("mongodb+srv://h:27017/", "a mongodb+srv:// host takes no port (the SRV records give it): "
     "h:27017"),
    ("mongodb://h/?ssl=true&tls=false", "tls=false and ssl=true conflict (ssl is another name "
     "for tls)"),
    ("mongodb://h/?tlsInsecure=true&tlsAllowInvalidHostnames=false", "tlsInsecure=true and "
     "tlsAllowInvalidHostnames=false cannot both be given: tlsInsecure decides what "
     "tlsAllowInvalidHostnames would"),
    ("mongodb://h/?srvServiceName=db", "srvServiceName=db is only for mongodb+srv:// "
     "connection strings"),
    ("mongodb://h/?readPreference=primary&maxStalenessSeconds=120", "readPreference=primary "
     "takes no maxStalenessSeconds=120: a primary is chosen by its role alone; use "
     "primaryPreferred or another mode to pass them"),
    ("mongodb://ann:pw@h/?authMechanism=MONGODB-X509", "authMechanism=MONGODB-X509 takes no "
     "password"),
])
def test_malformed_connection_strings_say_what_is_wrong(uri: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as failure:
        parse_uri(uri)
    assert str(failure.value) == message


# --- redaction ----------------------------------------------------------------------


@pytest.mark.parametrize(("uri", "shown"), [
    # An '@' in an option value is not the end of a password.
    ("mongodb://db:27017/?appName=shop@eu", "mongodb://db:27017/?appName=shop@eu"),
    ("mongodb://a:1,b:2/?appName=x@y&w=1", "mongodb://a:1,b:2/?appName=x@y&w=1"),
    ("mongodb://[::1]:27017/?appName=x@y", "mongodb://[::1]:27017/?appName=x@y"),
    ("mongodb://ann:pw@db/?appName=shop@eu", "mongodb://ann:***@db/?appName=shop@eu"),
    # A password with an unescaped '/' or '?' is still found.
    ("mongodb://ann:S3cr3t/Pa55@db/?appName=x@y", "mongodb://ann:***@db/?appName=x@y"),
    ("mongodb://ann:S3cr3t?Pa55@db", "mongodb://ann:***@db"),
])
def test_redact_uri(uri: str, shown: str) -> None:
    assert greenpool.client.config.uri.redact_uri(uri) == shown


def test_an_at_sign_in_an_option_value_is_no_secret() -> None:
    assert greenpool.client.config.uri.uri_secrets("mongodb://db:27017/?appName=27017@eu") == ()


# --- the seedlist rules (the Initial DNS Seedlist Discovery spec's prose tests) ------


def srv_zone(host: str, target: str) -> dict[Any, list[str]]:
    return {(dns.name.from_text(f"_mongodb._tcp.{host}"), dns.rdatatype.SRV):
            [f"0 0 27017 {target}."]}


@pytest.mark.parametrize(("host", "target"), [
    ("localhost", "test_1.localhost"),
    ("mongo.local", "test_1.mongo.local"),
])
def test_an_srv_host_of_fewer_than_three_parts_is_allowed(
    monkeypatch: pytest.MonkeyPatch, host: str, target: str
) -> None:
    install_stub(monkeypatch, srv_zone(host, target))
    assert parse_quietly(f"mongodb+srv://{host}").hosts == ((target, 27017),)


@pytest.mark.parametrize(("host", "target", "domain"), [
    # 2. not in the SRV host's domain
    ("localhost", "localhost.mongodb", "localhost"),
    ("mongo.local", "test_1.evil.local", "mongo.local"),
    ("blogs.mongodb.com", "blogs.evil.com", "mongodb.com"),
    # 3. the SRV host itself
    ("localhost", "localhost", "localhost"),
    ("mongo.local", "mongo.local", "mongo.local"),
    # 4. the domain without the '.' before it
    ("localhost", "test_1.cluster_1localhost", "localhost"),
    ("mongo.local", "test_1.my_hostmongo.local", "mongo.local"),
    ("blogs.mongodb.com", "cluster.testmongodb.com", "mongodb.com"),
])
def test_an_srv_target_outside_the_hosts_domain_is_refused(
    monkeypatch: pytest.MonkeyPatch, host: str, target: str, domain: str
) -> None:
    install_stub(monkeypatch, srv_zone(host, target))
    with pytest.raises(ConfigurationError) as failure:
        parse_uri(f"mongodb+srv://{host}")
    assert str(failure.value) == (
        f"the SRV record of {host} points to {target}, which is not in {host}'s domain "
        f"({domain}); a mongodb+srv:// host's servers must be (srvAllowedHostsSuffix or "
        "srv_host_validator allow others)")


@pytest.mark.parametrize(("suffix", "target"), [
    ("example.net", "db1.example.net"),
    (".Example.NET.", "db1.example.net"),  # outer dots and case do not count
    ("test", "db1.cluster.test"),  # a special-use label on its own
    ("internal", "db1.internal"),
    ("bücher.example", "db1.xn--bcher-kva.example"),  # compared in IDNA
])
def test_srv_allowed_hosts_suffix_lets_in_a_target_outside_the_hosts_domain(
    monkeypatch: pytest.MonkeyPatch, suffix: str, target: str
) -> None:
    install_stub(monkeypatch, srv_zone("cluster0.mongodb.com", target))
    settings = parse_quietly(
        f"mongodb+srv://cluster0.mongodb.com/?srvAllowedHostsSuffix={quote(suffix)}")
    assert settings.hosts == ((target, 27017),)


def test_srv_allowed_hosts_suffix_replaces_the_domain_rule(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SRV host's own domain is not let in either: the suffix is the only rule.
    install_stub(monkeypatch, srv_zone("cluster0.mongodb.com", "db1.mongodb.com"))
    with pytest.raises(ConfigurationError) as failure:
        parse_uri("mongodb+srv://cluster0.mongodb.com/?srvAllowedHostsSuffix=example.net")
    assert str(failure.value) == (
        "the SRV record of cluster0.mongodb.com points to db1.mongodb.com, which does not "
        "end in srvAllowedHostsSuffix's .example.net")


def test_srv_allowed_hosts_suffix_matches_whole_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    install_stub(monkeypatch, srv_zone("cluster0.mongodb.com", "db1.evilexample.net"))
    with pytest.raises(ConfigurationError, match="does not end in srvAllowedHostsSuffix's"):
        parse_uri("mongodb+srv://cluster0.mongodb.com/?srvAllowedHostsSuffix=example.net")


@pytest.mark.parametrize(("suffix", "reason"), [
    ("com", "'com' has one label; a suffix needs two or more"),
    ("co.uk", "'co.uk' is a public suffix"),
    ("github.io", "'github.io' is a public suffix"),
    ("..", "expected a domain such as example.net, not nothing"),
])
def test_a_srv_allowed_hosts_suffix_that_lets_in_anyone_is_refused(
    monkeypatch: pytest.MonkeyPatch, suffix: str, reason: str
) -> None:
    install_stub(monkeypatch, srv_zone("cluster0.mongodb.com", "db1.mongodb.com"))
    uri = f"mongodb+srv://cluster0.mongodb.com/?srvAllowedHostsSuffix={suffix}"
    # In the connection string: ignored with a warning, and the domain rule stays.
    assert warnings_of(uri) == [
        f"connection string option srvAllowedHostsSuffix={suffix!r} is ignored: {reason}"
        + ("" if suffix == ".." else tail_of(reason))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert parse_uri(uri).srv_host_rule.suffix is None  # type: ignore[union-attr]
    # As a keyword argument (code, not configuration): raised.
    with pytest.raises(ConfigurationError) as failure:
        client_settings("mongodb+srv://cluster0.mongodb.com", {"srvAllowedHostsSuffix": suffix})
    assert str(failure.value).startswith(
        f"keyword argument srvAllowedHostsSuffix={suffix!r}: {reason}")


def tail_of(reason: str) -> str:
    """The rest of checked_suffix's message after ``reason``."""
    if "public suffix" in reason:
        return " (anyone may register a name under it), so it would let a forged SRV record "\
            "name any host"
    return " (such as example.net), or a special-use name such as test or internal"


def test_srv_allowed_hosts_suffix_is_only_for_srv() -> None:
    with pytest.raises(ConfigurationError, match=re.escape(
            "srvAllowedHostsSuffix=example.net is only for mongodb+srv:// connection strings")):
        parse_uri("mongodb://h/?srvAllowedHostsSuffix=example.net")
    with pytest.raises(ConfigurationError, match=re.escape(
            "srv_host_validator is only for mongodb+srv:// connection strings")):
        client_settings("mongodb://h", {}, srv_host_validator=lambda host: True)


def test_srv_host_validator_decides_each_host(monkeypatch: pytest.MonkeyPatch) -> None:
    zone = srv_zone("cluster0.mongodb.com", "db1.elsewhere.org")
    install_stub(monkeypatch, zone)
    asked: list[str] = []

    def validator(host: str) -> bool:
        asked.append(host)
        return host.endswith(".elsewhere.org")

    settings = client_settings("mongodb+srv://cluster0.mongodb.com", {},
                               srv_host_validator=validator)
    assert settings.hosts == (("db1.elsewhere.org", 27017),)
    assert asked == ["db1.elsewhere.org"]
    assert settings.srv_host_rule is not None and settings.srv_host_rule.validator is validator


@pytest.mark.parametrize(("validator", "message"), [
    (lambda host: False, "srv_host_validator refused the SRV host db1.mongodb.com "
                         "(of cluster0.mongodb.com)"),
    (lambda host: "yes", "srv_host_validator must return a bool for the SRV host "
                         "db1.mongodb.com, not str: 'yes'"),
    (lambda host: 1 / 0, "srv_host_validator raised ZeroDivisionError for the SRV host "
                         "db1.mongodb.com: division by zero"),
])
def test_srv_host_validator_refusals_say_why(
    monkeypatch: pytest.MonkeyPatch, validator: Any, message: str
) -> None:
    # A host in the SRV host's own domain too: the validator replaces the domain rule.
    install_stub(monkeypatch, srv_zone("cluster0.mongodb.com", "db1.mongodb.com"))
    with pytest.raises(ConfigurationError) as failure:
        client_settings("mongodb+srv://cluster0.mongodb.com", {}, srv_host_validator=validator)
    assert str(failure.value) == message


def test_srv_host_validator_and_a_suffix_cannot_both_be_given(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    install_stub(monkeypatch, srv_zone("cluster0.mongodb.com", "db1.mongodb.com"))
    with pytest.raises(ConfigurationError, match="srvAllowedHostsSuffix and "
                       "srv_host_validator cannot both be given"):
        client_settings("mongodb+srv://cluster0.mongodb.com/?srvAllowedHostsSuffix=mongodb.com",
                        {}, srv_host_validator=lambda host: True)


def test_an_srv_host_of_three_parts_may_point_to_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    install_stub(monkeypatch, srv_zone("blogs.mongodb.com", "blogs.mongodb.com"))
    assert parse_quietly("mongodb+srv://blogs.mongodb.com").hosts == (
        ("blogs.mongodb.com", 27017),)


# -- options as keyword arguments (PyMongo's MongoClient(uri, maxPoolSize=20, ...)) -------


def test_keyword_options_win_over_the_connection_strings() -> None:
    settings = parse_uri("mongodb://h/?maxPoolSize=5&w=1&readPreference=primary",
                         {"maxPoolSize": 20, "W": "majority", "retryWrites": False,
                          "readPreference": "nearest",
                          "readPreferenceTags": [{"dc": "ny"}, {}],
                          "compressors": ["zlib", "snappy"], "socketTimeoutMS": 1.5,
                          "appName": None})
    assert settings.pool.max_pool_size == 20
    assert settings.extra["w"] == "majority"
    assert settings.retry_writes is False
    assert (settings.read_preference, settings.read_preference_tags) == ("nearest",
                                                                         ({"dc": "ny"}, {}))
    assert settings.compressors == ("zlib", "snappy")
    assert settings.socket_timeout == 0.0015
    assert settings.app_name is None  # None: not given


def test_keyword_options_meet_the_rules_across_options() -> None:
    with pytest.raises(ConfigurationError, match="w=0 and journal=true conflict"):
        parse_uri("mongodb://h/?journal=true", {"w": 0})


@pytest.mark.parametrize(("keywords", "message"), [
    ({"maxPoolSize": -1}, "keyword argument maxPoolSize=-1: expected a whole number >= 0"),
    ({"maxPoolSize": 2.5}, "keyword argument maxPoolSize=2.5: expected a whole number"),
    ({"retryWrites": "yes"}, "keyword argument retryWrites='yes': expected true or false"),
    ({"w": True}, "keyword argument w=True: w takes no bool"),
    ({"appName": 7}, "keyword argument appName=7: appName takes no int"),
    ({"heartbeatFrequencyMS": {1}}, "expected a str, a number or a bool"),
    ({"tlsCertificateKeyFilePassword": object()}, "tlsCertificateKeyFilePassword='***'"),
])
def test_a_bad_keyword_value_raises_naming_it(keywords: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        parse_uri("mongodb://h/", keywords)


def test_an_unknown_keyword_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match=r"'maxPoolSzie'.*did you mean maxPoolSize"):
        parse_uri("mongodb://h/", {"maxPoolSzie": 3})


def test_the_client_takes_codec_and_uri_keywords() -> None:
    client = greenpool.Client("mongodb://127.0.0.1:1/?maxPoolSize=5&directConnection=true",
                              maxPoolSize=7, w="majority", tz_aware=True,
                              uuidrepresentation="standard")
    with client:
        assert client.settings.pool.max_pool_size == 7
        assert client.write_concern.document == {"w": "majority"}
        assert client.codec_options.tz_aware is True
        assert client.codec_options.uuid_representation == 4
    with pytest.raises(TypeError, match=r"'conect'.*did you mean connect"):
        greenpool.Client("mongodb://127.0.0.1:1/", conect=False)


def test_the_client_takes_srv_host_validator_as_mongo_client_does(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    install_stub(monkeypatch, srv_zone("cluster0.mongodb.com", "db1.elsewhere.org"))
    with greenpool.Client("mongodb+srv://cluster0.mongodb.com", connect=False,
                          srv_host_validator=lambda host: host == "db1.elsewhere.org") as client:
        assert client.settings.hosts == (("db1.elsewhere.org", 27017),)
    with pytest.raises(greenpool.OptionTypeError, match=re.escape(
            "srv_host_validator must be callable, not 'elsewhere.org'")):
        greenpool.Client("mongodb+srv://cluster0.mongodb.com", connect=False,
                         srv_host_validator="elsewhere.org")
