#!/usr/bin/env python3
"""Writes sealed.json: known-answer cases for the sealed records of the
idempotency package (the layout in idempotency/doc.go), computed here from
the documented construction, independently of the Go code
(idempotency/record_test.go checks the Go code against them).

    python3 idempotency/testdata/sealed.py > idempotency/testdata/sealed.json

Needs the `cryptography` package for AES and AES-GCM; HKDF and the
XAES-256-GCM key derivation (C2SP) are written out below.
"""
import hashlib, hmac, json, struct, sys

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM


def hkdf(key: bytes, info: bytes) -> bytes:
    prk = hmac.new(bytes(32), key, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()


def key_id(key: bytes) -> bytes:
    return hkdf(key, b"ctoken.key-id")[:4]


def aes_block(key: bytes, block: bytes) -> bytes:
    e = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return e.update(block) + e.finalize()


def xaes_seal(key: bytes, nonce: bytes, pt: bytes, ad: bytes) -> bytes:
    l = int.from_bytes(aes_block(key, bytes(16)), "big")
    k1 = (l << 1) & ((1 << 128) - 1)
    if l >> 127:
        k1 ^= 0x87
    kx = b""
    for i in (1, 2):
        m = int.from_bytes(bytes([0, i, ord("X"), 0]) + nonce[:12], "big")
        kx += aes_block(key, (m ^ k1).to_bytes(16, "big"))
    return nonce + AESGCM(kx).encrypt(nonce[12:], pt, ad)


SEAL_LABEL = b"ctoken.idempotency record xaes-256-gcm key"


def seal(key: bytes, nonce: bytes, store_id: str, fp: bytes, pt: bytes, version=1) -> bytes:
    header = bytes([version]) + key_id(key)
    ad = header + struct.pack(">Q", len(store_id.encode())) + store_id.encode() + fp
    return header + xaes_seal(hkdf(key, SEAL_LABEL), nonce, pt, ad)


def head(major, n):
    if n < 24:
        return bytes([major << 5 | n])
    if n < 0x100:
        return bytes([major << 5 | 24, n])
    if n < 0x10000:
        return bytes([major << 5 | 25]) + struct.pack(">H", n)
    return bytes([major << 5 | 26]) + struct.pack(">I", n)


def text(s):
    b = s.encode()
    return head(3, len(b)) + b


def response(status, header, body: bytes, too_large=False):
    """The EncodeResponse form (vectors.py has the same encoder)."""
    pairs = [(1, head(0, 1)), (2, head(0, status))]
    if header:
        flat = [x for kv in header for x in kv]
        pairs.append((3, head(4, len(flat)) + b"".join(text(x) for x in flat)))
    if body:
        pairs.append((4, head(2, len(body)) + body))
    if too_large:
        pairs.append((5, b"\xf5"))
    return head(5, len(pairs)) + b"".join(head(0, k) + v for k, v in pairs)


keys = [bytes(range(32)), bytes(range(0x40, 0x60)), bytes(range(0x80, 0xa0))]
ring = [0, 1]  # keys[2] is not in the ring
sid = "idem:Ps7eROKAUE1cGyKTbRtb4ly3Eqrh8VdByNLyIU4hOWs"
fp = bytes([2]) + hashlib.sha256(b"request").digest()
out = {
    "about": "Known-answer sealed records of github.com/ctoken/ctoken/idempotency, written by sealed.py from the documented layout.",
    "keys_hex": [k.hex() for k in keys],
    "ring": ring,
    "sealed": [],
    "rejects": [],
}
for name, k, store_id, nonce, pt in [
    ("201 with headers and a body", 0, sid, bytes(range(24)),
     response(201, [("Content-Type", "application/json"), ("Location", "/payments/1")], b'{"id":"pay_1","amount":100}')),
    ("too-large marker", 0, sid, bytes(range(0x10, 0x28)), response(200, [], b"", True)),
    ("under the previous key (rotation)", 1, sid, bytes(range(0x20, 0x38)), response(204, [], b"")),
    ("empty store ID", 0, "", bytes(range(0x30, 0x48)), response(422, [("Content-Type", "application/octet-stream")], bytes(range(256)))),
]:
    out["sealed"].append({
        "name": name, "key": k, "store_id": store_id, "fingerprint_hex": fp.hex(), "nonce_hex": nonce.hex(),
        "plaintext_hex": pt.hex(), "sealed_hex": seal(keys[k], nonce, store_id, fp, pt).hex(),
    })

good_pt = response(201, [("Content-Type", "application/json")], b"{}")
good = seal(keys[0], bytes(range(24)), sid, fp, good_pt)


def flip(b: bytes, i: int) -> bytes:
    b = bytearray(b)
    b[i] ^= 0x01
    return bytes(b)


for name, b, store_id, f, why in [
    ("empty", b"", sid, fp, "malformed"),
    ("shorter than the overhead", good[:44], sid, fp, "malformed"),
    ("version 2", seal(keys[0], bytes(range(24)), sid, fp, good_pt, version=2), sid, fp, "malformed"),
    ("version byte flipped", flip(good, 0), sid, fp, "malformed"),
    ("key not in the ring", seal(keys[2], bytes(range(24)), sid, fp, good_pt), sid, fp, "unknown_key"),
    ("key id flipped", flip(good, 1), sid, fp, "unknown_key"),
    ("nonce byte flipped", flip(good, 5), sid, fp, "forged"),
    ("last nonce byte flipped", flip(good, 28), sid, fp, "forged"),
    ("ciphertext byte flipped", flip(good, 29), sid, fp, "forged"),
    ("tag byte flipped", flip(good, len(good) - 1), sid, fp, "forged"),
    ("truncated by one byte", good[:-1], sid, fp, "forged"),
    ("a byte appended", good + b"\x00", sid, fp, "forged"),
    ("another store ID", good, sid[:-1] + "X", fp, "forged"),
    ("another fingerprint", good, sid, flip(fp, 32), "forged"),
    ("authentic, not a response", seal(keys[0], bytes(range(24)), sid, fp, b"\xa0"), sid, fp, "undecodable"),
]:
    out["rejects"].append({"name": name, "store_id": store_id, "fingerprint_hex": f.hex(), "sealed_hex": b.hex(), "fault": why})

json.dump(out, sys.stdout, indent=1, ensure_ascii=True)
sys.stdout.write("\n")
