"""Test certificates (a CA and a server certificate for 127.0.0.1) and web config files."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import bcrypt
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write_key(key, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def make_certificates(folder: Path, server_name: str = "ray-accel test server") -> dict[str, Path]:
    """ca.crt, server.crt and server.key (valid for 127.0.0.1 and localhost) in `folder`."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("ray-accel test CA"))
          .issuer_name(_name("ray-accel test CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(server_name)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {"ca": folder / "ca.crt", "cert": folder / "server.crt", "key": folder / "server.key",
             "ca_key": folder / "ca.key"}
    paths["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(ca_key, paths["ca_key"])
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, paths["key"])
    return paths


def make_client_certificate(folder: Path, ca_cert: Path, ca_key: Path) -> tuple[Path, Path]:
    """client.crt and client.key in `folder`, signed by the given CA."""
    ca = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    signer = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("prometheus")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(signer, hashes.SHA256()))
    cert_path, key_path = folder / "client.crt", folder / "client.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)
    return cert_path, key_path


def bcrypt_hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def write_web_config(path: Path, tls: dict | None = None, users: dict[str, str] | None = None
                     ) -> Path:
    """An exporter-toolkit web config; `users` maps names to plain passwords (hashed here)."""
    document: dict = {}
    if tls:
        document["tls_server_config"] = {k: str(v) for k, v in tls.items()}
    if users:
        document["basic_auth_users"] = {u: bcrypt_hash(p) for u, p in users.items()}
    path.write_text(yaml.safe_dump(document))
    return path
