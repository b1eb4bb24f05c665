"""DNS lookups: the SRV and TXT records a ``mongodb+srv://`` connection string names.

What lives here: every DNS query greenpool makes itself, through dnspython's
resolver (so the system's resolver configuration, or a ``dns.resolver.default_resolver``
the program set, applies), each bounded by a time limit, each failure a
:class:`~greenpool.ConfigurationError` naming the name looked up.

What must not: what the records mean (the seedlist rules, which TXT options are
allowed) is the connection string's business (:mod:`greenpool.client.uri`);
host-name resolution for connecting is the socket's (:mod:`greenpool.wire.sockets`).
"""

from __future__ import annotations

from typing import Any

import dns.exception
import dns.resolver

from greenpool.errors import ConfigurationError

__all__ = ["srv_records", "txt_records"]


def srv_records(name: str, *, timeout: float | None) -> list[tuple[str, int]]:
    """The (target, port) of each SRV record of ``name``, targets without the final dot.

    Raises :class:`~greenpool.ConfigurationError` when there are none, when the
    name does not exist, or when the lookup fails or takes longer than
    ``timeout`` seconds (None: dnspython's own limit).
    """
    answer = _resolve(name, "SRV", timeout, missing_ok=False)
    return [(record.target.to_text(omit_final_dot=True), int(record.port)) for record in answer]


def txt_records(name: str, *, timeout: float | None) -> list[str]:
    """The text of each TXT record of ``name`` (its strings joined); none when
    the name has no TXT record or does not exist. A failed or timed-out lookup
    raises :class:`~greenpool.ConfigurationError`."""
    answer = _resolve(name, "TXT", timeout, missing_ok=True)
    return [b"".join(record.strings).decode("utf-8", "replace") for record in answer]


def _resolve(name: str, rdtype: str, timeout: float | None, *, missing_ok: bool) -> list[Any]:
    try:
        return list(dns.resolver.resolve(name, rdtype, lifetime=timeout))
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        if missing_ok:
            return []
        raise ConfigurationError(f"no {rdtype} records for {name!r}: the DNS name "
                                 "does not exist or has none") from None
    except dns.exception.Timeout:
        limit = f" after {timeout:g} s" if timeout is not None else ""
        raise ConfigurationError(
            f"the DNS lookup of the {rdtype} records of {name!r} timed out{limit}") from None
    except dns.exception.DNSException as error:
        raise ConfigurationError(
            f"the DNS lookup of the {rdtype} records of {name!r} failed: "
            f"{type(error).__name__}") from None
