#!/usr/bin/env python3
"""Writes vectors.json: known-answer cases for the idempotency package,
computed here from the documented formats, independently of the Go code
(idempotency/vectors_test.go checks the Go code against them).

    python3 idempotency/testdata/vectors.py > idempotency/testdata/vectors.json

Standard library only. JSON bodies use integers and ASCII strings, for
which json.dumps(sort_keys, compact) is the RFC 8785 canonical form.
"""
import base64, hashlib, json, struct, sys


def lp(s: bytes) -> bytes:
    return struct.pack(">Q", len(s)) + s


def store_id(caller, route, key):
    h = hashlib.sha256(b"ctoken/idempotency store id v1\x00" + lp(caller.encode()) + lp(route.encode()) + lp(key.encode()))
    return "idem:" + base64.urlsafe_b64encode(h.digest()).decode().rstrip("=")


def is_json(ct):
    mt = ct.split(";", 1)[0].strip().lower()
    if "/" not in mt:
        return False
    typ, sub = mt.split("/", 1)
    return typ == "application" and (sub == "json" or (len(sub) > 5 and sub.endswith("+json")))


def coding(ce):
    return ",".join(c.strip(" \t").lower() for c in ce.split(",") if c.strip(" \t"))


def fingerprint(method, path, query, ct, body: bytes, ce=""):
    media = ct.split(";", 1)[0].strip(" \t").lower()
    kind, digest = b"R", hashlib.sha256(body).digest()
    if not coding(ce) and is_json(ct):
        try:
            obj = json.loads(body.decode("utf-8"))
            canon = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
            kind, media, digest = b"J", "", hashlib.sha256(canon).digest()
        except ValueError:
            pass
    h = hashlib.sha256(b"ctoken/idempotency request v2\x00" + lp(method.encode()) + lp(path.encode()) + lp(query.encode())
                       + lp(coding(ce).encode()) + kind + lp(media.encode()) + digest)
    return bytes([2]) + h.digest()


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
    pairs = [(1, head(0, 1)), (2, head(0, status))]
    if header:
        flat = [x for kv in header for x in kv]
        pairs.append((3, head(4, len(flat)) + b"".join(text(x) for x in flat)))
    if body:
        pairs.append((4, head(2, len(body)) + body))
    if too_large:
        pairs.append((5, b"\xf5"))
    return head(5, len(pairs)) + b"".join(head(0, k) + v for k, v in pairs)


out = {
    "about": "Known-answer vectors of github.com/ctoken/ctoken/idempotency, written by vectors.py from the documented formats.",
    "store_id": [],
    "fingerprint": [],
    "response": [],
    "response_rejects": [],
    "key": [],
}
for caller, route, key in [
    ("alice", "POST /payments", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
    ("bob", "POST /payments", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
    ("alice", "POST /refunds", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
    ("ab", "c", "d"),
    ("a", "bc", "d"),
    ("", "", "k"),
    ("user:42", "", 'a "quoted" \\ key'),
]:
    out["store_id"].append({"caller": caller, "route": route, "key": key, "id": store_id(caller, route, key)})

for method, path, query, ct, body, *rest in [
    ("POST", "/payments", "", "application/json", b'{"amount":100,"currency":"eur"}'),
    ("POST", "/payments", "", "application/json; charset=utf-8", b' {\n "currency" : "eur", "amount":100 } '),
    ("POST", "/payments", "", "Application/Merge-Patch+JSON", b'{"b":[1,2],"a":{"y":1,"x":"z"}}'),
    ("POST", "/payments", "", "text/plain", b'{"amount":100,"currency":"eur"}'),
    ("POST", "/payments", "", "application/json", b'{"amount":'),
    ("POST", "/payments", "", "application/json", b""),
    ("POST", "/payments", "", "", b""),
    ("PATCH", "/payments/p%2F1", "expand=customer&x=1", "application/octet-stream", bytes(range(256))),
    ("POST", "/payments", "dry=1", "application/json", b'{"amount":100,"currency":"eur"}'),
    ("POST", "/payments", "", "application/json", b'{"amount":100,"currency":"eur"}', "gzip"),
    ("POST", "/payments", "", "application/json", b'{"amount":100,"currency":"eur"}', " GZip ,, br"),
    ("POST", "/payments", "", "application/octet-stream", b'{"amount":100,"currency":"eur"}'),
    ("POST", "/payments", "", "Text/Plain; charset=utf-8", b'{"amount":100,"currency":"eur"}'),
    ("POST", "/upload", "", "image/png", b"\x89PNG", "identity"),
]:
    ce = rest[0] if rest else ""
    out["fingerprint"].append({
        "method": method, "escaped_path": path, "raw_query": query, "content_type": ct, "content_encoding": ce,
        "body_hex": body.hex(), "fingerprint_hex": fingerprint(method, path, query, ct, body, ce).hex(),
    })

for status, header, body, too_large in [
    (201, [("Content-Type", "application/json"), ("Location", "/payments/1")], b'{"id":"pay_1","amount":100}', False),
    (200, [], b"", False),
    (204, [("Etag", '"v1"'), ("Link", "</a>; rel=a"), ("Link", "</b>; rel=b")], b"", False),
    (422, [("Content-Type", "application/octet-stream")], bytes(range(256)) * 2, False),
    (599, [], b"x" * 23, False),
    (200, [], b"", True),
]:
    out["response"].append({
        "status": status, "header": [list(kv) for kv in header], "body_hex": body.hex(), "too_large": too_large,
        "cbor_hex": response(status, header, body, too_large).hex(),
    })

good = response(201, [("Content-Type", "application/json")], b"{}")
for name, b in [
    ("empty", b""),
    ("not a map", bytes([0x80])),
    ("empty map", bytes([0xa0])),
    ("version 2", head(5, 2) + b"\x01\x02\x02" + head(0, 200)),
    ("version missing", head(5, 1) + b"\x02" + head(0, 200)),
    ("status missing", head(5, 1) + b"\x01\x01"),
    ("status 199", head(5, 2) + b"\x01\x01\x02" + head(0, 199)),
    ("status 600", head(5, 2) + b"\x01\x01\x02" + head(0, 600)),
    ("unknown key 6", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x06\x01"),
    ("duplicate key", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x02" + head(0, 201)),
    ("keys out of order", head(5, 2) + b"\x02" + head(0, 200) + b"\x01\x01"),
    ("status as a non-minimal integer", head(5, 2) + b"\x01\x01\x02\x19\x00\xc8"),
    ("odd header array", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x03" + head(4, 1) + text("Content-Type")),
    ("header name not a token", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x03" + head(4, 2) + text("Bad Name") + text("v")),
    ("header value with LF", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x03" + head(4, 2) + text("X-A") + text("a\nb")),
    ("header value with a trailing space", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x03" + head(4, 2) + text("X-A") + text("a ")),
    ("body as a text string", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x04" + text("hi")),
    ("empty body present", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x04" + head(2, 0)),
    ("too large false present", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x05\xf4"),
    ("too large with a body", head(5, 4) + b"\x01\x01\x02" + head(0, 200) + b"\x04" + head(2, 1) + b"x" + b"\x05\xf5"),
    ("tagged status", head(5, 2) + b"\x01\x01\x02\xc1" + head(0, 200)),
    ("indefinite-length body", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x04\x5f\x41x\xff"),
    ("invalid UTF-8 header value", head(5, 3) + b"\x01\x01\x02" + head(0, 200) + b"\x03" + head(4, 2) + text("X-A") + b"\x61\xff"),
    ("trailing byte", good + b"\x00"),
    ("truncated", good[:-1]),
]:
    out["response_rejects"].append({"name": name, "cbor_hex": b.hex()})

for header, key in [
    ('"8e03978e-40d5-43e8-bc93-6894a57f9324"', "8e03978e-40d5-43e8-bc93-6894a57f9324"),
    ('  "a b"  ', "a b"),
    ('"a\\"b\\\\c"', 'a"b\\c'),
    ('"' + "k" * 255 + '"', "k" * 255),
    ('"~!#$%&\'()*+,-./:;<=>?@[]^_`{|}"', "~!#$%&'()*+,-./:;<=>?@[]^_`{|}"),
    # Bare keys: visible ASCII except '"', '\\', ',' and ';'; the key is the
    # value as sent, spaces around it trimmed.
    ("8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
    ("  8e03978e-40d5-43e8-bc93-6894a57f9324  ", "8e03978e-40d5-43e8-bc93-6894a57f9324"),
    ("1763962740123456789_AbC-d_", "1763962740123456789_AbC-d_"),
    ("stainless-go-retry-0b8a6f1e-3c2d-4e5f-9a7b-1c2d3e4f5a6b", "stainless-go-retry-0b8a6f1e-3c2d-4e5f-9a7b-1c2d3e4f5a6b"),
    ("q83vEjRWeJA+/w==", "q83vEjRWeJA+/w=="),
    ("abc", "abc"),
    ("42", "42"),
    (":YWJj:", ":YWJj:"),
    ("k" * 255, "k" * 255),
    ("~!#$%&'()*+-./:<=>?@[]^_`{|}", "~!#$%&'()*+-./:<=>?@[]^_`{|}"),
]:
    out["key"].append({"header": header, "key": key})
for header, why in [
    ('""', "length"),
    ('"' + "k" * 256 + '"', "length"),
    ("k" * 256, "length"),
    ("", "malformed"),
    ("   ", "malformed"),
    ("a b", "malformed"),
    ("a;p=1", "malformed"),
    ("a,b", "malformed"),
    ("a, b", "malformed"),
    ('a"b', "malformed"),
    ("a\\b", "malformed"),
    ("\t8e03978e", "malformed"),
    ("8e03978e\x7f", "malformed"),
    ("caf\u00e9", "malformed"),
    ('"abc', "malformed"),
    ('"a"b"', "malformed"),
    ('"a";p=1', "malformed"),
    ('"a", "b"', "malformed"),
    ('"a\\n"', "malformed"),
    ('"a\tb"', "malformed"),
    ('"\u00e9"', "malformed"),
    ('\t"a"', "malformed"),
]:
    out["key"].append({"header": header, "error": why})

json.dump(out, sys.stdout, indent=1, ensure_ascii=True)
sys.stdout.write("\n")
