"""Certificates for the TLS tests, made with `cryptography` in a test's tmp_path: a CA, a server
certificate for 127.0.0.1 and localhost, client certificates; each keystore one PEM file of the
private key and its certificate chain (Kafka's ssl.keystore.type=PEM), the truststore the CA's
certificate."""
from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_ATTRIBUTES = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME,
               "C": NameOID.COUNTRY_NAME, "L": NameOID.LOCALITY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME}


@dataclass
class Pki:
    root: Path
    ca_key: ec.EllipticCurvePrivateKey
    ca_cert: x509.Certificate
    name: str = "ca"

    @property
    def truststore(self) -> str:
        return str(self.root / f"{self.name}.pem")

    def issue(self, name: str, subject: list[tuple[str, str]], *, server: bool = False,
              password: bytes | None = None, signer: "Pki | None" = None) -> str:
        """A keystore PEM (key, certificate, CA certificate) for `subject` [(attribute, value)],
        most significant first; a server certificate names 127.0.0.1 and localhost."""
        signer = signer or self
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(signer.ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1)))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(signer.ca_key, hashes.SHA256())
        encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
        path = self.root / f"{name}.pem"
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
                         + cert.public_bytes(serialization.Encoding.PEM)
                         + signer.ca_cert.public_bytes(serialization.Encoding.PEM))
        return str(path)


def _name(subject: list[tuple[str, str]]) -> x509.Name:
    return x509.Name([x509.NameAttribute(_ATTRIBUTES[k], v) for k, v in subject])


def make_pki(root: Path, name: str = "ca") -> Pki:
    root.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = _name([("CN", f"test {name}")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    (root / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Pki(root, key, cert, name)


async def api_versions_server(tls_context, listener, seen=None):
    """An in-process front end (storage.wire.server.FrameServer) listening on `listener` at
    127.0.0.1, port 0, with `tls_context` as its TLS, that answers ApiVersions with an empty
    table; `seen`, when given, is called with each request's session (storage.wire.session).
    Returns (server, port); the caller stops it with server.stop_listening()."""
    from storage.wire import codec, session
    from storage.wire.server import FrameServer
    server = FrameServer(codec.SUPPORTED)
    server.tls = tls_context

    async def api_versions(header, request):
        if seen is not None:
            seen(session.current())
        return {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}
    server.handlers[18] = api_versions
    return server, await server.listen("127.0.0.1", 0, listener)
