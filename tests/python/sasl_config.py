"""SASL settings the tests write into configs: Kafka's JAAS lines for PLAIN."""

from __future__ import annotations

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


def plain_jaas(username: str | None = None, password: str | None = None, users: dict[str, str] | None = None) -> str:
    """A PLAIN JAAS line: this node's (or client's) own `username` / `password`, and a listener's
    users as `user_<name>="<password>"`."""
    options = []
    if username is not None:
        options += [f'username="{username}"', f'password="{password}"']
    options += [f'user_{u}="{p}"' for u, p in (users or {}).items()]
    return f"{PLAIN_MODULE} required {' '.join(options)};"
