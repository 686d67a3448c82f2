"""Throwaway certificate authorities and certificates for the TLS tests (Python's `cryptography`).

`Pki(dir)` makes a CA; `issue(name, cn, hosts)` writes `<name>.pem` holding a private key and the
certificate chain (what Kafka's PEM keystores hold) and returns its path; `ca_file` is the CA
certificate (a PEM truststore). Keys are EC P-256 unless asked otherwise; `password` encrypts the
key as PKCS #8 (what `ssl.key.password` decrypts).
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str, org: str = "Keel tests") -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
        x509.NameAttribute(NameOID.COMMON_NAME, cn),
    ])


class Pki:
    """A CA in `directory`, and certificates it signs."""

    def __init__(self, directory: Path, name: str = "ca") -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = _name(f"{name} authority")
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_file = self.dir / f"{name}.crt"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    @property
    def ca_pem(self) -> str:
        return self.ca_file.read_text()

    def issue(self, name: str, cn: str, hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
              password: str | None = None, rsa_key: bool = False) -> Path:
        """Writes `<name>.pem` (key, then certificate) and `<name>.crt` / `<name>.key`; returns the
        `.pem` path. `hosts` become subject alternative names (IPs as IP addresses)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if rsa_key \
            else ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn)).issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        encryption = serialization.BestAvailableEncryption(password.encode()) if password \
            else serialization.NoEncryption()
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
        cert_pem = cert.public_bytes(serialization.Encoding.PEM)
        (self.dir / f"{name}.key").write_bytes(key_pem)
        (self.dir / f"{name}.crt").write_bytes(cert_pem)
        pem = self.dir / f"{name}.pem"
        pem.write_bytes(key_pem + cert_pem)
        return pem
