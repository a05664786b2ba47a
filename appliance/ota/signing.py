"""Ed25519 keys and manifest signatures (the ``cryptography`` package).

Keys are PEM files: the private key PKCS#8 (mode 0600), the public key SubjectPublicKeyInfo. A key is named
by its id, the first 16 hex digits of the SHA-256 of its raw 32-byte public key. ``manifest.sig`` is JSON:
``{"algorithm": "ed25519", "key_id": "...", "signature": "<base64 of 64 bytes>"}``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, cast

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from appliance.ota.errors import OtaError, OtaRejected


class KeyFileError(OtaError):
    """A key file is missing or is not an Ed25519 key in PEM form."""


def key_id(public_raw: bytes) -> str:
    return hashlib.sha256(public_raw).hexdigest()[:16]


def _id_of(public_key: Ed25519PublicKey) -> str:
    return key_id(public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def generate_keypair(private_path: Path, public_path: Path) -> str:
    """Write a new key pair (refusing to overwrite); returns the key id."""
    for path in (private_path, public_path):
        if path.exists():
            raise KeyFileError(f"{path} already exists; refusing to overwrite a key")
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM,
                                               serialization.PublicFormat.SubjectPublicKeyInfo)
    private_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(private_pem)
    public_path.parent.mkdir(parents=True, exist_ok=True)
    public_path.write_bytes(public_pem)
    return _id_of(key.public_key())


def _load_pem_key(path: Path, want: type) -> object:
    """Read one PEM key file of the kind ``want`` (an Ed25519 key class; abstract, so typed as a plain ``type``);
    every way it can be wrong is a KeyFileError naming the file."""
    private = want is Ed25519PrivateKey
    try:
        data = Path(path).read_bytes()
        key = (serialization.load_pem_private_key(data, password=None) if private
               else serialization.load_pem_public_key(data))
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read {'private' if private else 'public'} key: {exc.strerror}") from None
    except (ValueError, TypeError) as exc:
        form = "an unencrypted PEM private key" if private else "a PEM public key"
        raise KeyFileError(f"{path}: not {form}: {exc}") from None
    if not isinstance(key, want):
        expected = "an Ed25519 key" if private else "an Ed25519 public key"
        raise KeyFileError(f"{path}: not {expected} ({type(key).__name__})")
    return key


def load_private_key(path: Path) -> Ed25519PrivateKey:
    return cast(Ed25519PrivateKey, _load_pem_key(path, Ed25519PrivateKey))


def load_public_key(path: Path) -> Ed25519PublicKey:
    return cast(Ed25519PublicKey, _load_pem_key(path, Ed25519PublicKey))


def sign_manifest(manifest_bytes: bytes, private_key: Ed25519PrivateKey) -> bytes:
    sig = private_key.sign(manifest_bytes)
    doc = {"algorithm": "ed25519", "key_id": _id_of(private_key.public_key()),
           "signature": base64.b64encode(sig).decode()}
    return (json.dumps(doc, indent=2) + "\n").encode()


@dataclass(frozen=True)
class TrustedKeys:
    """The public keys this device accepts, by key id."""

    keys: dict[str, Ed25519PublicKey]

    @classmethod
    def from_paths(cls, paths: Iterable[Path]) -> "TrustedKeys":
        """PEM files, or directories of ``*.pub``/``*.pem`` files."""
        keys: dict[str, Ed25519PublicKey] = {}
        for path in map(Path, paths):
            files = sorted([*path.glob("*.pub"), *path.glob("*.pem")]) if path.is_dir() else [path]
            for file in files:
                key = load_public_key(file)
                keys[_id_of(key)] = key
        return cls(keys)

    def verify(self, manifest_bytes: bytes, signature_doc: bytes | None) -> str:
        """Return the signing key id, or raise OtaRejected (unsigned, unknown_key, bad_signature, corrupt)."""
        if signature_doc is None:
            raise OtaRejected("unsigned", "the bundle has no manifest.sig")
        try:
            doc = json.loads(signature_doc.decode("utf-8"))
            if not isinstance(doc, dict) or doc.get("algorithm") != "ed25519":
                raise ValueError("algorithm must be 'ed25519'")
            kid, sig = str(doc["key_id"]), base64.b64decode(doc["signature"], validate=True)
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, ValueError, binascii.Error) as exc:
            raise OtaRejected("corrupt", f"manifest.sig is not a valid signature document: {exc}") from None
        if not self.keys:
            raise OtaRejected("unknown_key", f"signed by key {kid}, but no trusted keys are configured "
                                             "(ota.trusted_keys): OTA updates are off on this device")
        key = self.keys.get(kid)
        if key is None:
            trusted = ", ".join(sorted(self.keys)) or "none configured"
            raise OtaRejected("unknown_key", f"signed by key {kid}, which is not trusted here (trusted: {trusted})")
        try:
            key.verify(sig, manifest_bytes)
        except InvalidSignature:
            raise OtaRejected("bad_signature", f"the signature by key {kid} does not match the manifest") from None
        return kid
