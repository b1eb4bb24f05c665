"""A certificate authority and a server certificate for an embedded TLS server.

Rules of this module: generating test certificates with ``cryptography``; nothing here
opens sockets.

Needs the ``cryptography`` package (in the ``test`` extra; ``pip install cryptography``).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from greenpool.errors import ConfigurationError


@dataclass(frozen=True)
class TLSFiles:
    """PEM files: ``ca`` signed ``server`` (for 127.0.0.1 and localhost), whose key is ``key``."""

    ca: Path
    server: Path
    key: Path


def write_tls_files(directory: Path) -> TLSFiles:
    """Make a CA and a server certificate valid for 30 days, and write them to ``directory``."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        raise ConfigurationError(
            "a TLS embedded server needs the cryptography package (pip install cryptography)"
        ) from None

    now = datetime.datetime.now(datetime.UTC)

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "greenpool"),
                          x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def usage(cert_sign: bool) -> x509.KeyUsage:
        return x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
            crl_sign=cert_sign, encipher_only=False, decipher_only=False)

    def builder(subject: x509.Name, issuer: x509.Name,
                public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
        # The extensions strict verifiers (OpenSSL 3, Python 3.13's VERIFY_X509_STRICT)
        # insist on.
        return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
                .public_key(public_key).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(hours=1))
                .not_valid_after(now + datetime.timedelta(days=30))
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key),
                               critical=False))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("greenpool embedded server CA")
    ca = (builder(ca_name, ca_name, ca_key.public_key())
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(usage(True), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    server = (builder(name("localhost"), ca_name, key.public_key())
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(usage(False), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                             critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                  ca_key.public_key()), critical=False)
              .add_extension(san, critical=False)
              .sign(ca_key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    files = TLSFiles(ca=directory / "ca.pem", server=directory / "server.pem",
                     key=directory / "server-key.pem")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.server.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files.key.touch(mode=0o600)
    files.key.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return files
