"""TLS for the SSL and SASL_SSL listeners and for a broker's own connections (to the controller
and to other brokers) with Python's `ssl`, configured as Kafka's PEM settings are:
`ssl.keystore.location` (the private key and its certificate chain in one PEM file;
`ssl.key.password` if the key is encrypted), `ssl.truststore.location` (the CA certificates
trusted, PEM), `ssl.client.auth` (none, requested, required: mutual TLS).

A client certificate's subject is the connection's principal, `User:` + its distinguished name in
RFC 2253 form (Kafka's DefaultKafkaPrincipalBuilder under ssl.principal.mapping.rules=DEFAULT, as
Java's X500Principal.getName() spells it: `User:CN=alice,OU=eng,O=example`); a connection
without one is `User:ANONYMOUS`.  A setting that cannot work is refused at start (TlsConfigError,
naming it), never at the first connection.
"""
from __future__ import annotations

import os
import ssl
from dataclasses import dataclass

from .session import ANONYMOUS

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}

# The attribute keywords X500Principal's RFC 2253 form uses, by the names OpenSSL reports.
_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}
_ESCAPED = ',=+<>#;"\\'


class TlsConfigError(ValueError):
    """A TLS setting that cannot be served; the message names it."""


@dataclass
class TlsSettings:
    keystore: str | None = None          # ssl.keystore.location (PEM: key and certificate chain)
    key_password: str | None = None      # ssl.key.password
    truststore: str | None = None        # ssl.truststore.location (PEM CA certificates)
    client_auth: str = "none"            # ssl.client.auth
    endpoint_identification: str = "https"   # ssl.endpoint.identification.algorithm ("": not checked)

    def server_context(self) -> ssl.SSLContext:
        """The context of the SSL and SASL_SSL listeners, or TlsConfigError."""
        if self.client_auth not in CLIENT_AUTH:
            raise TlsConfigError(f"ssl.client.auth: expected none, requested or required, not {self.client_auth!r}")
        if self.keystore is None:
            raise TlsConfigError("ssl.keystore.location: an SSL or SASL_SSL listener needs a keystore "
                                 "(--ssl-keystore: a PEM file of the private key and its certificate chain)")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._load_keystore(context)
        if self.client_auth != "none":
            if self.truststore is None:
                raise TlsConfigError(f"ssl.truststore.location: ssl.client.auth={self.client_auth} needs the CA "
                                     f"certificates client certificates are checked against (--ssl-truststore)")
            self._load_truststore(context)
        context.verify_mode = CLIENT_AUTH[self.client_auth]
        return context

    def client_context(self) -> ssl.SSLContext:
        """A broker's own connections to a TLS listener (the controller's, another broker's): the
        server's certificate checked against the truststore (the system's CAs without one) and,
        unless ssl.endpoint.identification.algorithm is empty, against the host name connected
        to (Kafka's default, https); this node's keystore presented when it has one."""
        if self.endpoint_identification not in ("https", ""):
            raise TlsConfigError(f"ssl.endpoint.identification.algorithm: expected https or nothing, not "
                                 f"{self.endpoint_identification!r}")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.endpoint_identification == "https"
        if self.truststore is not None:
            self._load_truststore(context)
        else:
            context.load_default_certs()
        if self.keystore is not None:
            self._load_keystore(context)
        return context

    def _load_keystore(self, context: ssl.SSLContext) -> None:
        _readable("ssl.keystore.location", self.keystore)
        password = self.key_password if self.key_password is not None else _no_password
        try:
            context.load_cert_chain(self.keystore, password=password)
        except ssl.SSLError as exc:
            why = ("the private key does not match the certificate" if "KEY_VALUES_MISMATCH" in str(exc) else
                   "the private key is encrypted and ssl.key.password does not open it" if _encrypted(self.keystore)
                   else f"expected a PEM private key and certificate chain ({exc.reason or exc})")
            raise TlsConfigError(f"ssl.keystore.location {self.keystore}: {why}") from None
        except (OSError, ValueError) as exc:
            raise TlsConfigError(f"ssl.keystore.location {self.keystore}: {exc}") from None

    def _load_truststore(self, context: ssl.SSLContext) -> None:
        _readable("ssl.truststore.location", self.truststore)
        try:
            context.load_verify_locations(cafile=self.truststore)
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise TlsConfigError(f"ssl.truststore.location {self.truststore}: expected PEM CA certificates "
                                 f"({exc})") from None


def _no_password() -> bytes:
    raise TlsConfigError("ssl.key.password: the private key is encrypted and no password was given")


def _encrypted(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 20)
    except OSError:
        return False
    return b"ENCRYPTED PRIVATE KEY" in text or b"Proc-Type: 4,ENCRYPTED" in text


def _readable(setting: str, path: str) -> None:
    if not os.path.isfile(path):
        raise TlsConfigError(f"{setting} {path}: no such file")
    if not os.access(path, os.R_OK):
        raise TlsConfigError(f"{setting} {path}: not readable")


def principal(ssl_object) -> str:
    """The principal a TLS connection proved: its verified client certificate's subject, else
    User:ANONYMOUS."""
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert or not cert.get("subject"):
        return ANONYMOUS
    return "User:" + rfc2253(cert["subject"])


def rfc2253(subject) -> str:
    """A subject as ssl's getpeercert() gives it (RDNs from the most significant, each a tuple
    of (attribute, value)) in RFC 2253 form, as Java's X500Principal.getName() writes it: the
    RDNs from the least significant, comma-separated, multi-valued ones joined by `+`, special
    characters escaped.  An attribute without an RFC 2253 keyword keeps OpenSSL's name."""
    return ",".join("+".join(f"{_KEYWORDS.get(name, name)}={_escape(value)}" for name, value in rdn)
                    for rdn in reversed(subject))


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in _ESCAPED else c for c in value)
    if out.startswith(" "):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def describe(exc: BaseException) -> str:
    """One line for a failed handshake."""
    if isinstance(exc, TimeoutError):
        return "no handshake within request.timeout.ms"
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
