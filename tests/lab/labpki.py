"""Lab PKI: a throwaway CA, serving certificates signed by it, and kubeconfig files.

    make_ca(dir)                                   -> (ca.crt path, ca.key path)
    make_server_cert(ca_dir, out_dir, sans=[...])  -> (server.crt path, server.key path)
    write_kubeconfig(path, clusters=[(name, server, ca_path, token), ...])
"""
import datetime
import ipaddress
import os

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT, CA_KEY = "ca.crt", "ca.key"


def _write(path, data, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)


def _key_pem(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def make_ca(directory, common_name="hybridgpu-lab-ca", days=3650):
    """Create ca.crt/ca.key in directory unless both exist; return their paths."""
    os.makedirs(directory, exist_ok=True)
    crt, keyp = os.path.join(directory, CA_CERT), os.path.join(directory, CA_KEY)
    if os.path.exists(crt) and os.path.exists(keyp):
        return crt, keyp
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(minutes=5))
            .not_valid_after(_now() + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    _write(keyp, _key_pem(key), 0o600)
    _write(crt, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return crt, keyp


def make_server_cert(ca_dir, out_dir, sans, name="server", days=825):
    """Issue <name>.crt/<name>.key in out_dir for the given IPs and DNS names."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(ca_dir, CA_CERT), "rb") as fh:
        ca_cert = x509.load_pem_x509_certificate(fh.read())
    with open(os.path.join(ca_dir, CA_KEY), "rb") as fh:
        ca_key = serialization.load_pem_private_key(fh.read(), password=None)
    alt = []
    for san in sans:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            alt.append(x509.DNSName(san))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(sans[0]) if sans else name)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(minutes=5))
            .not_valid_after(_now() + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    crt, keyp = os.path.join(out_dir, name + ".crt"), os.path.join(out_dir, name + ".key")
    _write(keyp, _key_pem(key), 0o600)
    _write(crt, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return crt, keyp


def write_kubeconfig(path, clusters, current=None):
    """clusters: [(name, server, ca_path, token)]; one context per cluster named like it,
    user `<name>-admin`. The CA is referenced by absolute path."""
    doc = {"apiVersion": "v1", "kind": "Config", "preferences": {},
           "clusters": [], "users": [], "contexts": []}
    for name, server, ca_path, token in clusters:
        doc["clusters"].append({"name": name, "cluster": {
            "server": server, "certificate-authority": os.path.abspath(ca_path)}})
        doc["users"].append({"name": "%s-admin" % name, "user": {"token": token}})
        doc["contexts"].append({"name": name, "context": {"cluster": name,
                                                           "user": "%s-admin" % name}})
    doc["current-context"] = current or (clusters[0][0] if clusters else "")
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    _write(path, yaml.safe_dump(doc, sort_keys=False).encode(), 0o600)
    return path
