"""The certificates ``karpy sandbox`` serves HTTPS with on loopback, made anew at every start.

As kind does for its clusters: a CA of its own signs a serving certificate for
the listen address, and the CA goes into the kubeconfig
(``certificate-authority-data``), so kubectl, the official clients and karpy's
controller verify the server without a flag to skip verification. The
serving certificate names ``127.0.0.1``, ``::1``, ``localhost`` and the address
given, so the kubeconfig still verifies when its server URL is rewritten to
another loopback port (a proxy in front of the sandbox, for example).

The kubeconfig also carries a client certificate from the same CA
(``kubernetes-admin``, group ``system:masters``, as kind's does): kubectl asks
for a username and password on an HTTPS server for which its kubeconfig holds
no credentials at all. The sandbox does not ask for it; on loopback it needs
no credentials.

Keys are ECDSA P-256 (made in well under a millisecond, accepted by Go,
OpenSSL and Node.js alike) and stay in a private directory (mode 0700, files
0600) that :meth:`Certificates.remove` deletes at exit.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import shutil
import tempfile
from dataclasses import dataclass

LOOPBACK_NAMES = ("127.0.0.1", "::1", "localhost")
VALIDITY = dt.timedelta(days=365)


@dataclass
class Certificates:
    directory: str
    ca_pem: bytes
    cert_file: str
    key_file: str
    client_cert_pem: bytes
    client_key_pem: bytes

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _san_entries(names: list[str]) -> list:
    from cryptography import x509

    out: list = []
    seen: set[str] = set()
    for n in names:
        n = n.strip("[]")
        if not n or n in seen:
            continue
        seen.add(n)
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return out


def generate(address: str, *, prefix: str = "karpy-sandbox-tls-") -> Certificates:
    """A CA and a serving certificate for ``address`` (and the loopback names), in a new private directory."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)
    start, end = now - dt.timedelta(hours=1), now + VALIDITY  # an hour back: clocks of clients a little behind

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "karpy-sandbox-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "karpy-sandbox")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(_san_entries([*LOOPBACK_NAMES, address])), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))

    client_key = ec.generate_private_key(ec.SECP256R1())
    client = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                                       x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes-admin")]))
              .issuer_name(ca_name)
              .public_key(client_key.public_key())
              .serial_number(x509.random_serial_number())
              .not_valid_before(start).not_valid_after(end)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                           data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                           crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
              .sign(ca_key, hashes.SHA256()))

    directory = tempfile.mkdtemp(prefix=prefix)  # mode 0700
    try:
        os.chmod(directory, 0o700)
        ca_pem = ca.public_bytes(serialization.Encoding.PEM)
        cert_file = os.path.join(directory, "serving.crt")
        key_file = os.path.join(directory, "serving.key")
        _write(os.path.join(directory, "ca.crt"), ca_pem)
        _write(cert_file, cert.public_bytes(serialization.Encoding.PEM))
        _write(key_file, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return Certificates(directory, ca_pem, cert_file, key_file, client.public_bytes(serialization.Encoding.PEM),
                        client_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
