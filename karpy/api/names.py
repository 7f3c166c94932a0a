"""Kubernetes name, label and selector syntax, with the API server's messages.

These mirror the rules of k8s.io/apimachinery/pkg/util/validation; each
function returns a list of problems (empty when the value is fine).
"""

from __future__ import annotations

import re

_QNAME_CHAR = r"[A-Za-z0-9]"
_QNAME_EXT = r"[-A-Za-z0-9_.]"
QUALIFIED_NAME_FMT = f"({_QNAME_CHAR}{_QNAME_EXT}*)?{_QNAME_CHAR}"
_QUALIFIED_NAME = re.compile(f"^{QUALIFIED_NAME_FMT}$")
QUALIFIED_NAME_MAX = 63

LABEL_VALUE_FMT = f"({QUALIFIED_NAME_FMT})?"
_LABEL_VALUE = re.compile(f"^{LABEL_VALUE_FMT}$")
LABEL_VALUE_MAX = 63

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(f"^{DNS1123_LABEL_FMT}$")
DNS1123_LABEL_MAX = 63

DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + r"(\." + DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN = re.compile(f"^{DNS1123_SUBDOMAIN_FMT}$")
DNS1123_SUBDOMAIN_MAX = 253


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if examples:
        ex = ",  or ".join(f"'{e}'" for e in examples)
        msg += f" (e.g. {ex}, regex used for validation is '{fmt}')"
    else:
        msg += f" (regex used for validation is '{fmt}')"
    return msg


def _max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_LABEL_MAX:
        errs.append(_max_len_error(DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL.match(value):
        errs.append(
            _regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
                "and must start and end with an alphanumeric character",
                DNS1123_LABEL_FMT,
                "my-name",
                "123-abc",
            )
        )
    return errs


_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def is_dns1035_label(value: str) -> list[str]:
    """A Service's name rule (kube-apiserver's DNS-1035 label)."""
    errs = [_max_len_error(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _DNS1035_LABEL.match(value):
        errs.append(_regex_error("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
                                 "an alphabetic character, and end with an alphanumeric character",
                                 "[a-z]([-a-z0-9]*[a-z0-9])?", "my-name", "abc-123"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(_max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character",
                DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errs


def is_qualified_name(value: str) -> list[str]:
    """A label key / annotation key / taint key: [prefix/]name."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + e for e in is_dns1123_subdomain(prefix))
    else:
        return [
            _regex_error(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                "end with an alphanumeric character",
                QUALIFIED_NAME_FMT,
                "MyName",
                "my.name",
                "123-abc",
            )
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > QUALIFIED_NAME_MAX:
        errs.append("name part " + _max_len_error(QUALIFIED_NAME_MAX))
    if name and not _QUALIFIED_NAME.match(name):
        errs.append(
            "name part "
            + _regex_error(
                "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character",
                QUALIFIED_NAME_FMT,
                "MyName",
                "my.name",
                "123-abc",
            )
        )
    return errs


def is_valid_label_value(value: str) -> list[str]:
    errs = []
    if len(value) > LABEL_VALUE_MAX:
        errs.append(_max_len_error(LABEL_VALUE_MAX))
    if not _LABEL_VALUE.match(value):
        errs.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character",
                LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


def label_domain(key: str) -> str:
    """The prefix of a label key ("" when it has none)."""
    head, sep, _ = key.partition("/")
    return head if sep else ""


_PERCENT = re.compile(r"^[0-9]+%$")


def is_percent(value: str) -> bool:
    return bool(_PERCENT.match(value))


PERCENT_ERROR = (
    "a valid percent string must be a numeric string followed by an ending '%' "
    "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
)

_IANA_SVC = re.compile(r"^[-a-z0-9]+$")


def is_valid_port_name(value: str) -> list[str]:
    errs = []
    if len(value) > 15:
        errs.append("must be no more than 15 characters")
    if not _IANA_SVC.match(value):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if "--" in value:
        errs.append("must not contain consecutive hyphens")
    if not re.search(r"[a-z]", value):
        errs.append("must contain at least one letter (a-z)")
    if value.startswith("-") or value.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return errs
