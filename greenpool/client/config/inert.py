"""Connection string options greenpool.Client accepts but does not act on, and why.

Every option the connection string parser (:mod:`greenpool.client.config.uri`)
accepts either takes effect in the Client or is named here: the Client then
warns at construction (a :class:`UserWarning` naming the option and saying
why), so no option is silently ignored. ``tests/test_uri_effects.py`` walks
the parser's option table to hold that.

Rules. Pure: a function of the parsed settings; the Client gives the warnings.
"""

from __future__ import annotations

import warnings

from greenpool.client.config.settings import ClientSettings

__all__ = ["INERT", "inert_options", "warn_inert_options"]

#: Options, by lower-case name, that the Client never acts on: their names and why.
INERT = {
    "tlsdisableocspendpointcheck": (
        "tlsDisableOCSPEndpointCheck",
        "greenpool.Client makes no OCSP requests, so there is no OCSP endpoint check to "
        "turn on or off"),
    "tlsdisablecertificaterevocationcheck": (
        "tlsDisableCertificateRevocationCheck",
        "greenpool.Client checks revocation only against tlsCRLFile, and always does when "
        "it is given"),
    "waitqueuemultiple": (
        "waitQueueMultiple",
        "PyMongo 4 removed it, and greenpool's wait queue has no bound on waiters but "
        "waitQueueTimeoutMS"),
}

# Options that only mean something with a user name in the connection string.
_CREDENTIAL_OPTIONS = {
    "authsource": "authSource",
    "authmechanismproperties": "authMechanismProperties",
}


def inert_options(settings: ClientSettings) -> list[str]:
    """A message for each option in ``settings`` that the Client will not act on."""
    messages = []
    for key, (name, why) in INERT.items():
        if key in settings.extra:
            messages.append(f"connection string option {name} is ignored: {why}")
    if not settings.tls:
        # tlsInsecure sets the other two: it alone was written then.
        insecure = settings.tls_insecure
        for name, given in (("tlsInsecure", insecure),
                            ("tlsAllowInvalidCertificates",
                             settings.tls_allow_invalid_certificates and not insecure),
                            ("tlsAllowInvalidHostnames",
                             settings.tls_allow_invalid_hostnames and not insecure)):
            if given:
                messages.append(f"connection string option {name} is ignored: TLS is off "
                                f"(tls=true turns it on)")
    for key, name in _CREDENTIAL_OPTIONS.items():
        if key in settings.extra:  # the parser keeps them aside without credentials
            messages.append(f"connection string option {name} is ignored: the connection "
                            f"string names no user to authenticate")
    return messages


def warn_inert_options(settings: ClientSettings) -> None:
    """Warn, pointing at the code that made the Client, about each inert option."""
    for message in inert_options(settings):
        warnings.warn(message, UserWarning, stacklevel=3)

