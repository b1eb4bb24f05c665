"""Which hosts a ``mongodb+srv://`` host's SRV records may name.

Three rules, one per client (Initial DNS Seedlist Discovery, and PyMongo's
MongoClient options of the same names):

* by default, a host in the SRV host's own domain (:func:`srv_domain`);
* ``srvAllowedHostsSuffix=example.net``: a host ending in ``.example.net``, for
  deployments whose servers live in another domain than the SRV name. The suffix
  must have two labels or more (or be a special-use name such as ``test`` or
  ``internal``) and must not be a public suffix (``com``, ``co.uk``,
  ``github.io``): a forged SRV answer could otherwise send the client anywhere;
* ``srv_host_validator=callable``: the application decides, host by host
  (``True`` lets a host in).

The first lookup refuses the whole seedlist on one refused host
(:class:`~greenpool.ConfigurationError`); SRV polling leaves that host out and
logs it.

Rules. No I/O. The public suffixes come from the ``publicsuffixlist`` package
(the ``srv-suffix`` extra), read only when a suffix is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final

__all__ = ["SPECIAL_USE_LABELS", "SrvHostRule", "checked_suffix", "in_srv_domain",
           "srv_domain"]

#: Single labels a suffix may be: RFC 6761's special-use names, RFC 6762's
#: ``local``, and the names set aside (or commonly used) for private networks.
SPECIAL_USE_LABELS: Final = frozenset({
    "test", "localhost", "invalid", "example", "local", "internal", "corp", "home", "mail"})


class SrvHostRefused(ValueError):
    """A host an SRV record named that the rule does not let in; the message says why."""


def srv_domain(host: str) -> str:
    """The domain a mongodb+srv:// host's servers must lie in by default: the host
    without its first label, or, for a host of one or two labels, the host itself.

    >>> srv_domain("cluster0.example.com"), srv_domain("mongo.local")
    ('example.com', 'mongo.local')
    """
    labels = host.lower().split(".")
    return ".".join(labels[1:]) if len(labels) >= 3 else host.lower()


def in_srv_domain(host: str, target: str) -> bool:
    """Whether an SRV record of ``host`` may point to ``target`` by default: below
    :func:`srv_domain` (the "." before the domain keeps the host itself out)."""
    return target.lower().endswith("." + srv_domain(host))


def checked_suffix(text: str) -> str:
    """``srvAllowedHostsSuffix`` as the rule compares it: lower case, in IDNA
    (punycode), without outer dots.

    :raises ValueError: empty, one label that is not special-use, or a public suffix.
    """
    suffix = text.strip(".")
    if not suffix:
        raise ValueError("expected a domain such as example.net, not nothing")
    try:
        suffix = suffix.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ValueError(f"{text!r} is not a domain name") from None
    if suffix in SPECIAL_USE_LABELS:
        return suffix
    if "." not in suffix:
        raise ValueError(f"{text!r} has one label; a suffix needs two or more (such as "
                         "example.net), or a special-use name such as test or internal")
    if _public_suffixes().is_public(suffix):
        raise ValueError(f"{text!r} is a public suffix (anyone may register a name under "
                         "it), so it would let a forged SRV record name any host")
    return suffix


@cache
def _public_suffixes() -> Any:
    try:
        from publicsuffixlist import PublicSuffixList
    except ImportError:
        raise ValueError("checking it against the public suffixes needs the "
                         "publicsuffixlist package: pip install 'greenpool[srv-suffix]'"
                         ) from None
    return PublicSuffixList()


@dataclass(frozen=True)
class SrvHostRule:
    """The rule of one ``mongodb+srv://`` host: the default domain, a suffix
    (:func:`checked_suffix`'s) or the application's validator."""

    host: str
    suffix: str | None = None
    validator: Callable[[str], bool] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.suffix is not None and self.validator is not None:
            raise ValueError("srvAllowedHostsSuffix and srv_host_validator cannot both be "
                             "given: each replaces the domain rule, so give one")

    def check(self, target: str) -> None:
        """Let ``target`` in, or raise :class:`SrvHostRefused` saying why."""
        target = target.lower()
        if self.validator is not None:
            self._ask_validator(target)
        elif self.suffix is not None:
            if not target.endswith("." + self.suffix):
                raise SrvHostRefused(
                    f"the SRV record of {self.host} points to {target}, which does not end "
                    f"in srvAllowedHostsSuffix's .{self.suffix}")
        elif not in_srv_domain(self.host, target):
            raise SrvHostRefused(
                f"the SRV record of {self.host} points to {target}, which is not in "
                f"{self.host}'s domain ({srv_domain(self.host)}); a mongodb+srv:// host's "
                "servers must be (srvAllowedHostsSuffix or srv_host_validator allow others)")

    def _ask_validator(self, target: str) -> None:
        assert self.validator is not None
        try:
            allowed = self.validator(target)
        except Exception as error:
            raise SrvHostRefused(
                f"srv_host_validator raised {type(error).__name__} for the SRV host "
                f"{target}: {error}") from error
        if not isinstance(allowed, bool):
            raise SrvHostRefused(
                f"srv_host_validator must return a bool for the SRV host {target}, not "
                f"{type(allowed).__name__}: {allowed!r}")
        if not allowed:
            raise SrvHostRefused(f"srv_host_validator refused the SRV host {target} "
                                 f"(of {self.host})")
