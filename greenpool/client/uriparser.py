"""PyMongo's connection string parser, run greenpool's way.

What lives here: running PyMongo's parser (which parses, validates, and for
``mongodb+srv://`` looks up the SRV and TXT records through dnspython) one
parse at a time with its warnings caught (:func:`run_pymongo_parser`); taking
out the options PyMongo does not know first, so that a string with thousands
of them stays linear (:func:`split_unknown_options`); and the warnings,
raised again naming the option as written and never a secret
(:func:`warn_unknown`, :func:`reemit`).

What must not: building settings or raising greenpool's errors (that is
:mod:`greenpool.client.uri`, the only caller), and anything outside the
client layer. :func:`reemit` tells PyMongo's warnings by their file, this
one's included (PyMongo's stacklevel points at the frame that called it):
the call into PyMongo stays here.
"""

from __future__ import annotations

import difflib
import os
import warnings
from typing import Any
from urllib.parse import unquote_plus

import gevent.lock
import pymongo
from pymongo import common as _pymongo_common
from pymongo import errors as _pymongo_errors

try:  # PyMongo 4.12 and later
    from pymongo.synchronous.uri_parser import parse_uri as _pymongo_parse_uri
except ImportError:  # PyMongo 4.9 to 4.11
    from pymongo.uri_parser import parse_uri as _pymongo_parse_uri

from greenpool.client.uritext import KNOWN_OPTIONS, WrittenURI

__all__ = ["reemit", "run_pymongo_parser", "split_unknown_options", "warn_unknown"]

_PYMONGO_DIR = os.path.dirname(pymongo.__file__)

# In PyMongo's order, which decides between equally near misses.
_KNOWN_OPTIONS_IN_ORDER = tuple(_pymongo_common.URI_OPTIONS_VALIDATOR_MAP)
# Unknown options are warned about one by one up to this many, then in one
# summary warning: a connection string with thousands of them (a generated
# or hostile one) costs neither a warning nor a near-miss search for each.
_UNKNOWN_OPTION_WARNINGS = 20

# warnings.catch_warnings swaps process-wide state, and an SRV lookup yields to
# other greenlets in the middle of it: two parses interleaving would restore
# each other's filters. This keeps greenpool's own parses one at a time.
_PARSE_LOCK = gevent.lock.Semaphore()


def run_pymongo_parser(
    uri: str,
) -> tuple[dict[str, Any] | Exception, list[warnings.WarningMessage]]:
    """PyMongo's parse of ``uri`` (its result, or the error it raised: raising
    is the caller's, outside any handler) and the warnings it gave."""
    with _PARSE_LOCK, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return _pymongo_parse_uri(uri, validate=True, warn=True, normalize=True), caught
        except (_pymongo_errors.ConfigurationError, ValueError, TypeError, OSError) as exc:
            # OSError: PyMongo opens the TLS files a connection string names.
            return exc, caught


def split_unknown_options(uri: str) -> tuple[str, list[tuple[str, str]]]:
    """``uri`` without the options PyMongo does not know, and those options
    (name and value as written). A connection string whose structure is in
    doubt (no '/' before the options, mixed separators, an item that is not
    one ``name=value``) keeps them, for PyMongo to judge."""
    scheme, sep, rest = uri.partition("://")
    host_part, slash, path_part = rest.partition("/")
    database, question, query = path_part.partition("?")
    if not (sep and slash and question) or ("&" in query and ";" in query):
        return uri, []
    delimiter = "&" if "&" in query else ";"
    kept, unknown = [], []
    for item in query.split(delimiter):
        name, equals, value = item.partition("=")
        # PyMongo looks names up as written, in lower case.
        if equals and "=" not in value and name.lower() not in KNOWN_OPTIONS:
            unknown.append((name, value))
        else:
            kept.append(item)
    if not unknown:
        return uri, []
    options = f"?{delimiter.join(kept)}" if kept else ""
    return f"{scheme}://{host_part}/{database}{options}", unknown


def warn_unknown(unknown: list[tuple[str, str]], written: WrittenURI) -> None:
    """Warn about unknown options as PyMongo does (the last of repeated ones)."""
    last = {name.lower(): (name, value) for name, value in unknown}
    for index, (name, value) in enumerate(last.values()):
        if index == _UNKNOWN_OPTION_WARNINGS:
            warnings.warn(
                f"{len(last) - index} more unknown options in the connection string are "
                "ignored too", UserWarning, stacklevel=4)
            return
        text = f"Unknown option: {name.lower()}."  # as PyMongo names it
        suggestions = difflib.get_close_matches(name.lower(), _KNOWN_OPTIONS_IN_ORDER,
                                                cutoff=0.2)
        if suggestions:
            text += (f" Did you mean one of ({', '.join(suggestions)}) or maybe a camelCase "
                     "version of one? Refer to docstring.")
        shown = f"{unquote_plus(name)}={unquote_plus(value)!r}"
        warnings.warn(written.redact(f"{text} (connection string option {shown})"),
                      UserWarning, stacklevel=4)


def reemit(caught: list[warnings.WarningMessage], written: WrittenURI) -> None:
    """Warn again what PyMongo warned in ``caught``, each thing once, naming the
    option as written and hiding every secret; other greenlets' warnings
    caught meanwhile go out unchanged."""
    seen: set[tuple[str, type[Warning]]] = set()
    for record in caught:
        if not record.filename.startswith(_PYMONGO_DIR) and record.filename != __file__:
            # Another greenlet's warning, caught while a DNS lookup yielded.
            warnings.warn_explicit(record.message, record.category, record.filename,
                                   record.lineno, source=record.source)
            continue
        # Some PyMongo versions validate the options twice, and a repeated
        # option is reported at each repetition: say each thing once.
        message = str(record.message)
        if (message, record.category) in seen:
            continue
        seen.add((message, record.category))
        warnings.warn(written.describe(message), record.category, stacklevel=3)
