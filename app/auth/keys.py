"""Asymmetric signing keys (contract 11.3): which algorithm a key signs with, its public JWK,
and PEM in and out. An HMAC secret is a plain string and signs HS256 alone; an Ed25519 key signs
EdDSA alone and an ECDSA P-256 key ES256 alone, so no token verifies under a key of another kind."""

import base64
import hashlib
import json

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

HMAC = "HS256"
ASYMMETRIC = ("EdDSA", "ES256")
# A key of the ring: an HMAC secret, or an asymmetric key (private where it signs, public where
# it only verifies: a rotated-out key still accepted).
AsymmetricKey = (ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey | ec.EllipticCurvePrivateKey
                 | ec.EllipticCurvePublicKey)
Key = str | AsymmetricKey
_PRIVATE = (ed25519.Ed25519PrivateKey, ec.EllipticCurvePrivateKey)


def algorithm_of(key: Key) -> str:
    """The one algorithm `key` signs and verifies with."""
    if isinstance(key, str):
        return HMAC
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return "EdDSA"
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return "ES256"
    raise ValueError("a signing key is an HMAC secret, an Ed25519 key or an ECDSA P-256 key")


def verifying(key: Key) -> Key:
    """What verifies `key`'s signatures: the public half of a private key, else the key itself."""
    return key.public_key() if isinstance(key, _PRIVATE) else key


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_jwk(key: AsymmetricKey, kid: str | None = None) -> dict[str, str]:
    """The public JWK of `key` (RFC 7517, 8037), with `kid` (its RFC 7638 thumbprint unless
    given), its alg and use."""
    public = verifying(key)
    algorithm = algorithm_of(public)
    if algorithm == "EdDSA":
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        members = {"crv": "Ed25519", "kty": "OKP", "x": _b64(raw)}
    else:
        numbers = public.public_numbers()
        members = {"crv": "P-256", "kty": "EC", "x": _b64(numbers.x.to_bytes(32, "big")),
                   "y": _b64(numbers.y.to_bytes(32, "big"))}
    return {**members, "kid": kid or thumbprint(members), "alg": algorithm, "use": "sig"}


def thumbprint(members: dict[str, str]) -> str:
    """RFC 7638: the SHA-256 of the key's required members in order, base64url."""
    return _b64(hashlib.sha256(json.dumps(members, separators=(",", ":"), sort_keys=True).encode()).digest())


def kid_of(key: AsymmetricKey) -> str:
    return public_jwk(key)["kid"]


def generate(algorithm: str) -> str:
    """A new private key for `algorithm` (EdDSA or ES256), as unencrypted PKCS#8 PEM."""
    key = ed25519.Ed25519PrivateKey.generate() if algorithm == "EdDSA" else ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def load_private(pem: str) -> AsymmetricKey:
    """A private key from PEM; ValueError unless it is an unencrypted Ed25519 or P-256 key."""
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an unencrypted PEM private key ({exc})") from None
    algorithm_of(key)
    return key


def load_public(pem: str) -> AsymmetricKey:
    """A public key from PEM (the public half of a private key's PEM too); ValueError unless it
    is an Ed25519 or P-256 key."""
    if "PRIVATE KEY" in pem:
        return verifying(load_private(pem))
    try:
        key = serialization.load_pem_public_key(pem.encode())
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a PEM public key ({exc})") from None
    algorithm_of(key)
    return key
