"""The TLS context a connection string asks for, built from its files.

What lives here: :func:`tls_context`, a client :class:`ssl.SSLContext` that
verifies the server against a CA file (or the system's CAs) and a CRL,
presents a certificate and key, or relaxes verification, with errors that
name the connection string option and the path of a missing, unreadable or
bad file.

Loading runs in gevent's threadpool (:func:`~greenpool.wire.offload.offload`):
OpenSSL parses the files without the GIL, and the system's CA store alone
takes tens of milliseconds (hundreds on a busy machine) that would otherwise
hold the hub while a Client is built.

What must not: reading the connection string (the options arrive as values
from :class:`greenpool.client.config.uri.ClientSettings`) and opening sockets
(:mod:`greenpool.wire.sockets` drives whatever context it is given). It
imports nothing of greenpool but :mod:`greenpool.errors` and
:mod:`greenpool.wire.offload`.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from greenpool.errors import ConfigurationError
from greenpool.wire.offload import offload

__all__ = ["tls_context"]


def tls_context(
    *,
    ca_file: str | None,
    crl_file: str | None,
    certificate_key_file: str | None,
    certificate_key_file_password: str | None,
    allow_invalid_hostnames: bool,
    allow_invalid_certificates: bool,
) -> ssl.SSLContext:
    """A context that verifies the server's certificate (against ``ca_file``,
    or the system's CAs, and ``crl_file``) and its host name, unless told
    otherwise; it presents ``certificate_key_file`` (certificate and key in
    one PEM file) when given. Raises :class:`~greenpool.ConfigurationError`
    naming the option and the path of a file that cannot be loaded."""
    # PROTOCOL_TLS_CLIENT starts out verifying certificates and host names.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _load_trust(context, ca_file, crl_file)
    if certificate_key_file:
        _load_identity(context, certificate_key_file, certificate_key_file_password)
    if allow_invalid_hostnames or allow_invalid_certificates:
        context.check_hostname = False
    if allow_invalid_certificates:
        context.verify_mode = ssl.CERT_NONE
    return context


def _load_trust(context: ssl.SSLContext, ca_file: str | None, crl_file: str | None) -> None:
    if ca_file:
        _load_tls_file("tlsCAFile", ca_file, lambda: context.load_verify_locations(ca_file))
    else:
        offload(context.load_default_certs)
    if crl_file:
        _load_tls_file("tlsCRLFile", crl_file, lambda: context.load_verify_locations(crl_file))
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF


def _load_identity(context: ssl.SSLContext, path: str, secret: str | None) -> None:
    def password() -> str:
        # Without a callback OpenSSL would ask for the passphrase on the
        # terminal, which hangs a server process.
        if secret is None:
            raise ConfigurationError(
                f"tlsCertificateKeyFile {path!r} holds an encrypted key: "
                "give its passphrase as tlsCertificateKeyFilePassword"
            )
        return secret

    _load_tls_file("tlsCertificateKeyFile", path,
                   lambda: context.load_cert_chain(path, password=password))


def _load_tls_file(option: str, path: str, load: Callable[[], object]) -> None:
    try:
        offload(load)
    except ssl.SSLError as exc:
        what = ("a PEM file with a certificate and its private key, or the wrong "
                "tlsCertificateKeyFilePassword" if option == "tlsCertificateKeyFile"
                else "a PEM file of certificates")
        raise ConfigurationError(
            f"{option} {path!r} could not be loaded: not {what} ({exc.reason or exc})"
        ) from None
    except FileNotFoundError:
        raise ConfigurationError(f"{option} {path!r} does not exist") from None
    except OSError as exc:
        reason = exc.strerror or exc
        raise ConfigurationError(f"{option} {path!r} cannot be read: {reason}") from None
