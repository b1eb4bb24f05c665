"""A DNS stub for mongodb+srv:// tests: dnspython answers from a fixed zone.

The zone is the one the Initial DNS Seedlist Discovery spec tests were
written against: the record table in that spec's tests/README.md. The stub
replaces ``dns.resolver.resolve``, which :mod:`greenpool.client.config.dns` calls, so
greenpool's own code runs on real dnspython answers; any other way into
dnspython's resolver fails the test, so no test ever queries real DNS.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import dns.message
import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.resolver
import pytest

from tests.uri_spec import SEEDLIST_DIR

Records = dict[tuple[dns.name.Name, dns.rdatatype.RdataType], list[str]]

TTL = 86400


def seedlist_zone(readme: Path = SEEDLIST_DIR / "README.md") -> Records:
    """The records of the README's ```dns block; none if the README is missing."""
    if not readme.exists():
        return {}
    block = re.search(r"```dns\n(.*?)```", readme.read_text(), re.DOTALL)
    assert block, f"no ```dns record table in {readme}"
    records: defaultdict[tuple[dns.name.Name, dns.rdatatype.RdataType], list[str]]
    records = defaultdict(list)
    for line in block.group(1).splitlines():
        fields = line.split(None, 4)
        if len(fields) < 5 or not fields[1].isdigit():
            continue  # a blank line or a column header
        name, _ttl, _class, rdtype, data = fields
        if rdtype == "SRV":
            data = f"0 0 {data}"  # the table leaves out priority and weight
        records[(dns.name.from_text(name), dns.rdatatype.from_text(rdtype))].append(data)
    return dict(records)


class StubResolver:
    """Answers ``dns.resolver.resolve`` from ``records``, and remembers the queries."""

    def __init__(self, records: Records) -> None:
        self.records = records
        self.queries: list[tuple[str, str]] = []

    def resolve(self, qname: Any, rdtype: Any = "A", *args: Any, **kwargs: Any) -> Any:
        name = qname if isinstance(qname, dns.name.Name) else dns.name.from_text(str(qname))
        rtype = dns.rdatatype.RdataType.make(rdtype)
        self.queries.append((name.to_text(omit_final_dot=True), rtype.name))
        response = respond(dns.message.make_query(name, rtype), self.records)
        if response.rcode() == dns.rcode.NXDOMAIN:
            raise dns.resolver.NXDOMAIN(qnames=[name], responses={name: response})
        if not response.answer:
            raise dns.resolver.NoAnswer(response=response)
        return dns.resolver.Answer(name, rtype, dns.rdataclass.IN, response)


def respond(query: dns.message.Message, records: Records, ttl: int = TTL) -> dns.message.Message:
    """The zone's response to ``query``: the records asked for (with time to
    live ``ttl``); no answer for a name the zone has without that type;
    NXDOMAIN for a name it does not have."""
    response = dns.message.make_response(query)
    question = query.question[0]
    name, rtype = question.name, question.rdtype
    data = records.get((name, rtype))
    if data:
        rrset = response.find_rrset(response.answer, name, dns.rdataclass.IN, rtype, create=True)
        for text in data:
            rrset.add(dns.rdata.from_text(dns.rdataclass.IN, rtype, text), ttl)
    elif not any(known == name for known, _ in records):
        response.set_rcode(dns.rcode.NXDOMAIN)
    return response


def install_stub(monkeypatch: pytest.MonkeyPatch, records: Records) -> StubResolver:
    """Make dnspython answer from ``records`` for the rest of the test."""
    stub = StubResolver(records)
    monkeypatch.setattr(dns.resolver, "resolve", stub.resolve)
    forbid_real_dns(monkeypatch)
    return stub


def forbid_real_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test on any query that would reach a name server."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        # pytest.fail raises a BaseException: no "except Exception" around
        # a lookup can turn it into a ConfigurationError.
        pytest.fail(f"a test tried a real DNS query: {args[1:]}")

    monkeypatch.setattr(dns.resolver.Resolver, "resolve", refuse)
