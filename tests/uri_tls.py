"""Certificates for the TLS tests, made on the spot, and an in-memory handshake.

A test CA signs a server certificate for ``localhost``, a second (revoked)
one, and a client certificate whose key is encrypted. The handshake runs
over memory BIOs: no sockets, so a test sees exactly what the contexts do.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CLIENT_KEY_PASSWORD = "key-Passphrase-7"

_NOW = datetime.datetime.now(datetime.UTC)
_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Pki:
    """The files the tests point connection strings and servers at."""

    ca_file: Path
    crl_file: Path  # revokes revoked_server_file
    server_file: Path  # certificate and key for "localhost"
    revoked_server_file: Path
    client_file: Path  # certificate and key, encrypted with CLIENT_KEY_PASSWORD


def make_pki(directory: Path) -> Pki:
    """Write a CA, its CRL, two server identities and a client identity."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("greenpool test CA", ca_key.public_key(), ca_key, None, serial=1)
    server = _leaf("localhost", ca, ca_key, serial=2)
    revoked = _leaf("localhost", ca, ca_key, serial=3)
    client = _leaf("greenpool test client", ca, ca_key, serial=4)
    pki = Pki(*(directory / name for name in
                ("ca.pem", "crl.pem", "server.pem", "revoked.pem", "client.pem")))
    pki.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.crl_file.write_bytes(_crl(ca, ca_key, revoked_serial=3))
    pki.server_file.write_bytes(_pem(*server, password=None))
    pki.revoked_server_file.write_bytes(_pem(*revoked, password=None))
    pki.client_file.write_bytes(_pem(*client, password=CLIENT_KEY_PASSWORD))
    return pki


def server_context(certificate_file: Path, *, client_ca: Path | None = None) -> ssl.SSLContext:
    """A server's context; with ``client_ca`` it demands a client certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate_file)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    return context


def handshake(client: ssl.SSLContext, server: ssl.SSLContext, hostname: str) -> None:
    """Run a TLS handshake between the two contexts; raise what either side raises."""
    client_end = _End(client, server_hostname=hostname)
    server_end = _End(server)
    for _ in range(10):
        finished = [client_end.step(), server_end.step()]
        client_end.send_to(server_end)
        server_end.send_to(client_end)
        if all(finished):
            return
    raise AssertionError("the TLS handshake did not finish")


class _End:
    """One side of the handshake: a TLS object between two memory buffers.

    The client names the server it expects; the server names nobody.
    """

    def __init__(self, context: ssl.SSLContext, server_hostname: str | None = None) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(self.incoming, self.outgoing,
                                    server_side=server_hostname is None,
                                    server_hostname=server_hostname)

    def step(self) -> bool:
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        return True

    def send_to(self, other: _End) -> None:
        data = self.outgoing.read()
        if data:
            other.incoming.write(data)


def _leaf(
    name: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, *, serial: int
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    return _certificate(name, key.public_key(), ca_key, ca, serial=serial), key


def _certificate(
    name: str,
    public_key: ec.EllipticCurvePublicKey,
    signing_key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    *,
    serial: int,
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    is_ca = issuer is None
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer.subject)
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(_NOW - _DAY)
        .not_valid_after(_NOW + _DAY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            signing_key.public_key()), critical=False)
    )
    if is_ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def _crl(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, *, revoked_serial: int) -> bytes:
    revoked = (x509.RevokedCertificateBuilder()
               .serial_number(revoked_serial).revocation_date(_NOW - _DAY).build())
    crl = (x509.CertificateRevocationListBuilder()
           .issuer_name(ca.subject)
           .last_update(_NOW - _DAY)
           .next_update(_NOW + _DAY)
           .add_revoked_certificate(revoked)
           .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
               ca_key.public_key()), critical=False)
           .sign(ca_key, hashes.SHA256()))
    return crl.public_bytes(serialization.Encoding.PEM)


def _pem(certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey, *,
         password: str | None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption() if password is None
        else serialization.BestAvailableEncryption(password.encode()))
    key_pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8, encryption)
    return certificate.public_bytes(serialization.Encoding.PEM) + key_pem
